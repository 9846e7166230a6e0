"""Views of a ledger for people: `results.tsv` in autoresearch's columns, and pandas frames.

    from agent.record import load
    frames = load("results/nov30")   # {"experiments", "runs", "decisions", "replays", "replay_runs"}

Columns are documented in docs/ledger.md.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.record.events import (ReplayCommit, ReplayRun, RunFinished, RunStoppedEarly, Verdict,
                                 encode)
from agent.record.ledger import read_events
from agent.record.state import Experiment, LoopState, fold

TSV_FILE = "results.tsv"
TSV_COLUMNS = ("commit", "val_bpb", "memory_gb", "status", "description")


def tsv_value(state: LoopState, experiment: Experiment) -> tuple[float | None, str]:
    """The metric results.tsv shows for a decided experiment, and a note for its description.

    A kept commit shows its fresh-seed value (its reference runs, which did not select it)
    once measured: the mean of the runs that selected it is inflated by the selection (the
    winner's curse), so until then it is shown labelled as such. Other experiments show the
    mean of their own runs (nothing was selected on them)."""
    if experiment.verdict == Verdict.KEEP and experiment.commit:
        fresh = list(state.reference(experiment.commit).values())
        if fresh:
            return statistics.fmean(fresh), ""
        return experiment.mean(), " [selection mean: not yet measured on fresh seeds]"
    return experiment.mean(), ""


BASELINE = "baseline"   # the description of results.tsv's first row, as in autoresearch


def baseline_row(state: LoopState) -> tuple[str, float, float | None] | None:
    """The base commit as results.tsv's first row, as autoresearch writes it: (commit, the
    mean of its reference seeds, its peak memory in MB); None until a reference run landed."""
    base = state.base_commit
    values = list(state.reference(base).values()) if base else []
    if not values:
        return None
    memory = [r.peak_memory_mb for r in state.runs if r.commit == base and r.peak_memory_mb]
    return base, statistics.fmean(values), max(memory) if memory else None


class TsvWriter:
    """results.tsv kept current while a night runs: rewritten at once when asked (`now`: the
    night stops), else at most every `every_s`, since it holds every experiment and a rewrite
    per decision would cost a long night time in proportion to its length; a rewrite put off
    is made by `flush` once due. The ledger, not the TSV, is what a resume reads."""

    def __init__(self, results_dir: Path, metric: str, every_s: float = 5.0) -> None:
        self.results_dir, self.metric, self.every_s = results_dir, metric, every_s
        self._written = float("-inf")       # the first decision writes it at once
        self.stale = False                  # a decision since the last rewrite

    def write(self, state: LoopState, now: bool = False) -> None:
        self.stale = True
        if now or time.monotonic() - self._written >= self.every_s:
            write_tsv(state, self.results_dir, self.metric)
            self._written, self.stale = time.monotonic(), False

    def flush(self, state: LoopState) -> None:
        if self.stale:
            self.write(state)


def write_tsv(state: LoopState, results_dir: Path, metric: str = "val_bpb") -> Path:
    """Regenerate results.tsv in autoresearch's columns (the metric column keeps its name):
    the baseline first (status keep, description `baseline`), then each decided experiment."""
    lines = ["\t".join((TSV_COLUMNS[0], metric, *TSV_COLUMNS[2:]))]
    base = baseline_row(state)
    if base is not None:
        commit, mean, memory = base
        lines.append("\t".join((commit[:7], f"{mean:.6f}", f"{memory / 1024:.1f}" if memory else "0.0",
                                str(Verdict.KEEP), BASELINE)))
    for experiment in state.experiments.values():
        if not experiment.decided:
            continue
        mean, note = tsv_value(state, experiment)
        memory = [r.peak_memory_mb for r in experiment.runs if r.peak_memory_mb]
        value = f"{mean:.6f}" if mean is not None else "0.000000"
        memory_gb = f"{max(memory) / 1024:.1f}" if memory else "0.0"
        commit = (experiment.commit or "0000000")[:7]
        description = (experiment.description + note).replace("\t", " ").replace("\n", " ")
        lines.append("\t".join((commit, value, memory_gb, str(experiment.verdict), description)))
    path = Path(results_dir) / TSV_FILE
    tmp = path.with_suffix(".tsv.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def load(results_dir: str | Path) -> dict[str, Any]:
    """Tidy pandas DataFrames of a tag: {"experiments", "runs", "decisions", "replays",
    "replay_runs"}. Columns are documented in docs/ledger.md.

    experiments: one row per experiment (id, commit, parent, description, hypothesis,
      researcher, verdict, effect, ci_low, ci_high, p_value, n_seeds, candidate_mean (the
      selecting runs' mean), fresh_mean (a kept commit's fresh-seed value), predicted_delta,
      prediction_direction, prediction_covered)
    runs: one row per finished run (run_id, commit, experiment, role, seed, status, metric,
      duration_s, peak_memory_mb, plus every numeric metric the script reported)
    """
    import pandas as pd

    events = list(read_events(Path(results_dir)))
    state = fold(events)
    return {
        "experiments": pd.DataFrame([_experiment_row(state, e) for e in state.experiments.values()]),
        "runs": pd.DataFrame([_run_row(run) for run in state.runs]),
        "decisions": pd.DataFrame([{**(encode(d.decision) if d.decision else {}), "id": d.id,
                                    "verdict": d.verdict.value} for d in state.decisions]),
        "replays": pd.DataFrame([_replay_row(e) for e in events if isinstance(e, ReplayCommit)]),
        "replay_runs": pd.DataFrame([{k: encode(getattr(e, k)) for k in _REPLAY_RUN_COLUMNS}
                                     for e in events if isinstance(e, ReplayRun)]),
    }


def _experiment_row(state: LoopState, experiment: Experiment) -> dict[str, Any]:
    decided = experiment.decision
    interval = (decided.interval if decided else None) or (None, None)
    prediction, score = experiment.prediction, experiment.score
    return {
        "id": experiment.id, "commit": experiment.commit, "parent": experiment.parent,
        "description": experiment.description, "hypothesis": experiment.hypothesis,
        "researcher": experiment.researcher,
        "verdict": experiment.verdict.value if experiment.verdict else None,
        "effect": decided.effect if decided else None, "ci_low": interval[0], "ci_high": interval[1],
        "p_value": decided.p_value if decided else None, "n_seeds": len(experiment.values()),
        # whether `effect` leans on same-seed pairs (else: against the incumbent's mean)
        "paired": comparison.paired if (comparison := _comparison(decided)) else None,
        "paired_effect": comparison.paired_effect if comparison else None,
        "candidate_mean": experiment.mean(),
        # a kept commit's value on its fresh seeds (None until measured, or not kept)
        "fresh_mean": tsv_value(state, experiment)[0] if experiment.verdict == Verdict.KEEP
        and state.reference(experiment.commit or "") else None,
        "predicted_delta": prediction.expected_delta if prediction else None,
        "prediction_direction": prediction.direction if prediction else None,
        "prediction_covered": score.covered if score else None,
        "direction_right": score.direction_right if score else None,
        "usd": experiment.usage.usd if experiment.usage else None,
        "time": decided.time if decided else None,
    }


def _comparison(decided):
    return decided.decision.comparison if decided and decided.decision else None


def _run_row(run) -> dict[str, Any]:
    row = {k: encode(getattr(run, k)) for k in ("run_id", "commit", "experiment", "role", "seed",
                                                "status", "metric", "duration_s", "peak_memory_mb",
                                                "time")}
    for key, value in run.metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in row:
            row[key] = value
    return row


_REPLAY_RUN_COLUMNS = ("replay_id", "commit", "target_role", "experiment", "seed", "budget_s",
                       "split", "status", "metric", "duration_s", "env_changed", "run_id", "time")


def _replay_row(event: ReplayCommit) -> dict[str, Any]:
    """One replayed commit, flattened (see docs/ledger.md for the columns)."""
    original, reproduce = event.original, event.reproduce
    interval = reproduce.get("interval") or [None, None]
    full = event.full_interval or (None, None)
    return {
        **{k: getattr(event, k) for k in ("replay_id", "commit", "target_role", "experiment",
                                          "parent", "budget_s", "split", "n_ok", "n_failed", "mean",
                                          "sd", "proxy_effect", "full_effect", "full_effect_vs_base",
                                          "env_changed", "time")},
        "full_ci_low": full[0], "full_ci_high": full[1],
        "original_mean": original.get("mean"), "original_n": original.get("n"),
        "original_budget_s": original.get("budget_s"),
        "reproduced": reproduce.get("reproduced"), "difference": reproduce.get("difference"),
        "difference_ci_low": interval[0], "difference_ci_high": interval[1],
        "env_diff": ", ".join(d["field"] for d in event.env_diff or []),
    }



# ---- the workers ------------------------------------------------------------------------

@dataclass(frozen=True)
class Utilisation:
    """How busy the workers were: the share of worker time spent in runs."""

    workers: int                 # of the latest invocation
    busy_s: float                # summed over runs
    capacity_s: float            # workers x wall time, summed over invocations
    share: float | None
    lanes: dict[int, list[tuple[float, float, str]]]   # worker -> (start, end, role or verdict)
    start: float | None          # epoch of the latest invocation's start (the timeline's origin)
    end: float | None


def utilisation(state: LoopState, now: float | None = None) -> Utilisation:
    """Worker utilisation over every invocation, and the latest invocation's timeline. Runs
    of ledgers without timestamps (before workers) count with their duration, on worker 0."""
    def epoch(text: str | None) -> float | None:
        return datetime.fromisoformat(text).timestamp() if text else None

    last_event = max((r.ended or epoch(r.time) or 0.0 for r in state.runs), default=None)
    capacity = 0.0
    for invocation in state.invocations:
        begin = epoch(invocation.started)
        end = epoch(invocation.stopped) or now or last_event or begin
        if begin is not None and end is not None:
            capacity += invocation.workers * max(end - begin, 0.0)
    busy = sum((r.ended - r.started) if r.started and r.ended else (r.duration_s or 0.0)
               for r in state.runs)
    latest = state.invocations[-1] if state.invocations else None
    start = epoch(latest.started) if latest else None
    lanes: dict[int, list[tuple[float, float, str]]] = {}
    for run in state.runs:
        if start is not None and run.started and run.ended and run.ended >= start:
            lane = lanes.setdefault(run.worker or 0, [])
            if run.queued_s:     # its wait in a cluster's queue, drawn apart from the run
                lane.append((max(start, run.started - run.queued_s), run.started, "queued"))
            lane.append((run.started, run.ended, run.role.value))
    end = (epoch(latest.stopped) if latest else None) or now or last_event
    return Utilisation(workers=latest.workers if latest else 1, busy_s=busy, capacity_s=capacity,
                       share=busy / capacity if capacity > 0 else None,
                       lanes=dict(sorted(lanes.items())), start=start, end=end)


@dataclass(frozen=True)
class QueueTime:
    """Time runs spent waiting in a cluster's queue (Slurm), apart from their run time, and
    the runs the cluster took back (preempted, requeued, cancelled outside): not results."""

    runs: int                    # runs with a queue time recorded
    total_s: float
    median_s: float | None
    longest_s: float | None
    run_s: float                 # those runs' own time, for scale
    taken_back: dict[str, int]   # Slurm's word (PREEMPTED, CANCELLED, ...) -> runs run again

    def lines(self) -> list[str]:
        """What status and the report say (nothing when no run waited in a queue)."""
        if not self.runs:
            return []
        said = [f"queue: {self.runs} runs waited {_span(self.total_s)} in all before they began "
                f"(median {_span(self.median_s or 0)}, longest {_span(self.longest_s or 0)}), "
                f"apart from their {_span(self.run_s)} of run time"]
        if self.taken_back:
            shown = ", ".join(f"{word.lower()} {n}" for word, n in sorted(self.taken_back.items()))
            said.append(f"taken back by the cluster (not results; their seeds run again): {shown}")
        return said


def queue_time(state: LoopState) -> QueueTime:
    waited = [r for r in state.runs + [r for r in state.interrupted if isinstance(r, RunFinished)]
              if r.queued_s is not None]
    values = [r.queued_s for r in waited]
    back: dict[str, int] = {}
    for run in state.interrupted:
        if isinstance(run, RunFinished) and run.job_state:   # the cluster's doing, not the harness's
            back[run.job_state] = back.get(run.job_state, 0) + 1
    return QueueTime(runs=len(waited), total_s=sum(values),
                     median_s=statistics.median(values) if values else None,
                     longest_s=max(values) if values else None,
                     run_s=sum((r.ended - r.started) if r.started and r.ended else (r.duration_s or 0.0)
                               for r in waited),
                     taken_back=back)


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def timeline_text(use: Utilisation, width: int = 60) -> list[str]:
    """The latest invocation's runs per worker as rows of blocks (█ busy, · idle)."""
    if use.start is None or use.end is None or use.end <= use.start or not use.lanes:
        return []
    span = use.end - use.start
    rows = []
    for worker in range(max(use.workers, max(use.lanes) + 1)):
        cells = [0.0] * width
        for begin, end, role in use.lanes.get(worker, []):
            if role == "queued":
                continue
            for i in range(width):
                lo, hi = use.start + span * i / width, use.start + span * (i + 1) / width
                cells[i] += max(0.0, min(end, hi) - max(begin, lo)) / (hi - lo)
        rows.append(f"w{worker:<2} " + "".join("█" if c >= 0.5 else "▄" if c > 0.05 else "·"
                                             for c in cells))
    return rows


# ---- early stopping -----------------------------------------------------------------------

@dataclass(frozen=True)
class EarlyStops:
    """What early stopping did in a night: every stopped run, the run time it saved, and the
    curves it could not compare (agent/night/early_stops.py)."""

    stops: tuple[RunStoppedEarly, ...]
    unpaired: int                # candidate runs whose curve could not be compared
    saved_s: float               # the budget the stopped runs left, and the evaluation skipped
    run_s: float                 # what every run of the night took (worker time)

    @property
    def share(self) -> float | None:
        """The share of run time saved: of what the night's runs would have taken without
        early stopping (the time they took plus the time the stops saved)."""
        total = self.run_s + self.saved_s
        return self.saved_s / total if total > 0 else None

    def lines(self, state: LoopState, limit: int | None = None) -> list[str]:
        """What status and the report say (nothing when no run was stopped or unpaired)."""
        if not self.stops and not self.unpaired:
            return []
        said = [f"stopped early: {len(self.stops)} run{'s' if len(self.stops) != 1 else ''}, each "
                f"a discard (never a measurement), saving {_span(self.saved_s)} of run time "
                f"({self.share or 0:.0%} of what the night's runs would have taken without)"
                + (f"; {self.unpaired} run{'s' if self.unpaired != 1 else ''} could not be "
                   f"compared with the incumbent's curve (never stopped)" if self.unpaired else "")]
        shown = self.stops if limit is None else self.stops[-limit:]
        for stop in shown:
            description = state.experiments[stop.experiment].description[:40] \
                if stop.experiment in state.experiments else ""
            lo, hi = stop.interval
            against = "run on that seed" if stop.partner == "same seed" else "mean curve"
            said.append(f"{stop.experiment} seed {stop.seed} at {stop.checkpoint:.0%}: predicted "
                        f"{stop.predicted:+.4g} [{lo:+.4g}, {hi:+.4g}] against the incumbent's "
                        f"{against} ({stop.pairs} pairs), saved {_span(stop.saved_s)}  {description}")
        return said


def early_stops(state: LoopState) -> EarlyStops:
    runs = state.runs + [r for r in state.interrupted if isinstance(r, RunFinished)]
    run_s = sum((r.ended - r.started) if r.started and r.ended else (r.duration_s or 0.0) for r in runs)
    stops = tuple(state.early_stops.values())
    return EarlyStops(stops=stops, unpaired=len(state.unpaired),
                      saved_s=sum(stop.saved_s for stop in stops), run_s=run_s)
