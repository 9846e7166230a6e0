"""The curves of runs in flight (agent/run/live.py) and what the night hands the early-stop
rule (agent/night/early_stops.py): read live, placed on the budget, compared with the right
partner, calibrated on pairs derived from the ledger alone."""
from __future__ import annotations

import threading
from pathlib import Path

from agent.decide.early_stop import EarlyStopSettings
from agent.decide.sequential import SequentialRule
from agent.night.early_stops import MEAN, SAME_SEED, EarlyStopping, aligned, finished_pairs
from agent.record.curves import Curve, CurvePoint, mean_curve
from agent.record.records import Direction
from agent.run.live import LiveCurves
from agent.record.events import (ExperimentProposed, LoopStarted, Role, RunFinished, RunStarted,
                                 RunStoppedEarly)
from agent.record.state import fold
from sandbox import Status
from sandbox.outcome import CappedLog

# What examples/hf_trainer/run_train.py printed on the real transformers 5.24 (stdout and
# stderr on one pipe, as the sandbox gives them): its progress bar on stderr, and every 20
# steps of 98 a log dict on stdout whose numbers are strings, `{'loss': '4.845', ...}`.
TRAINER_LOG = Path(__file__).parents[1] / "fixtures" / "hf_trainer_run.log"

BASE, CAND = "b" * 40, "c" * 40


def test_a_run_s_lines_become_its_curve_as_they_are_printed():
    marks = []
    live = LiveCurves(marks=(0.25, 0.5), on_mark=lambda: marks.append(1))
    live.start("r", budget_s=10.0)
    for line in ("device: cpu | layers 2",                                     # not progress
                 "step 0 | loss 5.5 | lr 0.0e+00 | batch 64 | context 128 | elapsed 0.2s",
                 "step 50 | loss 3.1 | lr 1.0e-02 | batch 64 | context 128 | elapsed 2.6s",
                 "step 90 | loss 2.9 | lr 1.0e-02 | batch 64 | context 128 | elapsed 5.1s",
                 "  3%|▎  | 3/100 [00:01<00:30, 3.0it/s]"):                       # an eval bar: earlier
        live.feed("r", line)
    curve = live.curve("r")
    assert [(p.fraction, p.loss, p.step) for p in curve.points] == [(0.02, 5.5, 0), (0.26, 3.1, 50), (0.51, 2.9, 90)]
    assert curve.batch_shape == "64x128" and curve.placed == "elapsed" and len(marks) == 2
    assert live.finish("r") == curve and live.curve("r") == Curve()     # forgotten once finished
    live.start("quiet", budget_s=10.0)
    assert live.finish("quiet") is None                                 # no progress lines: no curve


def test_the_real_trainer_s_log_dicts_become_its_curve_on_the_steps_of_its_bar(tmp_path):
    live = LiveCurves(marks=(0.25, 0.5, 0.75))
    live.start("hf", budget_s=120.0)
    log = CappedLog(tmp_path / "log.txt", 1 << 20, lambda line: live.feed("hf", line))
    log.write(TRAINER_LOG.read_bytes())        # split into lines and bar updates as a run's are
    log.close()
    curve = live.finish("hf")
    # the four dicts of training, each at the bar's count when it was printed (drawn at most
    # every 0.1 s: a step or two behind the 20, 40, 60, 80 it was logged at)...
    assert [p.loss for p in curve.points] == [4.845, 3.646, 3.222, 3.052]
    assert all(0 <= 20 * k - p.step <= 3 for k, p in enumerate(curve.points, 1))
    assert curve.placed == "steps" and curve.total_steps == 98     # not the evaluation's bar
    assert [p.fraction for p in curve.points] == [round(p.step / 98, 5) for p in curve.points]
    assert curve.points[0].lr == 0.0008977
    # ...and not the summary at its end, whose train_loss (3.567) is the whole run's mean
    assert 3.567 not in [p.loss for p in curve.points]


def test_lines_from_many_threads_keep_each_run_s_order():
    live = LiveCurves()
    for run in ("a", "b"):
        live.start(run, budget_s=100.0)

    def feed(run):
        for i in range(2000):
            live.feed(run, f"step {i} | loss {5 - i / 1000:.3f} | elapsed {i * 0.05:.2f}s")
    threads = [threading.Thread(target=feed, args=(run,)) for run in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for run in ("a", "b"):
        fractions = [p.fraction for p in live.curve(run).points]
        assert fractions == sorted(fractions) and len(fractions) > 64   # thinned, never reordered
        assert len(live.finish(run).points) <= 64                      # compact for the ledger


def test_nanogpt_lines_without_a_clock_are_compared_step_for_step():
    # placed on the harness's clock (start-up included), both curves go on their steps over
    # the incumbent's last step: a slower candidate is not "behind" for being slower
    slow = Curve(tuple(CurvePoint(0.1 + 0.004 * k, 3 - k / 100, step=k * 10) for k in range(1, 51)), placed="clock")
    fast = Curve(tuple(CurvePoint(0.05 + 0.002 * k, 3 - k / 100, step=k * 10) for k in range(1, 101)), placed="clock")
    mine, theirs = aligned(slow, fast, total=1000)
    assert mine.placed == theirs.placed == "steps" and mine.reached == 0.5 and theirs.reached == 1.0
    assert [p.loss for p in mine.points] == [p.loss for p in theirs.points[:50]]
    elapsed = Curve((CurvePoint(0.5, 2.0, step=10),), placed="elapsed")
    assert aligned(elapsed, elapsed, total=1000) == (elapsed, elapsed)      # its own clock: kept


def test_the_mean_curve_averages_where_every_run_reached():
    a = Curve((CurvePoint(0.0, 4.0, 0, 0.01), CurvePoint(1.0, 2.0, 100, 0.01)), "64x64")
    b = Curve((CurvePoint(0.1, 4.2, 10, 0.01), CurvePoint(0.9, 2.6, 90, 0.01)), "64x64")
    mean = mean_curve([a, b])
    assert mean.points[0].fraction == 0.1 and mean.points[-1].fraction == 0.9
    assert mean.points[0].loss == (3.8 + 4.2) / 2 and mean.batch_shape == "64x64"
    assert mean_curve([a]) == a and mean_curve([]) is None


def _run(run_id, commit, seed, role, metric, loss_at_end, experiment=None, status=Status.OK):
    curve = Curve(tuple(CurvePoint(f / 10, 3 - f / 10 + (loss_at_end - 2) * f / 10, f * 10)
                        for f in range(1, 11)), "64x64", placed="elapsed")
    return RunFinished(run_id=run_id, commit=commit, seed=seed, role=role, experiment=experiment,
                       status=status, metric=metric if status == Status.OK else None, curve=curve)


def test_partners_and_pairs_come_from_the_ledger_alone():
    events = [LoopStarted(tag="t", base_commit=BASE)]
    for seed, value in ((0, 2.0), (1, 2.1), (1000, 2.05)):
        events += [RunStarted(run_id=f"ref{seed}", commit=BASE, seed=seed, role=Role.REFERENCE),
                   _run(f"ref{seed}", BASE, seed, Role.REFERENCE, value, value)]
    events += [ExperimentProposed(id="e0001", commit=CAND, parent=BASE),
               RunStarted(run_id="c1", commit=CAND, seed=1000, role=Role.CANDIDATE, experiment="e0001"),
               _run("c1", CAND, 1000, Role.CANDIDATE, 2.35, 2.3, "e0001"),
               RunStarted(run_id="c2", commit=CAND, seed=1001, role=Role.CANDIDATE, experiment="e0001"),
               _run("c2", CAND, 1001, Role.CANDIDATE, 2.4, 2.4, "e0001")]
    state = fold(events)
    stopping = EarlyStopping(EarlyStopSettings(), SequentialRule(), Direction.MINIMIZE)
    same = stopping.partner(state, BASE, 1000)
    assert same.kind == SAME_SEED and same.final == 2.05
    mean = stopping.partner(state, BASE, 1001)          # the incumbent never ran seed 1001
    assert mean.kind == MEAN and abs(mean.final - (2.0 + 2.1 + 2.05) / 3) < 1e-12
    going = Curve((CurvePoint(0.3, 2.5, 30),))
    assert stopping.partner(state, BASE, 1001, lambda c, s: going, paired=True).final is None
    assert stopping.partner(state, BASE, 1001, lambda c, s: going, paired=False).kind == MEAN
    pairs = finished_pairs(stopping, state)
    assert [round(p.final_gap, 6) for p in pairs] == [round(2.05 - 2.35, 6), round(mean.final - 2.4, 6)]
    assert all(set(p.gaps) == {0.25, 0.5, 0.75} for p in pairs)
    # a stopped run is no pair: it never finished as a result (even had it ended OK)
    stopped = fold(events + [RunStoppedEarly(run_id="c3", experiment="e0001", seed=1002, checkpoint=0.5,
                                             reached=0.5, gap=-0.2, predicted=-0.4, interval=(-0.6, -0.2),
                                             bound=-0.2, pairs=5, partner=SAME_SEED, saved_s=10.0),
                             _run("c3", CAND, 1002, Role.CANDIDATE, 2.5, 2.5, "e0001")])
    assert len(finished_pairs(EarlyStopping(EarlyStopSettings(), SequentialRule(), Direction.MINIMIZE), stopped)) == 2


def test_reference_runs_are_never_judged_and_a_silent_candidate_is_said_unpaired_at_its_end():
    stopping = EarlyStopping(EarlyStopSettings(), SequentialRule(), Direction.MINIMIZE)
    state = fold([LoopStarted(tag="t", base_commit=BASE), ExperimentProposed(id="e0001", commit=CAND, parent=BASE)])
    reference = RunStarted(run_id="r", commit=BASE, seed=1000, role=Role.REFERENCE)
    curve = Curve(tuple(CurvePoint(f / 10, 9.0, f) for f in range(1, 10)))
    assert stopping.check(state, reference, curve, None, lambda c, s: None, 60.0) is None
    silent = RunFinished(run_id="q", commit=CAND, seed=1000, role=Role.CANDIDATE, experiment="e0001",
                         status=Status.OK, metric=2.0)
    why = stopping.finished(silent)
    assert why.run_id == "q" and "no progress lines" in why.reason
    assert stopping.finished(silent) is None                       # once per run
    assert stopping.finished(_run("r2", BASE, 1, Role.REFERENCE, 2.0, 2.0)) is None
    off = EarlyStopping(EarlyStopSettings(mode="off"), SequentialRule(), Direction.MINIMIZE)
    assert off.finished(silent) is None


def test_where_a_seed_fixes_the_run_the_new_incumbent_s_selecting_run_is_the_partner():
    """In the paired regime the keep rule pairs the next candidates on the seeds that selected
    the incumbent (its candidate runs there); early stopping compares with that same run."""
    events = [LoopStarted(tag="t", base_commit=BASE)]
    for seed, value in ((0, 2.0), (1, 2.1)):
        events += [RunStarted(run_id=f"ref{seed}", commit=BASE, seed=seed, role=Role.REFERENCE),
                   _run(f"ref{seed}", BASE, seed, Role.REFERENCE, value, value)]
    events += [ExperimentProposed(id="e0001", commit=CAND, parent=BASE),
               RunStarted(run_id="c1", commit=CAND, seed=1000, role=Role.CANDIDATE, experiment="e0001"),
               _run("c1", CAND, 1000, Role.CANDIDATE, 1.7, 1.7, "e0001")]
    state = fold(events)
    stopping = EarlyStopping(EarlyStopSettings(), SequentialRule(), "minimize")
    same = stopping.partner(state, CAND, 1000)           # CAND as the incumbent, on its seed
    assert same.kind == SAME_SEED and same.final == 1.7 and same.curve.points
    assert stopping.partner(state, BASE, 1000).kind == MEAN   # another commit's run is no partner
