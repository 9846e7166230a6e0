"""The brief an LLM researcher reads before proposing: the night so far, from the ledger.

Built from the typed `LoopState` (nothing is re-read from disk), in four sections ordered by
how often they change, so that a provider's prompt cache serves what did not:

- `setup`: the test a candidate must pass (budget, seed plan, alpha, min_effect, rule), the
  lines of the target that the command's flags override (editing them does nothing) and the
  device: fixed for the night;
- `incumbent`: its value on fresh seeds, the run metrics its training script reports
  (tokens/s, steps, memory, grad norm, MFU, ... whatever RunFinished.metrics holds), the
  kept experiments, and the tail of its training log: changes on a keep;
- `history`: every older experiment, one compact line each, in closed chunks of
  `CHUNK` experiments: changes once per chunk;
- `recent`: the latest experiments in full, one line each, and the prediction calibration.

An experiment line gives its id, verdict (a discard stopped early says so, with what its
curve predicted: never a measured effect), effect in the sign convention predictions are
made in (candidate − incumbent, metric units) with its interval, the seeds and p-value, the
prediction and whether it held, and the change. The size is bounded by construction: at
most `CHUNK + RECENT` full lines, compact lines beyond, and past `MAX_HISTORY_CHARS` the
oldest chunks shrink to one line of verdict counts each.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping

from agent.record.events import Direction, Role, RunFinished, Verdict
from agent.record.state import Experiment, LoopState

CHUNK = 50                 # experiments per closed history chunk
RECENT = 25                # at least this many latest experiments are shown in full
MAX_HISTORY_CHARS = 40_000
MAX_LOG_CHARS = 1_500
# result.json keys that are not measurements of the run (or are shown elsewhere).
_NOT_METRICS = {"status", "split", "seed", "budget_s", "knobs", "device"}


@dataclass(frozen=True)
class EvaluationPlan:
    """What program.md says about the test a candidate must pass."""

    metric: str
    direction: Direction
    budget_s: float
    seeds_baseline: int
    seeds_screen: int
    seeds_max: int
    alpha: float
    min_effect: float
    rule: str
    fdr: str = "none"
    evaluator: bool = False     # the metric is the evaluation step's, not the script's
    early_stop: tuple[float, ...] = ()   # checkpoints where a losing run may be stopped (none: off)
    target: str = ""
    fixed: tuple[str, ...] = ()   # lines of the target a command flag overrides: "batch_size (line 18) by --batch_size=12"

    def __post_init__(self) -> None:
        object.__setattr__(self, "direction", Direction(self.direction))


@dataclass(frozen=True)
class Brief:
    setup: str
    incumbent: str
    history: str           # "" until the first chunk closes
    recent: str

    def text(self) -> str:
        return "\n\n".join(part for part in (self.setup, self.incumbent, self.history, self.recent) if part)


def _g(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _signed(value: float) -> str:
    return f"{value:+.4f}" if abs(value) >= 1e-4 or value == 0 else f"{value:+.2e}"


def _delta(experiment: Experiment, direction: Direction) -> tuple[float, tuple[float, float] | None] | None:
    """The measured effect as candidate − incumbent (the prediction's convention), with its interval."""
    decision = experiment.decision.decision if experiment.decision else None
    if decision is None or decision.effect is None:
        return None
    sign = Direction(direction).sign
    interval = None
    if decision.interval is not None:
        lo, hi = sorted((sign * decision.interval[0], sign * decision.interval[1]))
        interval = (lo, hi)
    return sign * decision.effect, interval


def experiment_line(experiment: Experiment, direction: Direction, compact: bool = False) -> str:
    """One experiment in one line (see the module docstring)."""
    verdict = str(experiment.verdict or "running")
    parts = [f"{experiment.id} {verdict}"]
    stop = experiment.stopped_early
    if stop is not None and experiment.verdict == Verdict.DISCARD:
        # a discard stopped early: what its curve predicted, never read as a measurement
        sign = Direction(direction).sign
        lo, hi = sorted((sign * stop.interval[0], sign * stop.interval[1]))
        parts[0] += f" stopped early at {stop.checkpoint:.0%}"
        if not compact:
            parts.append(f"(its curve predicted Δ{_signed(sign * stop.predicted)} [{_signed(lo)}, "
                         f"{_signed(hi)}]; not a measurement)")
    measured = _delta(experiment, direction)
    decision = experiment.decision.decision if experiment.decision else None
    if measured is not None:
        delta, interval = measured
        text = f"Δ{_signed(delta)}"
        if interval and not compact:
            text += f" [{_signed(interval[0])}, {_signed(interval[1])}]"
        parts.append(text)
    ok = len(experiment.values())
    n = len(decision.seeds) if decision and decision.seeds else ok
    if n or experiment.runs:
        failed = len(experiment.runs) - ok
        parts.append(f"n={n}" + (f" ({failed} run{'s' if failed > 1 else ''} failed)" if failed > 0 else ""))
    if decision is not None and decision.p_value is not None and not compact:
        parts.append(f"p={decision.p_value:.2g}")
    prediction, score = experiment.prediction, experiment.score
    if prediction is not None and not compact:
        lo, hi = prediction.interval
        parts.append(f"| pred {_signed(prediction.expected_delta)} [{_signed(lo)}, {_signed(hi)}]"
                     f"@{prediction.confidence:.0%}")
    if score is not None:
        parts.append(("held" if score.covered else "missed") + ("" if score.direction_right else " (wrong direction)"))
    description = experiment.description.strip().replace("\n", " ")
    parts.append(f"| {description[:60 if compact else 100]}")
    reason = experiment.invalid_reason or (experiment.decision.reason if experiment.decision else "")
    if reason and experiment.verdict is not None and experiment.verdict.is_failure:
        parts.append(f"— {reason.strip().splitlines()[0][:60 if compact else 120]}")
    return " ".join(parts)


def _flagged(flagged: list[Experiment], plan: EvaluationPlan) -> str:
    """What was flagged and why, plainly, and the goal once more: not a warning, which the
    field reports make agents work around, but what counts."""
    better = Direction(plan.direction).best_word
    lines = [f"Flagged, not kept ({len(flagged)}): these changed how {plan.metric} was produced, "
             f"not how well the model learns:"]
    for experiment in flagged:
        reason = (experiment.decision.reason if experiment.decision else "").strip().splitlines()
        lines.append(f"- {experiment.id} {experiment.verdict}: {(reason[0] if reason else '')[:240]}")
    lines.append(f"What counts is the {better} {plan.metric} that the harness measures on held-out data, "
                 f"from a model trained within the budget on the training split, on the seeds it "
                 f"is given.")
    return "\n".join(lines)


def _setup(plan: EvaluationPlan, environment: Mapping[str, Any] | None, device: str | None) -> str:
    better = Direction(plan.direction).better_word
    lines = [
        "The test a candidate must pass:",
        f"- each run trains for {plan.budget_s:g} s of wall clock (NIGHTSHIFT_BUDGET_S), then "
        + (f"the harness's evaluator, in a sandbox of its own, scores the saved model: {plan.metric} "
           f"({better} is better) on held-out data the training step never sees;"
           if plan.evaluator else f"reports {plan.metric} ({better} is better);"),
        f"- the incumbent is measured on {plan.seeds_baseline} fresh seeds; a candidate runs "
        f"{plan.seeds_screen} seed(s) first and at most {plan.seeds_max}, on the incumbent's seeds;",
        f"- the {plan.rule} rule keeps it only when the paired difference is significant at "
        f"alpha {plan.alpha:g} and at least min_effect {plan.min_effect:g} {plan.metric}"
        + (f" (false discoveries controlled night-wide: {plan.fdr})" if plan.fdr != "none" else "") + ".",
    ]
    if plan.early_stop:
        lines.append(f"- a candidate run whose training loss, at {', '.join(f'{c:.0%}' for c in plan.early_stop)} "
                     f"of its budget, is confidently losing to the incumbent's on the same seed is "
                     f"stopped there: a discard stopped early, which is what its curve predicted, "
                     f"not a measured {plan.metric}; the loss a progress line prints is what it reads.")
    if plan.fixed:
        lines.append(f"Fixed by the command: its flags override these lines of {plan.target or 'the target'}, "
                     f"so editing them changes nothing that runs; do not spend an experiment on "
                     f"them: {'; '.join(plan.fixed)}.")
    env = environment or {}
    gpus = env.get("gpus") or []
    hardware = ", ".join(str(g).split(",")[0] for g in gpus) if gpus else f"CPU only ({env.get('cpu_model') or 'unknown CPU'})"
    facts = [f"device {device}" if device else None, hardware,
             f"{env['cpu_count']} CPU cores" if env.get("cpu_count") else None,
             f"torch {env['torch']}" if env.get("torch") else None,
             f"CUDA {env['cuda']}" if env.get("cuda") else None]
    lines.append("Where the runs execute: " + ", ".join(f for f in facts if f) + ".")
    return "\n".join(lines)


def _run_metrics(runs: list[RunFinished], metric: str) -> str:
    """Each numeric measurement of the runs: its mean over the runs (the spread when it varies)."""
    keys: list[str] = []
    for run in runs:
        keys += [k for k in run.metrics if k not in keys]
    shown = []
    for key in keys:
        if key in _NOT_METRICS or key == metric:
            continue
        values = [run.metrics.get(key) for run in runs]
        numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and math.isfinite(float(v))]
        if numbers:
            shown.append(f"{key} {_g(statistics.fmean(numbers))}")
    return " · ".join(shown)


def _incumbent(state: LoopState, plan: EvaluationPlan, incumbent_runs: list[RunFinished],
               kept: list[Experiment]) -> str:
    incumbent = state.incumbent
    if not incumbent:
        return "The incumbent has not been measured yet."
    reference = state.reference(incumbent)
    runs = [r for r in incumbent_runs if r.role == Role.REFERENCE]
    kept_by = next((e for e in kept if e.commit == incumbent), None)
    origin = f"kept in {kept_by.id}: {kept_by.description[:80]}" if kept_by else "the base commit"
    lines = [f"The incumbent {incumbent[:8]} ({origin})."]
    if reference:
        values = list(reference.values())
        spread = f" ± {statistics.stdev(values):.4g} (sd)" if len(values) > 1 else ""
        lines.append(f"{plan.metric} {statistics.fmean(values):.6g}{spread} over {len(values)} fresh seeds.")
    metrics = _run_metrics(runs, plan.metric)
    if metrics:
        lines.append(f"What its runs report (mean over its {len(runs)} reference runs): {metrics}.")
    if kept:
        listed = ", ".join(f"{e.id} ({_signed(d[0])})" if (d := _delta(e, plan.direction)) else e.id
                           for e in kept[-20:])
        latest = f"; the latest {len(kept[-20:])}" if len(kept) > 20 else ""
        lines.append(f"Kept so far ({len(kept)}{latest}): {listed}.")
    if runs and runs[-1].log_tail.strip():
        tail = runs[-1].log_tail.strip()[-MAX_LOG_CHARS:]
        lines.append(f"The end of its latest reference run's log (seed {runs[-1].seed}):\n<log>\n{tail}\n</log>")
    return "\n".join(lines)


def _chunk_summary(chunk: list[Experiment]) -> str:
    counts: dict[str, int] = {}
    for e in chunk:
        verdict = str(e.verdict or "running")
        counts[verdict] = counts.get(verdict, 0) + 1
    tally = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return f"{chunk[0].id}–{chunk[-1].id}: {tally} (ask show_experiment for any of them)"


def _split(experiments: list[Experiment]) -> int:
    """How many of the oldest experiments sit in closed chunks: a multiple of CHUNK leaving
    at least RECENT experiments in full, all of them decided."""
    closed = max(0, (len(experiments) - RECENT) // CHUNK * CHUNK)
    while closed and not all(e.decided for e in experiments[:closed]):
        closed -= CHUNK
    return closed


def build_brief(state: LoopState, plan: EvaluationPlan, *, noise_sd: float | None = None,
                noise_dof: int = 0, environment: Mapping[str, Any] | None = None) -> Brief:
    """The brief for the next proposal (see the module docstring)."""
    experiments = list(state.experiments.values())
    reference_runs = [r for r in state.runs if r.commit == state.incumbent and r.ok]
    kept = state.kept()
    device = next((str(r.metrics["device"]) for r in reversed(reference_runs) if r.metrics.get("device")), None)
    closed = _split(experiments)
    chunks = [experiments[i:i + CHUNK] for i in range(0, closed, CHUNK)]
    # The oldest chunks shrink to one-line summaries until the history fits. Found from the
    # newest chunk back, so a long night renders only the chunks shown in full, not all of them.
    rendered = [_chunk_summary(chunk) for chunk in chunks]
    size = sum(map(len, rendered))
    for i in reversed(range(len(chunks))):
        full = "\n".join(experiment_line(e, plan.direction, compact=True) for e in chunks[i])
        if size - len(rendered[i]) + len(full) > MAX_HISTORY_CHARS:
            break
        size += len(full) - len(rendered[i])
        rendered[i] = full
    history = ""
    if rendered:
        history = (f"Experiments {experiments[0].id}–{experiments[closed - 1].id}, one line each "
                   f"(Δ = candidate − incumbent in {plan.metric}; held = the measured Δ fell in "
                   f"the predicted interval):\n" + "\n".join(rendered))
    recent_lines = [experiment_line(e, plan.direction) for e in experiments[closed:]]
    noise = (f"Seed-to-seed noise of {plan.metric}: sd {noise_sd:.4g} (pooled over commits, {noise_dof} dof)."
             if noise_sd is not None else f"Seed-to-seed noise of {plan.metric}: not measured yet.")
    recent = [noise]
    if recent_lines:
        recent.append(f"{len(experiments)} experiments so far ({len(kept)} kept). "
                      + ("The latest, in full" if closed else "Each, in full")
                      + f" (Δ = candidate − incumbent in {plan.metric} with its interval, n = seeds, "
                        f"p = p-value, pred = your prediction @ its confidence):")
        recent += recent_lines
    else:
        recent.append("No experiments yet: this is the first.")
    cal = state.calibration()
    if cal.n:
        recent.append(f"Your predictions so far: direction right {cal.direction_accuracy:.0%}, intervals "
                      f"held {cal.coverage:.0%} at a claimed {cal.claimed_confidence:.0%} (n={cal.n}).")
    flagged = [e for e in experiments[closed:] if e.verdict is not None and e.verdict.is_integrity]
    if flagged:
        recent.append(_flagged(flagged, plan))
    failed = sum(1 for e in experiments if e.verdict is not None and e.verdict.is_failure
                 and e.verdict != Verdict.INVALID and not e.verdict.is_integrity)
    if failed:
        recent.append(f"{failed} experiments failed to run; show_experiment gives any one's diff and log tail.")
    return Brief(setup=_setup(plan, environment, device), incumbent=_incumbent(state, plan, reference_runs, kept),
                 history=history, recent="\n".join(recent))
