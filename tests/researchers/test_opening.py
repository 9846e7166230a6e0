"""The opening: each learning rate line-searched by factors of two before anything else."""
import pytest

from agent.researchers.opening import Step, is_learning_rate, next_move
from agent.target.knobs import parse_knobs

SOURCE = '''
MUON_LR = 0.02       # search: log(0.003, 0.1)
N_LAYER = 4          # search: int(2, 8)
LR = 0.01            # search: log(1e-4, 0.03)
DROPOUT = 0.1        # search: float(0.0, 0.5)
'''
KNOBS = parse_knobs(SOURCE)
INCUMBENT = {k.name: k.value for k in KNOBS}


@pytest.mark.parametrize("name, kind, expected", [
    ("LR", "log", True), ("MUON_LR", "log", True), ("lr_head", "float", True), ("--lr", "log", True),
    ("learning_rate", "log", True), ("learningRate", "log", True), ("--learning-rate", "log", True),
    ("peakLR", "log", True), ("LR", "choice", False), ("CLR_DECAY", "float", False),
    ("WARMUP_FRAC", "float", False), ("N_LAYER", "int", False)])
def test_a_learning_rate_is_named_one(name, kind, expected):
    knob = KNOBS[0].__class__(name=name, value=0.01, kind=kind, line=1, low=1e-4, high=1.0,
                              choices=(0.01, 0.1) if kind == "choice" else ())
    assert is_learning_rate(knob) is expected


def move(steps, incumbent=INCUMBENT):
    found = next_move(KNOBS, incumbent, [Step(*s) for s in steps])
    return None if found is None else (found.knob.name, found.up, found.value)


def test_the_first_learning_rate_listed_is_doubled_first():
    assert move([]) == ("MUON_LR", True, 0.04)


def test_a_lost_doubling_is_followed_by_a_halving_then_the_next_knob():
    assert move([("MUON_LR", True, "discard")]) == ("MUON_LR", False, 0.01)
    assert move([("MUON_LR", True, "discard"), ("MUON_LR", False, "discard")]) == ("LR", True, 0.02)


def test_a_kept_step_goes_on_the_same_way_until_it_stops_keeping():
    kept = {**INCUMBENT, "MUON_LR": 0.01}
    steps = [("MUON_LR", True, "discard"), ("MUON_LR", False, "keep")]
    assert move(steps, kept) == ("MUON_LR", False, 0.005)
    assert move(steps + [("MUON_LR", False, "inconclusive")], kept) == ("LR", True, 0.02)


def test_a_step_in_flight_moves_the_opening_to_the_next_knob_and_then_none_is_left():
    assert move([("MUON_LR", True, None)]) == ("LR", True, 0.02)
    assert move([("MUON_LR", True, None), ("LR", True, None)]) is None


def test_a_knob_at_its_bound_goes_the_other_way():
    at_top = {**INCUMBENT, "MUON_LR": 0.1}
    assert move([], at_top) == ("MUON_LR", False, 0.05)
    near_top = {**INCUMBENT, "MUON_LR": 0.08}
    assert move([], near_top) == ("MUON_LR", True, 0.1)   # clipped to the space, still a move up


def test_a_script_without_learning_rates_has_no_opening():
    knobs = parse_knobs("N_LAYER = 4  # search: int(2, 8)\n")
    assert next_move(knobs, {"N_LAYER": 4}, []) is None
