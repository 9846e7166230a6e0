"""What is happening now on a tag: the runs in flight and the proposals being written.

A run in flight is a `run_started` without its `run_finished`, in the tag's ledger or in the
ledger of an ablation that is running (`results/<tag>/ablations/<id>/`), while a live process
holds the tag's lock and took it before the run started (a run a killed harness left behind is
not running). For each: its worker, device, seed and role, what it measures, the time left of
its budget (wall clock since it was recorded started, so the sandbox's start-up counts), and
its learning curve, read from its log as it is written (`runs/<run_id>/log.txt`) with the
harness's own progress reader (sandbox/progress.py: program.md's `metrics_pattern`, the bundled
train.py's step lines, tqdm bars, Trainer dicts). A run on a Ray node sends its log when it
ends, so its curve appears then.

A proposal being written is a `proposal_asked` without its `proposal_ready` in the running
invocation (agent/night/loop.py records both).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agent.preflight.lock import live_holder
from agent.record.events import (AblationPlanned, AblationSummary, Event, LoopResumed, LoopStarted,
                                 LoopStopped, ProposalAsked, ProposalReady, Role, RunStarted)
from agent.record.state import LoopState
from agent.review.serve.tail import LedgerTail
from sandbox.progress import ProgressReader

MAX_POINTS = 300          # per curve sent to the page; older points are thinned, never the last
READ_LIMIT = 4_000_000    # bytes of one log read at most per look (a flood is skipped, not parsed)


def parse_time(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


@dataclass
class Curve:
    """A run's progress points, read incrementally from its log."""

    path: Path
    reader: ProgressReader
    offset: int = 0
    pending: bytes = b""
    points: list[tuple[float, float]] = field(default_factory=list)   # (step or line, loss)
    by_step: bool = True
    last: dict[str, float] = field(default_factory=dict)
    lines: int = 0

    def read(self) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size < self.offset:            # rewritten (the capped log's tail): start over
            self.offset, self.pending, self.points, self.lines = 0, b"", [], 0
        if size == self.offset:
            return
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(min(size - self.offset, READ_LIMIT))
        self.offset += len(data)
        data = self.pending + data
        *complete, self.pending = data.split(b"\n")
        for raw in complete:
            self.lines += 1
            point = self.reader.feed(raw.decode("utf-8", errors="replace"))
            if point is None or point.loss is None or not math.isfinite(point.loss):
                continue
            self.by_step = self.by_step and point.step is not None
            x = float(point.step) if point.step is not None else float(self.lines)
            self.points.append((x, point.loss))
            self.last = {k: v for k, v in point.values.items() if math.isfinite(v)}
        while len(self.points) > MAX_POINTS:   # every other point of the older part, the last kept
            self.points = self.points[:-1:2] + self.points[-1:]

    def to_dict(self) -> dict[str, Any]:
        return {"x": "step" if self.by_step else "line", "points": self.points,
                "last": self.last}


@dataclass
class ProposalsWatch:
    """The proposals being written, folded from the events."""

    asking: dict[str, ProposalAsked] = field(default_factory=dict)

    def apply(self, event: Event) -> None:
        if isinstance(event, ProposalAsked):
            self.asking[event.request_id] = event
        elif isinstance(event, ProposalReady):
            self.asking.pop(event.request_id, None)
        elif isinstance(event, (LoopStarted, LoopResumed, LoopStopped)):
            self.asking.clear()   # a new or stopped invocation asks nothing of the old one


@dataclass
class LiveRuns:
    """Reads the runs in flight of one tag (its night's and its ablation's) and their curves."""

    tag_dir: Path
    metrics_pattern: str | None = None
    curves: dict[str, Curve] = field(default_factory=dict)
    ablations: dict[str, LedgerTail] = field(default_factory=dict)

    def snapshot(self, state: LoopState, events: list[Event], proposals: ProposalsWatch,
                 now: datetime | None = None) -> dict[str, Any]:
        now = now or datetime.now(timezone.utc)
        holder = live_holder(self.tag_dir)
        since = parse_time(holder.since) if holder else None
        runs: list[dict[str, Any]] = []
        if holder is not None:
            runs += [self._run(run, self.tag_dir, "night", state, now) for run in state.in_flight.values()
                     if _after(run.time, since)]
            for ablation_id, tail in self._running_ablations(events).items():
                tail.poll()
                sub = LoopState()
                for event in tail.events:
                    sub.apply(event)
                runs += [self._run(run, tail.path.parent, f"ablation {ablation_id}", state, now)
                         for run in sub.in_flight.values() if _after(run.time, since)]
        wanted = {run["run_id"] for run in runs}
        for run_id in list(self.curves):
            if run_id not in wanted:
                del self.curves[run_id]
        asking = [{"researcher": p.researcher, "since": p.time, "attempt": p.attempt,
                   "incumbent": p.incumbent, "elapsed_s": _seconds(p.time, now)}
                  for p in proposals.asking.values()] if holder is not None else []
        return {"now": now.isoformat(timespec="seconds"), "running": holder is not None,
                "pid": holder.pid if holder else None, "runs": runs, "proposals": asking}

    def _running_ablations(self, events: list[Event]) -> dict[str, LedgerTail]:
        planned = [e.ablation_id for e in events if isinstance(e, AblationPlanned)]
        done = {e.ablation_id for e in events if isinstance(e, AblationSummary)}
        running = [a for a in planned if a not in done][-1:]   # the lock allows one at a time
        for ablation_id in list(self.ablations):
            if ablation_id not in running:
                del self.ablations[ablation_id]
        for ablation_id in running:
            self.ablations.setdefault(ablation_id, LedgerTail(self.tag_dir / "ablations" / ablation_id))
        return self.ablations

    def _run(self, run: RunStarted, folder: Path, source: str, state: LoopState,
             now: datetime) -> dict[str, Any]:
        curve = self.curves.get(run.run_id)
        if curve is None:
            curve = self.curves[run.run_id] = Curve(folder / "runs" / run.run_id / "log.txt",
                                                    ProgressReader(self.metrics_pattern))
        curve.read()
        budget = run.budget_s or state.budget_s
        elapsed = _seconds(run.time, now)
        experiment = state.experiments.get(run.experiment or "")
        if source.startswith("ablation"):
            what = f"the incumbent without {run.experiment}" if run.experiment else \
                "the base" if run.commit == state.base_commit else "the incumbent"
        else:
            what = (f"the incumbent again, beside {experiment.description}"
                    if experiment and run.role == Role.REFERENCE else
                    experiment.description if experiment else "the incumbent's reference")
        log = (folder / "runs" / run.run_id / "log.txt").relative_to(self.tag_dir).as_posix()
        return {"run_id": run.run_id, "source": source, "worker": run.worker, "device": run.device,
                "seed": run.seed, "role": run.role.value, "experiment": run.experiment,
                "commit": run.commit, "what": what, "started": run.time, "elapsed_s": elapsed,
                "budget_s": budget,
                "left_s": max(0.0, budget - elapsed) if budget is not None and elapsed is not None else None,
                "curve": curve.to_dict(), "log": log}


def _after(time: str, since: datetime | None) -> bool:
    """Whether a run recorded at `time` started under the lock holder of `since`."""
    started = parse_time(time)
    return since is None or started is None or started >= since.replace(microsecond=0)


def _seconds(time: str | None, now: datetime) -> float | None:
    started = parse_time(time)
    return round((now - started).total_seconds(), 1) if started else None
