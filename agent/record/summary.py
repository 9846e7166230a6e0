"""One experiment in full, for a researcher that asks (the `show_experiment` tool).

The night as a whole reaches the researcher through the brief (agent/record/brief.py); this
is the detail behind one of its lines: the hypothesis, the prediction, the diff, and the
log tail of each candidate run.
"""
from __future__ import annotations

from typing import Callable

from agent.record.brief import experiment_line
from agent.record.records import Direction
from agent.record.state import LoopState


def experiment_detail(state: LoopState, experiment_id: str, diff_of: Callable[[str], str],
                      max_log_chars: int = 3000,
                      direction: Direction = Direction.MINIMIZE) -> str:
    """One experiment in full: its line, hypothesis, prediction, diff and log tails.

    `diff_of(commit)` returns the commit's patch against its parent (the workspace's diff)."""
    experiment = state.experiments.get(experiment_id.strip())
    if experiment is None:
        known = ", ".join(list(state.experiments)[-5:]) or "none yet"
        return f"no experiment {experiment_id!r}; recent ids: {known}"
    parts = [experiment_line(experiment, direction), f"hypothesis: {experiment.hypothesis}"]
    if experiment.prediction:
        parts.append(f"prediction: {experiment.prediction.to_dict()}")
    diff = diff_of(experiment.commit) if experiment.commit else experiment.diff
    parts.append("diff:\n" + (diff or "(none)"))
    for run in experiment.runs:
        tail = (run.log_tail or "")[-max_log_chars // max(1, len(experiment.runs)):]
        parts.append(f"run seed {run.seed} [{run.status.value}] {run.reason}\n{tail}")
    return "\n".join(parts)
