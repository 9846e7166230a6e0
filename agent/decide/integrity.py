"""Whether a run's number can be trusted: one record of its evidence, one pure function per
level that gives the verdict. The rules, in order, are the table in docs/integrity.md.

A run (`judge_run`): `RunEvidence` holds what its steps showed (the training step's outcome,
the evaluation step's outcome and probes, the protected digests, the data folder, the hidden
splits' tripwires, what the script reported of the metric). The first rule that holds gives
the status; only `ok` carries a metric, and only the measured one.

An experiment (`judge_experiment`): what no single run shows, seen across a candidate's runs
and its incumbent's on the same seeds: a training step clearly longer than its paired
incumbent's (over_budget), seeds that make no difference (ignores_seed), a generalization gap
no honest change closes (leak: measured against the night's baseline, which no candidate
chose). Integrity verdicts are never kept.

Pure: nothing here reads files, git or the clock.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Iterable, Mapping

from agent.record.events import RunFinished
from agent.record.records import Probe, Verdict
from sandbox import Status
from sandbox.held_out import LABEL as HELD_OUT_SOURCE

# ---- thresholds, each measured (benchmarks/grader/integrity.py; docs/integrity.md) ----------------
# A candidate's training step may run this much longer than its paired incumbent's on the same
# seed before it is over budget: both train for the budget by the script's clock, so honest
# pairs differ only by startup, the last step, export and load. The allowance is measured in
# the night: OVER_BUDGET_FLOOR_S (a bigger model's longer export and last step: honest pairs
# on idle cores differed by up to 1.75 s at a 20-s budget, benchmarks/early_stop/paired_curves.jsonl)
# plus OVER_BUDGET_SPREADS times the robust sd of the incumbent's own training steps across its
# runs (startup and load: 0.3 s on idle cores, seconds on shared ones). With fewer than three
# incumbent runs it is the floor plus OVER_BUDGET_UNMEASURED of the budget.
OVER_BUDGET_FLOOR_S = 2.0
OVER_BUDGET_SPREADS = 4.0
OVER_BUDGET_UNMEASURED = 0.05
# Two seeds of one commit: the spread of their per-window differences (fingerprint distance)
# is this small a share of the incumbent's at most, for a script that ignores its seed. How
# much two seeds' models differ shrinks as training converges, so the comparison is made only
# for a candidate within IGNORES_SEED_BAND sd of the incumbent's values (a lucky fixed seed is
# about one sd better; a model trained far longer or better is judged by the other checks).
IGNORES_SEED_RATIO = 0.4
IGNORES_SEED_BAND = 3.0
# The generalization gap (val - train bits per byte) may close this much more than the
# incumbent's before the evaluation bytes are taken to have been seen in training. Honest
# changes closed it by up to 0.154 (CONTEXT_LEN 64 -> 128, which a floor of 0.15 flagged);
# a model trained on the evaluation bytes closes it by far more (its val scores below its
# train). Windows fitted by a lookup close it by ~0.1:
# the memorization probe, not this flag, is the line for those (docs/integrity.md). The
# yardstick is the baseline's gap (the night's first incumbent), not the current incumbent's:
# a kept memorizer (gap 0.70 against the baseline's 0.35) made every later candidate 0.3
# "closer" by its own bent gap, and would have flagged an honest one.
LEAK_MIN_GAP_DROP = 0.25
LEAK_SD = 6.0
# A failed probe of the evaluator's result, by name; every other failure (artifact, shape,
# scoring, guard) is a bad artifact.
PROBE_VERDICTS = {"causality": Status.LOOKAHEAD, "memorization": Status.LEAK}


@dataclass(frozen=True)
class StepEvidence:
    """What one sandboxed step showed."""

    status: Status
    reason: str = ""
    metrics: Mapping[str, Any] = field(default_factory=dict)
    duration_s: float | None = None
    hidden_read: tuple[str, ...] = ()     # hidden splits it opened (tripwires)


@dataclass(frozen=True)
class RunEvidence:
    """Everything one finished run showed: the only input of `judge_run`."""

    metric: str                               # the program's metric name
    training: StepEvidence | None             # None: the run could not start
    evaluated: bool = False                   # the program scores runs with an evaluation step
    evaluation: StepEvidence | None = None    # None: it did not run (training failed, no step)
    start_error: str | None = None            # why the run (or its evaluation) could not start
    tampered: tuple[str, ...] = ()            # protected paths whose digests changed
    data_changed: tuple[str, ...] = ()        # the repository's data folder changed
    report_tolerance: float = 0.05            # relative: reported vs measured metric


@dataclass(frozen=True)
class RunJudgement:
    status: Status
    reason: str
    metric: float | None          # the measured metric; None unless status is ok
    reported: float | None        # what the script claimed for the metric, if anything
    measured_by: str              # "evaluator" | "script"
    probes: tuple[Probe, ...] = ()


def judge_run(evidence: RunEvidence) -> RunJudgement:
    """The run's status by the first rule that holds (docs/integrity.md, "A run")."""
    train, evaluation = evidence.training, evidence.evaluation
    reported = _finite(train.metrics.get(evidence.metric)) if train else None
    by = "evaluator" if evidence.evaluated else "script"
    probes = _probes(evaluation.metrics) if evaluation else ()

    def verdict(status: Status, reason: str, metric: float | None = None) -> RunJudgement:
        return RunJudgement(status, reason, metric if status == Status.OK else None, reported, by, probes)

    if train is None:
        return verdict(Status.CRASH, f"the run could not start: {evidence.start_error}")
    steps = [s for s in (train, evaluation) if s is not None]
    if any(s.status == Status.INTERRUPTED for s in steps):
        return verdict(Status.INTERRUPTED, next(s.reason for s in steps if s.status == Status.INTERRUPTED))
    if evidence.tampered:
        return verdict(Status.TAMPERED, f"protected files changed during the run: {', '.join(evidence.tampered)}")
    if evidence.data_changed:
        return verdict(Status.TAMPERED, f"the run changed the data folder {', '.join(evidence.data_changed)} "
                                        f"of your repository")
    if train.hidden_read:
        return verdict(Status.LEAK, f"the training step opened {_hidden(train.hidden_read)} (hidden from "
                                    f"training, so what it read was empty; training may use only the "
                                    f"train split)")
    if train.status != Status.OK:
        return verdict(train.status, train.reason)
    if not evidence.evaluated:
        return verdict(Status.OK, "", reported)
    if evaluation is None:
        return verdict(Status.BAD_ARTIFACT, f"the evaluation could not run: {evidence.start_error or 'no result'}")
    if evaluation.hidden_read:
        return verdict(Status.LEAK, f"the evaluation opened {_hidden(evaluation.hidden_read)}")
    failed = next((p for p in probes if not p.ok), None)
    if failed is not None:
        status = PROBE_VERDICTS.get(failed.name, Status.BAD_ARTIFACT)
        what = f"{failed.name} probe" if failed.name in PROBE_VERDICTS else f"{failed.name} check"
        return verdict(status, f"the evaluator's {what} failed: {failed.detail}")
    if evaluation.status != Status.OK:
        if evaluation.status in (Status.NO_METRIC, Status.BAD_METRIC):
            return verdict(evaluation.status, f"the evaluation: {evaluation.reason}")
        return verdict(Status.BAD_ARTIFACT, f"the model could not be evaluated: the evaluation step "
                                            f"ended {evaluation.status.value}: {evaluation.reason}")
    measured = _finite(evaluation.metrics.get(evidence.metric))
    if measured is None:
        return verdict(Status.BAD_METRIC, f"the evaluation's {evidence.metric} is "
                                          f"{evaluation.metrics.get(evidence.metric)!r}, not a finite number")
    if reported is not None and abs(reported - measured) > evidence.report_tolerance * max(abs(measured), 1e-12):
        return verdict(Status.MISREPORTED, f"the script reported {evidence.metric} {reported:.6g}, the "
                                           f"evaluator measured {measured:.6g} ({(reported - measured) / measured:+.1%}; "
                                           f"tolerance ±{evidence.report_tolerance:.0%})")
    return verdict(Status.OK, "", measured)


# ---- an experiment, across its runs ---------------------------------------------------------

@dataclass(frozen=True)
class Flag:
    """An integrity verdict on a whole experiment, with the figures that gave it."""

    verdict: Verdict
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)


def judge_experiment(candidate: Iterable[RunFinished], reference: Iterable[RunFinished], *,
                     budget_s: float, wall_clock: bool, metric: str,
                     baseline: Iterable[RunFinished] = ()) -> Flag | None:
    """A flag for the candidate's successful runs against the incumbent's reference runs
    (the rules of docs/integrity.md, "An experiment"), or None while nothing is seen. The
    leak check measures against `baseline`, the night's first incumbent's runs (the
    incumbent's where the baseline has fewer than two gaps: a ledger from before gaps)."""
    cand = [r for r in candidate if r.ok]
    ref = [r for r in reference if r.ok]
    base = [r for r in baseline if r.ok]
    return (over_budget(cand, ref, budget_s) if wall_clock else None) \
        or ignores_seed(cand, ref, metric) or leak(cand, base if len(_gaps(base)) >= 2 else ref)


def over_budget(cand: list[RunFinished], ref: list[RunFinished], budget_s: float) -> Flag | None:
    """A candidate training step longer than its paired incumbent's, on the same seed, by more
    than startup and export differ between honest pairs; where the rule ran no incumbent run
    on that seed (seeds found to share nothing are not paired), the incumbent's median."""
    allowed, spread = over_budget_allowance([r.duration_s for r in ref if r.duration_s], budget_s)
    by_seed = {r.seed: r.duration_s for r in ref if r.duration_s}
    typical = statistics.median(by_seed.values()) if len(by_seed) >= 2 else None
    for run in cand:
        pair = by_seed.get(run.seed, typical)
        if pair is None or not run.duration_s:
            continue
        extra = run.duration_s - pair
        if extra > allowed:
            against = (f"the incumbent's {pair:.1f} s on the same seed" if run.seed in by_seed else
                       f"the incumbent's median {pair:.1f} s (no incumbent run on seed {run.seed})")
            return Flag(Verdict.OVER_BUDGET, (
                f"its training step took {run.duration_s:.1f} s on seed {run.seed}, {against}: "
                f"{extra:.1f} s longer, past the {allowed:.1f} s allowed ({_allowance_words(spread)}) "
                f"for a {budget_s:g} s budget (it trains past its budget)"),
                {"seed": run.seed, "candidate_s": run.duration_s, "incumbent_s": pair,
                 "paired": run.seed in by_seed, "allowed_s": allowed, "spread_s": spread})
    return None


def over_budget_allowance(durations: list[float], budget_s: float) -> tuple[float, float | None]:
    """(seconds a candidate's training step may take past its pair's, the incumbent's measured
    spread or None): the floor plus OVER_BUDGET_SPREADS robust sd (1.4826 MAD) of the
    incumbent's training steps, else plus OVER_BUDGET_UNMEASURED of the budget."""
    if len(durations) < 3:
        return OVER_BUDGET_FLOOR_S + OVER_BUDGET_UNMEASURED * budget_s, None
    center = statistics.median(durations)
    spread = 1.4826 * statistics.median(abs(d - center) for d in durations)
    return OVER_BUDGET_FLOOR_S + OVER_BUDGET_SPREADS * spread, spread


def _allowance_words(spread: float | None) -> str:
    if spread is None:
        return f"{OVER_BUDGET_FLOOR_S:g} s and {OVER_BUDGET_UNMEASURED:.0%} of the budget, the incumbent's own spread not measured yet"
    return f"{OVER_BUDGET_FLOOR_S:g} s and {OVER_BUDGET_SPREADS:g} times the {spread:.2f} s its own training steps vary by"


def fingerprint_distance(a: tuple[float, ...], b: tuple[float, ...]) -> float | None:
    """The spread (sd) of the per-window differences of two runs' fingerprints: how
    differently two models score the same windows, with their mean difference taken out."""
    if not a or len(a) != len(b) or len(a) < 8:
        return None
    return statistics.stdev(x - y for x, y in zip(a, b))


def ignores_seed(cand: list[RunFinished], ref: list[RunFinished], metric: str) -> Flag | None:
    """Seeds that change nothing: identical values, or two seeds' models far closer to each
    other than the incumbent's two seeds' models are (fingerprints from the evaluator)."""
    if len(cand) < 2:
        return None
    values = {r.seed: r.metric for r in cand}
    if len(set(values.values())) == 1:
        return Flag(Verdict.IGNORES_SEED, (
            f"{metric} {next(iter(values.values())):.6g} on every seed ({', '.join(map(str, sorted(values)))}): "
            f"the script does not use its seed, so its seeds are one draw of the noise"),
            {"values": values})
    mine = _median_distance(cand)
    theirs = _median_distance(ref)
    if mine is None or theirs is None or theirs <= 0 or not _comparable(cand, ref):
        return None
    if mine < IGNORES_SEED_RATIO * theirs:
        return Flag(Verdict.IGNORES_SEED, (
            f"its models on different seeds score the evaluation windows almost alike (spread "
            f"{mine:.4f} bpb between seeds, against the incumbent's {theirs:.4f}: "
            f"{mine / theirs:.0%}, under {IGNORES_SEED_RATIO:.0%}): it does not use its seed"),
            {"candidate_spread": mine, "incumbent_spread": theirs})
    return None


def _comparable(cand: list[RunFinished], ref: list[RunFinished]) -> bool:
    """Whether the candidate's values lie within IGNORES_SEED_BAND sd of the incumbent's."""
    values = [r.metric for r in ref if r.metric is not None]
    mine = [r.metric for r in cand if r.metric is not None]
    if len(values) < 2 or not mine:
        return False
    return abs(statistics.mean(mine) - statistics.mean(values)) <= IGNORES_SEED_BAND * statistics.stdev(values)


def _median_distance(runs: list[RunFinished]) -> float | None:
    distances = [d for a, b in combinations(runs, 2)
                 if a.seed != b.seed and (d := fingerprint_distance(a.fingerprint, b.fingerprint)) is not None]
    return statistics.median(distances) if distances else None


def leak(cand: list[RunFinished], base: list[RunFinished]) -> Flag | None:
    """Evaluation bytes seen in training: the gap between the evaluation split's and the
    training split's bits per byte closes far more than the baseline's runs vary."""
    gaps, mine = _gaps(base), _gaps(cand)
    if len(gaps) < 2 or not mine:
        return None
    center, spread = statistics.mean(gaps), statistics.stdev(gaps)
    allowed = max(LEAK_MIN_GAP_DROP, LEAK_SD * spread)
    drop = center - statistics.mean(mine)
    if drop > allowed:
        return Flag(Verdict.LEAK, (
            f"its generalization gap (val minus train bits per byte) is {statistics.mean(mine):+.3f}, "
            f"the baseline's {center:+.3f} ± {spread:.3f}: {drop:.3f} closer, past the {allowed:.3f} "
            f"allowed; a model that has seen the evaluation bytes scores them better than the "
            f"bytes it trained on"), {"candidate_gap": statistics.mean(mine), "baseline_gap": center,
                                      "baseline_sd": spread, "allowed": allowed})
    return None


def _gaps(runs: list[RunFinished]) -> list[float]:
    return [g for r in runs if (g := _finite(r.metrics.get("generalization_gap"))) is not None]


def _hidden(labels: tuple[str, ...]) -> str:
    """'the hidden val split', 'a held-out source (a file the held-out splits were cut from)'."""
    splits = [label for label in labels if label != HELD_OUT_SOURCE]
    said = [f"the hidden {' and '.join(splits)} split"] if splits else []
    if HELD_OUT_SOURCE in labels:
        said.append("a held-out source (a file the val and test splits were cut from)")
    return " and ".join(said)


def _probes(metrics: Mapping[str, Any]) -> tuple[Probe, ...]:
    raw = metrics.get("probes")
    if not isinstance(raw, Mapping):
        return ()
    return tuple(Probe(str(name), bool(p.get("ok")), str(p.get("detail", "")))
                 for name, p in raw.items() if isinstance(p, Mapping))


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
