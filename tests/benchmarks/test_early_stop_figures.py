"""The early-stop benchmarks count what they claim: the replay of recorded pairs
(benchmarks/early_stop/early_stop_replay.py) and the simulated nights with curves
(benchmarks/sim/worker_nights.py). Figures, not timings."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.decide.curve_forecast import PRIOR
from agent.decide.early_stop import EarlyStopSettings
from benchmarks.sim import worker_nights
from benchmarks.early_stop import curve_prior
from benchmarks.sim.nights import NoiseModel, World, draw_effect
from benchmarks.early_stop.early_stop_replay import (FormatError, baseline, ceilings, main, read_pairs, replay,
                                          synthetic)


def pairs_file(path, n=40, seed=0):
    """Pairs with curves that show a candidate's final gap early and clearly: every third
    candidate is far worse, every fifth a null (no change at all: the same run twice). Each
    run has its own luck (sd 0.1 on its final, part of it on its curve as it trains), one
    incumbent run a seed."""
    rng = np.random.default_rng(seed)
    grid = np.arange(1, 21) / 20
    lines = []
    for i in range(n):
        null, worse = i % 5 == 0, i % 3 == 0 and i % 5 != 0
        gain = 0.0 if null else -2.0 if worse else float(rng.normal(0.3, 0.3))
        runs = {}
        for who, shift in (("incumbent", 0.0), ("candidate", -gain)):
            luck = rng.normal(0, 0.1)
            curve = [[float(f), 10 * k, float(4 - 2 * f + (shift + luck) * f + rng.normal(0, 0.01)), None]
                     for k, f in enumerate(grid)]
            runs[who] = {"final": 2.0 + shift + luck, "run_s": 100.0, "points": curve}
        lines.append(json.dumps({"seed": 1000 + i, "null": null, "direction": "minimize", **runs}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_replay_stops_clear_losers_and_counts_time_wins_and_false_keeps(tmp_path):
    pairs = read_pairs(pairs_file(tmp_path / "pairs.jsonl"))
    result = replay(pairs, EarlyStopSettings())
    worse = [i for i in range(40) if i % 3 == 0 and i % 5 != 0]
    # every far worse candidate but the first (no screen before three pairs): far beyond the
    # spread of the incumbents' curves, they need no calibration pairs
    assert result["stopped"] >= len(worse) - 1
    assert result["wins_lost"] == 0
    assert result["time_per_discard_early"] < result["time_per_discard_today"] == 100.0
    assert result["false_keeps_early"] <= result["false_keeps_today"]
    off = replay(pairs, EarlyStopSettings(mode="off"))
    assert off["stopped"] == 0 and off["time_per_discard_early"] == off["time_per_discard_today"]


def test_the_ceiling_stops_every_comparable_discard_and_no_unpaired_one(tmp_path):
    # Runs of 100 s with no start-up or evaluation parts known: a stop at f costs 0.1 + 0.8·f
    # of a run. Every discard of pairs_file can be compared, so the ceiling at 25 % saves
    # 1 − (0.1 + 0.2) = 70 %; with every curve unpaired (another context) it saves nothing.
    path = pairs_file(tmp_path / "pairs.jsonl")
    lines = ceilings(read_pairs(path), EarlyStopSettings()).lines
    assert "25%: 70% less" in lines[1] and "50%: 50% less" in lines[2], lines
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row["candidate"]["batch_shape"], row["incumbent"]["batch_shape"] = "64x32", "64x64"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    lines = ceilings(read_pairs(path), EarlyStopSettings()).lines
    assert lines[0].startswith("the most a rule could save (0 of") and "25%: 0% less" in lines[1]


def test_the_replay_reads_its_own_synthetic_files_and_refuses_others(tmp_path, capsys):
    synthetic(tmp_path / "syn.jsonl", 12, seed=1)
    assert main([str(tmp_path / "syn.jsonl"), "--cross"]) == 0
    out = capsys.readouterr().out
    assert "run time per discarded candidate" in out and "of the most a rule could save" in out
    assert "each half of the seeds replayed with a prior measured on the other half" in out
    (tmp_path / "bad.jsonl").write_text('{"candidate": {"final": 1}}\n')
    with pytest.raises(FormatError, match="bad.jsonl:1"):
        read_pairs(tmp_path / "bad.jsonl")
    assert main([str(tmp_path / "bad.jsonl")]) == 2


@pytest.mark.parametrize("workers", [1, 4])
def test_simulated_nights_stop_losing_candidate_runs_and_never_prematurely(workers):
    key = [3, 0, workers]
    effects, streams = np.random.default_rng(key + [0]), np.random.default_rng(key + [1])
    result = worker_nights.night(
        "nightshift", workers, lambda: draw_effect("large", effects), World(streams, NoiseModel(0.0, 0.47)),
        np.random.default_rng(key + [2]), np.random.default_rng(key + [3]), runs_per_worker=60)
    assert result.stopped > 0 and result.premature == 0
    assert result.saved_time > 0 and result.decided <= result.candidates
    today = worker_nights.night(
        "today", workers, lambda: draw_effect("large", effects), World(streams, NoiseModel(0.0, 0.47)),
        np.random.default_rng(key + [2]), np.random.default_rng(key + [3]), runs_per_worker=60)
    assert today.stopped == 0 and today.saved_time == 0


def test_the_default_prior_is_what_the_real_pairs_measure():
    # agent/decide/curve_forecast.py's PRIOR is benchmarks/early_stop/curve_prior.py's rule applied to
    # benchmarks/early_stop/paired_curves.jsonl: change either and this says so (39 comparable
    # pairs since a batch-count change pairs; the prior measured on the 38 before is the same)
    pairs = read_pairs(Path(__file__).parents[2] / "benchmarks" / "early_stop" / "paired_curves.jsonl")
    settings = EarlyStopSettings()
    lines = curve_prior.fit(pairs, settings, baseline(pairs, settings))
    assert [line.pairs for line in lines] == [39, 39, 39]
    measured = curve_prior.prior_from(lines)
    assert (measured.slope, measured.residuals) == (PRIOR.slope, PRIOR.residuals)
    first, second = curve_prior.split(pairs)
    assert {p.seed for p in first}.isdisjoint({p.seed for p in second}) and len(first) + len(second) == 45
