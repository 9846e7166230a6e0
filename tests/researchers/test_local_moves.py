"""Local moves: one step from the incumbent, inside every kind of space, in a trust region that
widens on keeps and narrows on discards."""
import random

from agent.target.knobs import parse_knobs
from agent.researchers.local_moves import (RADIUS_MAX, RADIUS_MIN, RADIUS_START, local_move,
                                           trust_radius)
from agent.researchers.prediction_stats import knob_distance

KNOBS = {k.name: k for k in parse_knobs(
    "LR = 3e-3        # search: log(1e-4, 3e-2)\n"
    "WD = 0.1         # search: float(0.0, 0.3)\n"
    "DEPTH = 4        # search: int(1, 12)\n"
    "ACT = 'relu2'    # search: choice('gelu', 'relu2', 'swiglu', 'silu')\n"
    "EDGE = 12        # search: int(1, 12)\n")}


def test_every_kind_of_knob_moves_inside_its_space_and_changes():
    rng = random.Random(0)
    for name, knob in KNOBS.items():
        for radius in (RADIUS_MIN, RADIUS_START, RADIUS_MAX):
            for _ in range(30):
                moved = local_move(knob, knob.value, radius, rng)
                assert moved is not None and moved != knob.value and knob.contains(moved), name


def test_a_step_is_the_radius_of_the_range_on_the_knobs_own_scale():
    rng = random.Random(1)
    for name in ("LR", "WD"):
        knob = KNOBS[name]
        for radius in (0.05, 0.15, 0.4):
            distances = [knob_distance([knob], {name: local_move(knob, knob.value, radius, rng)},
                                       {name: knob.value}) for _ in range(20)]
            assert all(d <= radius + 0.01 for d in distances)
            assert max(distances) >= radius * 0.8 or name == "WD"     # WD may hit a bound
    assert abs(local_move(KNOBS["DEPTH"], 4, 0.15, rng) - 4) == 2     # round(0.15 x 11) steps
    assert local_move(KNOBS["EDGE"], 12, 0.03, rng) == 11             # at a bound: the other way
    options = KNOBS["ACT"].choices
    assert abs(options.index(local_move(KNOBS["ACT"], "relu2", 0.1, rng)) - 1) == 1   # a neighbour


def test_the_trust_region_widens_on_keeps_and_narrows_on_everything_else():
    assert trust_radius([]) == RADIUS_START
    assert trust_radius(["keep"]) > RADIUS_START > trust_radius(["discard"])
    assert trust_radius(["keep"] * 20) == RADIUS_MAX
    assert trust_radius(["discard", "crash", "inconclusive"] * 10) == RADIUS_MIN
    assert trust_radius(["discard", "discard", "keep"]) < trust_radius(["keep", "discard", "keep"])
