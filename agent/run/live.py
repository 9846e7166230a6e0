"""The curves of the runs in flight, read from the lines they print as they print them.

A worker hands every line of a run to `feed` from its own thread as the run prints it (local
workers as the sandbox reads it, Slurm's as the harness follows the job's output file, Ray's
as the node streams it to the head). Each run has its own `sandbox.progress.ProgressReader`
(program.md's `metrics_pattern`, the bundled train.py's step lines, tqdm bars, Trainer logs),
and each point is placed on the run's budget (`agent.record.curves.curve_point`: the script's
own training clock, else its step of the steps it announced, else the harness's clock since
the run began). The scheduler reads a run's curve so far with `curve` (early stopping,
agent/night/early_stops.py) and its final one with `finish` (the ledger's `run_finished`).

A curve only moves forward: a point placed before the last one (an evaluation step's own
progress bar after training, a counter that starts again) is not part of the training curve.
For the same reason the steps a run will take are the first it announces: the Hugging Face
Trainer's evaluation draws a bar of its own after training, counting batches of another set.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from agent.record.curves import MAX_POINTS, Curve, CurvePoint, curve_point, placement, shape_of
from sandbox.progress import ProgressReader

KEEP_POINTS = 16 * MAX_POINTS   # a run printing more lines than this is thinned as it goes


@dataclass
class _Run:
    reader: ProgressReader
    budget_s: float
    began: float                     # time.monotonic() when it began (the harness's clock)
    points: list[CurvePoint] = field(default_factory=list)
    batch_shape: str | None = None
    total_steps: int | None = None
    placed: str | None = None        # how its first point was placed (agent.record.curves)

    def curve(self) -> Curve:
        return Curve(tuple(self.points), self.batch_shape, self.total_steps, self.placed)


class LiveCurves:
    """Thread-safe: `feed` runs on the workers' threads, everything else on the scheduler's."""

    def __init__(self, metrics_pattern: str | None = None, marks: Sequence[float] = (),
                 on_mark: Callable[[], None] | None = None) -> None:
        """`on_mark` is called (on the worker's thread) when a run's curve passes one of
        `marks` (shares of its budget): the scheduler's cue to look at it now."""
        self._pattern = metrics_pattern
        self._marks, self._on_mark = tuple(marks), on_mark
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()

    def start(self, run_id: str, budget_s: float) -> None:
        """A run was handed to a worker: its clock starts now."""
        with self._lock:
            self._runs[run_id] = _Run(ProgressReader(self._pattern), budget_s, time.monotonic())

    def began(self, run_id: str) -> None:
        """The run left a cluster's queue and began on a node: its clock starts again."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and not run.points:
                run.began = time.monotonic()

    def feed(self, run_id: str, line: str) -> None:
        """One line the run printed (never raises on what a run prints)."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is None:
            return
        progress = run.reader.feed(line)
        if progress is None:
            return
        with self._lock:
            run.total_steps = run.total_steps or progress.total_steps
            point = curve_point(progress, run.budget_s, time.monotonic() - run.began, run.total_steps)
            last = run.points[-1].fraction if run.points else -1.0
            if point is None or point.fraction < last:
                return
            run.batch_shape = run.batch_shape or shape_of(progress.values)
            run.placed = run.placed or placement(progress, run.total_steps)
            run.points.append(point)
            if len(run.points) > KEEP_POINTS:
                run.points = list(run.curve().compact(KEEP_POINTS // 2).points)
        if self._on_mark is not None and any(last < mark <= point.fraction for mark in self._marks):
            self._on_mark()

    def curve(self, run_id: str) -> Curve:
        """The run's curve so far (empty for a run not started here)."""
        with self._lock:
            run = self._runs.get(run_id)
            return run.curve() if run is not None else Curve()

    def finish(self, run_id: str) -> Curve | None:
        """The run's whole curve, compact for the ledger (None: it printed no progress lines),
        and the run forgotten."""
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is None or not run.points:
            return None
        return run.curve().compact()
