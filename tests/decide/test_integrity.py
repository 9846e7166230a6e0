"""agent/decide/integrity.py: the rule table of a run, in order, and the experiment-level flags."""
import random

import pytest

from agent.decide.integrity import (IGNORES_SEED_RATIO, RunEvidence, StepEvidence, judge_experiment,
                                    judge_run)
from agent.record.events import Role, RunFinished
from sandbox import Status

OK_PROBES = {"artifact": {"ok": True, "detail": "fine"}, "shape": {"ok": True, "detail": "fine"},
             "causality": {"ok": True, "detail": "0 nats"}}


def train(status=Status.OK, reason="", **metrics) -> StepEvidence:
    return StepEvidence(status=status, reason=reason, metrics=metrics, duration_s=63.0)


def evaluation(value=2.0, probes=None, status=Status.OK, **more) -> StepEvidence:
    metrics = {"val_bpb": value, "probes": probes or OK_PROBES, **more}
    return StepEvidence(status=status, metrics=metrics, duration_s=4.0)


def judged(**kw):
    return judge_run(RunEvidence(metric="val_bpb", **{"evaluated": True, **kw}))


def test_an_honest_run_carries_the_evaluators_metric_and_the_scripts_claim():
    verdict = judged(training=train(val_bpb=2.04), evaluation=evaluation(2.0))
    assert (verdict.status, verdict.metric, verdict.reported, verdict.measured_by) == (Status.OK, 2.0, 2.04, "evaluator")
    assert [p.name for p in verdict.probes] == ["artifact", "shape", "causality"]


@pytest.mark.parametrize("evidence, status, words", [
    (dict(training=None, start_error="no engine"), Status.CRASH, "could not start: no engine"),
    (dict(training=train(), evaluation=evaluation(status=Status.INTERRUPTED), tampered=("prepare.py",)),
     Status.INTERRUPTED, ""),
    (dict(training=train(), evaluation=evaluation(), tampered=("train/prepare.py",)), Status.TAMPERED, "train/prepare.py"),
    (dict(training=train(), evaluation=evaluation(), data_changed=("data",)), Status.TAMPERED, "data folder data"),
    (dict(training=StepEvidence(Status.CRASH, "boom", hidden_read=("val",))), Status.LEAK, "hidden val split"),
    (dict(training=train(Status.OOM, "killed for memory")), Status.OOM, "killed for memory"),
    (dict(training=train(), evaluation=None, start_error="image missing"), Status.BAD_ARTIFACT, "image missing"),
    (dict(training=train(), evaluation=StepEvidence(Status.OK, metrics={"val_bpb": 1.0}, hidden_read=("test",))),
     Status.LEAK, "evaluation opened the hidden test"),
    (dict(training=train(), evaluation=evaluation(probes={**OK_PROBES, "causality": {"ok": False, "detail": "moved 0.5"}})),
     Status.LOOKAHEAD, "causality probe failed: moved 0.5"),
    (dict(training=train(), evaluation=evaluation(probes={**OK_PROBES, "memorization": {"ok": False, "detail": "+2.1 bpb"}})),
     Status.LEAK, "memorization probe failed: +2.1 bpb"),
    (dict(training=train(), evaluation=evaluation(probes={**OK_PROBES, "guard": {"ok": False, "detail": "compile code"}})),
     Status.BAD_ARTIFACT, "guard check failed: compile code"),
    (dict(training=train(), evaluation=evaluation(probes={"artifact": {"ok": False, "detail": "no model"}})),
     Status.BAD_ARTIFACT, "artifact check failed: no model"),
    (dict(training=train(), evaluation=evaluation(status=Status.TIMEOUT)), Status.BAD_ARTIFACT, "ended timeout"),
    (dict(training=train(), evaluation=StepEvidence(Status.NO_METRIC, "no val_bpb", metrics={})), Status.NO_METRIC, "no val_bpb"),
    (dict(training=train(val_bpb=1.8), evaluation=evaluation(2.0)), Status.MISREPORTED, "reported val_bpb 1.8"),
])
def test_the_first_rule_that_holds_gives_the_status(evidence, status, words):
    verdict = judged(**evidence)
    assert verdict.status == status and words in verdict.reason and verdict.metric is None


def test_without_an_evaluation_step_the_script_is_the_measure():
    verdict = judge_run(RunEvidence(metric="val_bpb", training=train(val_bpb=1.7)))
    assert (verdict.status, verdict.metric, verdict.measured_by) == (Status.OK, 1.7, "script")


def test_a_report_inside_the_tolerance_is_not_a_misreport():
    assert judged(training=train(val_bpb=2.09), evaluation=evaluation(2.0)).status == Status.OK
    tight = judge_run(RunEvidence(metric="val_bpb", training=train(val_bpb=2.09), evaluated=True,
                                  evaluation=evaluation(2.0), report_tolerance=0.01))
    assert tight.status == Status.MISREPORTED


# ---- experiment-level -----------------------------------------------------------------------

def run(seed, value, duration=70.0, role=Role.CANDIDATE, fingerprint=(), gap=None, commit="c"):
    metrics = {"generalization_gap": gap} if gap is not None else {}
    return RunFinished(run_id=f"{commit}{seed}{role.value}", commit=commit, seed=seed, role=role,
                       status=Status.OK, metric=value, duration_s=duration, fingerprint=tuple(fingerprint),
                       metrics=metrics)


def fingerprint(seed, noise=0.1, base=None):
    rng = random.Random(seed)
    base = base or [3.0 + random.Random(99).random() for _ in range(128)]
    return [b + rng.gauss(0, noise) for b in base]


def flag(cand, ref, wall_clock=True):
    return judge_experiment(cand, ref, budget_s=60.0, wall_clock=wall_clock, metric="val_bpb")


def test_a_training_step_longer_than_its_pair_is_over_budget_on_a_wall_clock_night_only():
    ref = [run(1000, 2.0, 65.0, Role.REFERENCE, commit="i")]
    assert flag([run(1000, 1.9, 69.9)], ref) is None                   # 4.9 s: inside 2 s + 5 % of 60 s
    over = flag([run(1000, 1.9, 90.0)], ref)
    assert over.verdict.value == "over_budget" and over.evidence["allowed_s"] == 5.0
    assert flag([run(1000, 1.9, 90.0)], ref, wall_clock=False) is None   # a step-budgeted script
    assert flag([run(1001, 1.9, 90.0)], ref) is None                   # no pair on that seed yet
    # seeds that share nothing are not paired: then the incumbent's median is the measure
    refs = ref + [run(s, 2.0, 64.0 + s, Role.REFERENCE, commit="i") for s in range(3)]
    unpaired = flag([run(1001, 1.9, 90.0)], refs)
    assert unpaired.verdict.value == "over_budget" and unpaired.evidence["paired"] is False
    assert "the incumbent's median 65.0 s" in unpaired.reason


@pytest.mark.parametrize("budget, longer", [(15.0, 0.25), (60.0, 0.10)])
def test_the_allowance_is_the_incumbents_own_spread_and_catches_a_quarter_at_15s_and_a_tenth_at_60s(budget, longer):
    """On idle cores the incumbent's training steps vary by a few tenths of a second: the
    allowance is the floor plus four of those, so training 25 % past a 15-s budget or 10 %
    past a 60-s one is flagged, while an honest pair's difference (up to ~1.8 s) is not."""
    steps = [budget + 3.0 + d for d in (0.0, 0.2, -0.25, 0.3, -0.1, 0.15)]
    ref = [run(s, 2.0, d, Role.REFERENCE, commit="i") for s, d in zip((0, 1, 2, 3, 4, 1000), steps)]
    pair = steps[-1]
    assert flag_at(budget, [run(1000, 1.9, pair + 1.8)], ref) is None
    over = flag_at(budget, [run(1000, 1.9, pair + longer * budget)], ref)
    assert over.verdict.value == "over_budget" and over.evidence["spread_s"] < 0.4, over
    # on shared cores the incumbent's steps vary by seconds, and the allowance grows with them:
    # there the same overrun is inside the noise, and not flagged
    loaded = [run(s, 2.0, budget + 3.0 + d, Role.REFERENCE, commit="i") for s, d in zip(range(6), (0, 2, -2, 3, -1, 1.5))]
    assert flag_at(budget, [run(0, 1.9, budget + 3.0 + longer * budget)], loaded) is None


def flag_at(budget, cand, ref):
    return judge_experiment(cand, ref, budget_s=budget, wall_clock=True, metric="val_bpb")


def test_seeds_that_change_nothing_are_flagged_and_honest_seeds_are_not():
    ref = [run(s, 2.0 + 0.05 * s, role=Role.REFERENCE, commit="i", fingerprint=fingerprint(s)) for s in range(4)]
    honest = [run(s, 1.95 + 0.01 * (s - 1000), fingerprint=fingerprint(s + 10)) for s in (1000, 1001)]
    assert flag(honest, ref) is None
    same = flag([run(1000, 1.93), run(1001, 1.93)], ref)
    assert same.verdict.value == "ignores_seed" and "on every seed" in same.reason
    one_model = [run(s, 1.95 + 0.001 * (s - 1000), fingerprint=fingerprint(7, noise=0.1 * IGNORES_SEED_RATIO / 3))
                 for s in (1000, 1001)]
    alike = flag(one_model, ref)
    assert alike.verdict.value == "ignores_seed" and alike.evidence["candidate_spread"] < alike.evidence["incumbent_spread"]
    # models far better than the incumbent's are alike across seeds for another reason (they
    # converged): the fingerprints are not compared, the other checks judge such a candidate
    converged = [run(s, 1.0 + 0.001 * (s - 1000), fingerprint=fingerprint(7, noise=0.001)) for s in (1000, 1001)]
    assert flag(converged, ref) is None


def test_a_gap_closed_far_past_the_incumbents_spread_is_a_leak():
    ref = [run(s, 2.0, role=Role.REFERENCE, commit="i", gap=0.10 + 0.005 * s) for s in range(4)]
    assert flag([run(1000, 1.8, gap=0.05)], ref) is None                # closer, but inside 0.25
    assert flag([run(1000, 1.8, gap=-0.06)], ref) is None   # 0.16 closer: an honest longer context did that
    leak = flag([run(1000, 1.2, gap=-0.4)], ref)
    assert leak.verdict.value == "leak" and "seen the evaluation bytes" in leak.reason


def test_the_gap_is_measured_against_the_baseline_not_a_kept_incumbent():
    """A memorizer once kept (its gap 0.70, wider than the baseline's 0.35 by a lookup of the
    training sample) made every later candidate look 0.35 'closer' by its own bent gap: an
    honest one was flagged, and a memorizer that closed the gap hid behind it. The yardstick
    is the night's first incumbent's runs, which no candidate chose."""
    base = [run(s, 2.0, role=Role.REFERENCE, commit="b", gap=0.35 + 0.005 * s) for s in range(3)]
    kept = [run(s, 1.3, role=Role.REFERENCE, commit="i", gap=0.70 + 0.005 * s) for s in range(3)]
    honest = [run(1000, 1.95, gap=0.34)]
    memorizer = [run(1000, 1.2, gap=0.02)]
    judged = lambda cand, baseline: judge_experiment(cand, kept, budget_s=60.0, wall_clock=False,   # noqa: E731
                                                     metric="val_bpb", baseline=baseline)
    assert judged(honest, ()).verdict.value == "leak"              # the incumbent's yardstick: a false flag
    assert judged(honest, base) is None
    flagged = judged(memorizer, base)
    assert flagged.verdict.value == "leak" and flagged.evidence["baseline_gap"] == pytest.approx(0.355)
    assert "the baseline's +0.355" in flagged.reason
    # a ledger whose baseline runs carry no gap (recorded before there were any): the incumbent's
    old = [run(s, 2.0, role=Role.REFERENCE, commit="b") for s in range(3)]
    assert judged(honest, old).verdict.value == "leak"
