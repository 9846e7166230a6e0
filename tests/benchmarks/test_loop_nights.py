"""benchmarks/keep_rule/loop_nights.py's target does what the benchmark counts on: each knob moves the
metric by its known effect, a seed shifts every commit alike (seed_effect), a rerun by a
jitter of sd 0.005, inert knobs do nothing, and the drift follows the clock. And the
single-run rule it simulates keeps the wins."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from benchmarks.keep_rule.loop_nights import (EFFECT, HARMFUL, INERT, LEVEL, NULLS, WINS, seed_effect,
                                    single_run, target_source)


def measure(tmp_path, source: str, seed: int) -> float:
    (tmp_path / "target.py").write_text(source)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = {**os.environ, "NIGHTSHIFT_SEED": str(seed), "NIGHTSHIFT_OUT": str(out)}
    subprocess.run([sys.executable, str(tmp_path / "target.py")], env=env, check=True)
    return json.loads((out / "result.json").read_text())["val_bpb"]


def test_the_target_has_the_known_effects(tmp_path):
    knobs = list(EFFECT)
    base = target_source(knobs, salt=3, start=0.0, night_s=1.0, drift=0.0)
    for seed in (0, 1000):
        off = measure(tmp_path, base, seed)
        assert off == pytest.approx(LEVEL + seed_effect(3, seed), abs=0.03)
        for name in ("WIDER", "NO_DECAY", "TIE_EMBED", "LOG_EVERY"):
            on = measure(tmp_path, base.replace(f"{name} = 0", f"{name} = 1"), seed)
            assert on - off == pytest.approx(EFFECT[name], abs=0.03), name
    assert seed_effect(3, 0) != seed_effect(3, 1) and seed_effect(3, 0) == seed_effect(3, 0)
    # the drift follows the clock: a night of 100 s that started 100 s ago has drifted by DRIFT
    drifted = target_source(knobs, salt=3, start=time.time() - 100, night_s=100.0, drift=-0.5)
    assert measure(tmp_path, drifted, 0) - measure(tmp_path, base, 0) == pytest.approx(-0.5, abs=0.05)


def test_the_single_run_rule_keeps_the_wins_and_not_the_harmful_change():
    order = list(WINS) + list(HARMFUL) + list(NULLS) + list(INERT)
    night = single_run(order, salt=3, drift=0.0)
    assert night.keeps["win"] == 3 and night.keeps["harmful"] == 0
    assert night.progress == pytest.approx(-sum(WINS.values()))
    assert night.runs == {"candidates": len(order) + 1}


def test_a_scaled_night_copies_each_knob_with_its_kind_and_effect(tmp_path):
    from benchmarks.keep_rule.loop_nights import KIND, scaled
    knobs = scaled(list(WINS) + list(NULLS), 3)
    assert len(knobs) == 3 * (len(WINS) + len(NULLS)) and len(set(knobs)) == len(knobs)
    assert KIND["WIDER_X3"] == "win" and EFFECT["WIDER_X3"] == EFFECT["WIDER"]
    source = target_source(knobs, salt=3, start=0.0, night_s=1.0, drift=0.0)
    off = measure(tmp_path, source, 0)
    on = measure(tmp_path, source.replace("WIDER_X2 = 0", "WIDER_X2 = 1"), 0)
    assert on - off == pytest.approx(EFFECT["WIDER"], abs=0.03)
    with pytest.raises(SystemExit):
        scaled(knobs, 0)


def test_under_redraw_a_null_redraws_the_seeds_luck_as_the_single_run_computes_it(tmp_path):
    from benchmarks.keep_rule.loop_nights import redrawing
    knobs = list(WINS) + list(NULLS)
    redrawn = redrawing(knobs, True)
    assert redrawn == list(NULLS) and redrawing(knobs, False) == []
    source = target_source(knobs, salt=3, start=0.0, night_s=1.0, drift=0.0, redraw=True)
    off = measure(tmp_path, source, 5)
    assert off == pytest.approx(LEVEL + seed_effect(3, 5, "/0000"), abs=0.03)
    # a null on: its level is the incumbent's, its seed's luck a draw of its own
    on = measure(tmp_path, source.replace("BIAS = 0", "BIAS = 1"), 5)
    assert on == pytest.approx(LEVEL + seed_effect(3, 5, "/0100"), abs=0.03)
    assert abs(seed_effect(3, 5, "/0100") - seed_effect(3, 5, "/0000")) > 1e-6
    # a win keeps the seed's luck (it is not one of the redrawing knobs)
    win = measure(tmp_path, source.replace("WIDER = 0", "WIDER = 1"), 5)
    assert win - off == pytest.approx(EFFECT["WIDER"], abs=0.03)
    night = single_run(knobs, salt=3, drift=0.0, redrawn=redrawn)
    assert night.keeps["win"] == 3


def test_the_sound_floor_owes_four_runs_a_keep_one_a_discard_and_the_records_fresh_seeds():
    from benchmarks.keep_rule.loop_nights import sound_floor
    order = list(NULLS) + list(WINS) + list(HARMFUL)
    floor = sound_floor(order, baseline=2)
    assert floor.keeps == {"win": 3, "null": 0, "harmful": 0, "inert": 0}
    assert floor.progress == pytest.approx(-sum(WINS.values()))
    # 3 keeps: 2 candidate runs and 2 incumbent runs each; 5 discards: 1 run each; the first and
    # the last incumbent on the 2 baseline seeds
    assert floor.runs == {"references": 2 + 2 + 3 * 2, "candidates": 5 + 3 * 2}
    assert sound_floor(order, baseline=3).total_runs == floor.total_runs + 2
    # a night without a win owes the baseline and one run a proposal, as the single run does
    losers = sound_floor(list(NULLS) + list(HARMFUL), baseline=1)
    assert losers.total_runs == single_run(list(NULLS) + list(HARMFUL), salt=3, drift=0.0).total_runs
    assert losers.progress == 0.0
