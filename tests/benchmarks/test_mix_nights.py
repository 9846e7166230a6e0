"""benchmarks/keep_rule/mix_nights.py's target does what the benchmark counts on: the mix is
mostly losers with three wins, each knob moves the final metric by its known effect, the
seeded regime shares a seed's luck between commits and the wall-clock regime does not, and
the curve it prints is read by the harness's progress reader and ends at the final value.
The single-run rule it simulates keeps what beats the best so far."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

from benchmarks.keep_rule.mix_nights import LEVEL, SD, mix, single_run, sound_floor, target_source
from sandbox.progress import ProgressReader


def measure(tmp_path, source: str, seed: int) -> tuple[float, list]:
    (tmp_path / "target.py").write_text(source)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = {**os.environ, "NIGHTSHIFT_SEED": str(seed), "NIGHTSHIFT_OUT": str(out), "NIGHTSHIFT_BUDGET_S": "0.4"}
    done = subprocess.run([sys.executable, str(tmp_path / "target.py")], env=env, check=True,
                          capture_output=True, text=True)
    reader = ProgressReader()
    points = [p for line in done.stdout.splitlines() if (p := reader.feed(line)) is not None]
    return json.loads((out / "result.json").read_text())["val_bpb"], points


def test_the_mix_is_mostly_losers_with_three_wins():
    proposals = mix(40)
    kinds = [p.kind for p in proposals]
    assert (kinds.count("win"), kinds.count("null"), kinds.count("loser")) == (3, 12, 25)
    losers = sorted(p.effect for p in proposals if p.kind == "loser")
    assert losers[0] == pytest.approx(0.25 * SD) and losers[-1] == pytest.approx(20 * SD)
    assert sum(p.redraws for p in proposals) == 4 and len(mix(10)) == 10


def test_the_target_has_the_known_effects_and_prints_a_curve_the_harness_reads(tmp_path):
    proposals = mix(10)
    seeded = target_source(proposals, "seeded", salt=3)
    base, points = measure(tmp_path, seeded, 0)
    assert len(points) >= 10 and all(p.step is not None and p.loss is not None and p.elapsed_s is not None
                                     for p in points)
    assert points[0].loss > base + 1.0 and points[-1].loss == pytest.approx(base, abs=0.2)
    win = next(p for p in proposals if p.kind == "win" and not p.lead)
    on, _ = measure(tmp_path, seeded.replace(f"{win.knob} = 0", f"{win.knob} = 1"), 0)
    assert on - base == pytest.approx(win.effect, abs=0.03)   # the seed's luck is shared: a re-run's jitter apart
    again, _ = measure(tmp_path, seeded, 0)
    assert again == pytest.approx(base, abs=0.03)
    # where seeds share nothing, the same seed twice differs by a run's whole spread
    wallclock = target_source(proposals, "wallclock", salt=3)
    values = [measure(tmp_path, wallclock, 0)[0] for _ in range(6)]
    assert statistics.stdev(values) > 0.02 and abs(statistics.mean(values) - LEVEL) < 0.2


def test_the_single_run_rule_and_the_floor_count_what_they_keep():
    proposals = mix(40)
    single = single_run(proposals, "seeded", salt=3, run_s=2.0)
    assert single.runs == 41 and single.run_s == 82.0
    assert single.keeps["win"] >= 2 and single.keeps["loser"] <= 2
    floor = sound_floor(proposals, run_s=2.0)
    assert floor.keeps == {"win": 3, "null": 0, "loser": 0} and floor.progress == pytest.approx(3.5)
    assert floor.big_wins == floor.big_kept == 2
