"""One run as a document: what `nightshift show` lists for each run of an experiment.

A finished run carries everything the ledger recorded of it (the status and its reason, the
metric with who measured it, the times, the memory), its log's absolute path and tail, its
curve (the progress lines on its budget, column by column) and its `dynamics`: every figure
the script's result.json reported (grad_norm, update_ratio, tokens_per_s, flops_per_s, ...),
as it reported them. A run in flight carries who runs it and since when.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from agent.interface.jsonable import numbers, plain
from agent.record.curves import Curve
from agent.record.events import RunBegan, RunFinished, RunQueued, RunStarted


def seed_values(values: Mapping[int, float]) -> list[dict[str, Any]]:
    """seed -> value as `[{"seed", "value"}]` in seed order: JSON keys are strings, seeds are
    integers, and a list keeps them so."""
    return [{"seed": int(seed), "value": plain(values[seed])} for seed in sorted(values)]


def curve_view(curve: Curve | None) -> dict[str, Any] | None:
    """The curve as columns, one list per quantity, oldest point first (None: the run printed
    no progress line, or an older ledger)."""
    if curve is None:
        return None
    points = curve.points
    return plain({
        "fractions": [p.fraction for p in points], "losses": [p.loss for p in points],
        "steps": [p.step for p in points], "lrs": [p.lr for p in points],
        "placed": curve.placed, "batch_shape": curve.batch_shape, "total_steps": curve.total_steps,
    })


def run_view(run: RunFinished, folder: Path, *, counted: bool, stopped_early: bool) -> dict[str, Any]:
    """A finished run. `counted`: the keep rule counted it as evidence for its experiment;
    `stopped_early`: the harness stopped it (a discard, not a measurement)."""
    return {
        **plain({
            "run_id": run.run_id, "commit": run.commit, "seed": run.seed, "role": run.role,
            "experiment": run.experiment, "status": run.status, "reason": run.reason,
            "metric": run.metric, "reported": run.reported, "measured_by": run.measured_by,
            "duration_s": run.duration_s, "eval_duration_s": run.eval_duration_s,
            "over_budget_s": run.over_budget_s, "peak_memory_mb": run.peak_memory_mb,
            "queued_s": run.queued_s, "worker": run.worker, "device": run.device, "node": run.node,
            "finished": run.time or None,
            "log": str((Path(folder) / run.log).resolve()) if run.log else None,
            "log_tail": run.log_tail, "counted": counted, "stopped_early": stopped_early,
        }),
        "curve": curve_view(run.curve),
        "dynamics": numbers(run.metrics),
    }


def in_flight_view(run: RunStarted, news: RunQueued | RunBegan | None) -> dict[str, Any]:
    """A run started and not finished; `news` is what a cluster's queue last said of it."""
    return plain({
        "run_id": run.run_id, "commit": run.commit, "seed": run.seed, "role": run.role,
        "experiment": run.experiment, "started": run.time or None, "worker": run.worker,
        "device": run.device, "budget_s": run.budget_s,
        "job_id": news.job_id if news is not None else None,
        "node": news.node if isinstance(news, RunBegan) else None,
    })
