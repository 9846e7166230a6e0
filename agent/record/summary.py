"""The compact ledger summary a researcher reads before proposing (and `status` shows).

Bounded by construction: the last `recent` experiments in full one-liners, older ones only
counted, kept commits always listed. Hundreds of experiments stay a few kilobytes.
"""
from __future__ import annotations

import statistics

from agent.record.ledger import Experiment, LoopState
from agent.decide.scoring import calibration


def _mean(experiment: Experiment) -> str:
    values = [r["metric"] for r in experiment.runs if r["status"] == "ok"]
    if not values:
        return "-"
    spread = f"±{statistics.stdev(values):.4f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.4f}{spread} (n={len(values)})"


def _line(experiment: Experiment) -> str:
    decision = (experiment.decision or {}).get("decision") or {}
    effect = decision.get("effect")
    evidence = ""
    if effect is not None:
        p = decision.get("p_value")
        evidence = f" effect {effect:+.4f}" + (f" p={p:.3g}" if p is not None else "")
    reason = experiment.invalid_reason or (experiment.decision or {}).get("reason", "")
    why = f" — {reason[:100]}" if experiment.verdict not in ("keep", "discard") and reason else ""
    return (f"{experiment.id} [{experiment.verdict or 'running'}] {experiment.description[:100]}"
            f" | metric {_mean(experiment)}{evidence}{why}")


def ledger_summary(state: LoopState, metric: str, recent: int = 25) -> str:
    experiments = list(state.experiments.values())
    reference = state.reference(state.incumbent) if state.incumbent else {}
    lines = [f"{len(experiments)} experiments so far; {len(state.kept())} kept."]
    if reference:
        values = list(reference.values())
        spread = f" ± {statistics.stdev(values):.4f} (seed sd)" if len(values) > 1 else ""
        lines.append(f"Incumbent {state.incumbent[:8]}: {metric} {statistics.fmean(values):.4f}"
                     f"{spread} over {len(values)} fresh seeds.")
    kept = state.kept()
    if kept:
        lines.append("Kept, in order:")
        lines += [f"  {_line(e)}" for e in kept[-recent:]]
    verdicts: dict[str, int] = {}
    for e in experiments[:-recent]:
        verdicts[e.verdict or "running"] = verdicts.get(e.verdict or "running", 0) + 1
    if verdicts:
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(verdicts.items()))
        lines.append(f"Older experiments (not listed): {counts}.")
    if experiments:
        lines.append(f"Last {min(recent, len(experiments))} experiments:")
        lines += [f"  {_line(e)}" for e in experiments[-recent:]]
    cal = calibration((e.decision or {}).get("score") for e in experiments)
    if cal["n"]:
        lines.append(f"Your predictions so far: direction right {cal['direction_accuracy']:.0%}, "
                     f"intervals covered {cal['coverage']:.0%} at claimed "
                     f"{cal['claimed_confidence']:.0%} (n={cal['n']}).")
    return "\n".join(lines)


def experiment_detail(state: LoopState, experiment_id: str, diff_of, max_log_chars: int = 3000) -> str:
    """One experiment in full for a researcher that asks: its diff, decision and log tails.

    `diff_of(commit)` returns the commit's patch against its parent (the workspace's diff)."""
    experiment = state.experiments.get(experiment_id.strip())
    if experiment is None:
        known = ", ".join(list(state.experiments)[-5:]) or "none yet"
        return f"no experiment {experiment_id!r}; recent ids: {known}"
    parts = [_line(experiment), f"hypothesis: {experiment.hypothesis}"]
    if experiment.prediction:
        parts.append(f"prediction: {experiment.prediction}")
    diff = diff_of(experiment.commit) if experiment.commit else experiment.extra.get("diff", "")
    parts.append("diff:\n" + (diff or "(none)"))
    for run in experiment.runs:
        tail = (run.get("log_tail") or "")[-max_log_chars // max(1, len(experiment.runs)):]
        parts.append(f"run seed {run['seed']} [{run['status']}] {run.get('reason', '')}\n{tail}")
    return "\n".join(parts)
