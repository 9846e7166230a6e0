"""The compact ledger summary a researcher reads before proposing.

Bounded by construction: the last `recent` experiments in full one-liners, older ones only
counted, kept commits always listed. Hundreds of experiments stay a few kilobytes.
"""
from __future__ import annotations

import statistics
from typing import Callable

from agent.record.events import Verdict
from agent.record.state import Experiment, LoopState


def _mean(experiment: Experiment) -> str:
    values = experiment.values()
    if not values:
        return "-"
    spread = f"±{statistics.stdev(values):.4f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.4f}{spread} (n={len(values)})"


def _line(experiment: Experiment) -> str:
    decided = experiment.decision
    evidence = ""
    if decided is not None and decided.effect is not None:
        p = decided.p_value
        evidence = f" effect {decided.effect:+.4f}" + (f" p={p:.3g}" if p is not None else "")
    reason = experiment.invalid_reason or (decided.reason if decided else "")
    verdict = experiment.verdict
    why = f" — {reason[:100]}" if verdict not in (Verdict.KEEP, Verdict.DISCARD) and reason else ""
    return (f"{experiment.id} [{verdict or 'running'}] {experiment.description[:100]}"
            f" | metric {_mean(experiment)}{evidence}{why}")


def ledger_summary(state: LoopState, metric: str, recent: int = 25) -> str:
    experiments = list(state.experiments.values())
    reference = state.reference(state.incumbent) if state.incumbent else {}
    kept = state.kept()
    lines = [f"{len(experiments)} experiments so far; {len(kept)} kept."]
    if reference:
        values = list(reference.values())
        spread = f" ± {statistics.stdev(values):.4f} (seed sd)" if len(values) > 1 else ""
        lines.append(f"Incumbent {state.incumbent[:8]}: {metric} {statistics.fmean(values):.4f}"
                     f"{spread} over {len(values)} fresh seeds.")
    if kept:
        lines.append("Kept, in order:")
        lines += [f"  {_line(e)}" for e in kept[-recent:]]
    verdicts: dict[str, int] = {}
    for e in experiments[:-recent]:
        key = str(e.verdict or "running")
        verdicts[key] = verdicts.get(key, 0) + 1
    if verdicts:
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(verdicts.items()))
        lines.append(f"Older experiments (not listed): {counts}.")
    if experiments:
        lines.append(f"Last {min(recent, len(experiments))} experiments:")
        lines += [f"  {_line(e)}" for e in experiments[-recent:]]
    cal = state.calibration()
    if cal.n:
        lines.append(f"Your predictions so far: direction right {cal.direction_accuracy:.0%}, "
                     f"intervals covered {cal.coverage:.0%} at claimed "
                     f"{cal.claimed_confidence:.0%} (n={cal.n}).")
    return "\n".join(lines)


def experiment_detail(state: LoopState, experiment_id: str, diff_of: Callable[[str], str],
                      max_log_chars: int = 3000) -> str:
    """One experiment in full for a researcher that asks: its diff, decision and log tails.

    `diff_of(commit)` returns the commit's patch against its parent (the workspace's diff)."""
    experiment = state.experiments.get(experiment_id.strip())
    if experiment is None:
        known = ", ".join(list(state.experiments)[-5:]) or "none yet"
        return f"no experiment {experiment_id!r}; recent ids: {known}"
    parts = [_line(experiment), f"hypothesis: {experiment.hypothesis}"]
    if experiment.prediction:
        parts.append(f"prediction: {experiment.prediction.to_dict()}")
    diff = diff_of(experiment.commit) if experiment.commit else experiment.diff
    parts.append("diff:\n" + (diff or "(none)"))
    for run in experiment.runs:
        tail = (run.log_tail or "")[-max_log_chars // max(1, len(experiment.runs)):]
        parts.append(f"run seed {run.seed} [{run.status.value}] {run.reason}\n{tail}")
    return "\n".join(parts)
