"""A run's learning curve: what its progress lines said, and at what share of its budget.

The harness reads a run's progress while it trains (sandbox/progress.py turns a line into a
`ProgressPoint`); `curve_point` places one on the run's budget, and a `Curve` is the compact
series a ledger line can hold. Early stopping (agent/decide/early_stop.py) compares two of
them, a candidate's and its incumbent's on the same seed, at the same budget fractions.

Where a point sits on the budget, best source first:
- the script's own training clock (`elapsed 14.2s` on the bundled train.py's step lines,
  nanoGPT's `time` is per iteration and does not count) over the budget it was given;
- its step over the steps it says it will take (a tqdm bar, a step-budgeted script);
- the harness's clock since the run started, over the budget (startup included: a little
  late, the same for both runs of a pair).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from sandbox.progress import ProgressPoint

MAX_POINTS = 64     # a curve in the ledger: enough for three checkpoints and a chart
# Names a progress line may give the shape of a step by (train.py: `batch 64 | context 64`).
SHAPE_NAMES = (("batch", "batch_size"), ("context", "context_len", "block_size", "seq_len"))


@dataclass(frozen=True)
class CurvePoint:
    fraction: float             # share of the run's budget spent when the line was printed
    loss: float                 # the training loss the line reported
    step: int | None = None
    lr: float | None = None     # the learning rate the line reported, if it did


@dataclass(frozen=True)
class Curve:
    """One run's curve, oldest point first. `batch_shape` and `total_steps` are what the run
    (or its commit) says about a step, when known: two runs whose steps differ in shape or
    number are not on one grid."""

    points: tuple[CurvePoint, ...] = ()
    batch_shape: str | None = None
    total_steps: int | None = None
    placed: str | None = None   # how its fractions were read: "elapsed" (the script's own
                                # training clock), "steps" (of those it announced) or "clock"
                                # (the harness's, start-up included); None: an older ledger

    @property
    def reached(self) -> float:
        """The budget fraction of the last point (0 without points)."""
        return self.points[-1].fraction if self.points else 0.0

    def upto(self, fraction: float) -> "Curve":
        """The curve as it stood at `fraction` of the budget (what a live reader had then)."""
        return Curve(tuple(p for p in self.points if p.fraction <= fraction + 1e-12),
                     self.batch_shape, self.total_steps, self.placed)

    def compact(self, max_points: int = MAX_POINTS) -> "Curve":
        """At most `max_points`, evenly spread over the budget, first and last kept; each
        other point the mean of the lines it stands for. A script that prints every step's
        loss (nanoGPT) has noisy lines: a sample of them would differ between two runs whose
        lines are the same, a mean does not (two runs of one seed where a seed fixes the run)."""
        points = self.points
        if len(points) <= max_points:
            return self
        fractions = np.array([p.fraction for p in points])
        targets = np.linspace(fractions[0], fractions[-1], max_points)
        # each line to the nearest target; the first and last lines stand alone
        owner = np.clip(np.searchsorted((targets[1:] + targets[:-1]) / 2, fractions), 1, max_points - 2)
        owner[0], owner[-1] = 0, max_points - 1
        kept = [points[0]]
        for k in range(1, max_points - 1):
            group = [p for p, o in zip(points, owner) if o == k]
            if group:
                kept.append(_mean_point(group))
        kept.append(points[-1])
        return Curve(tuple(kept), self.batch_shape, self.total_steps, self.placed)

    def on_steps(self, total: int) -> "Curve":
        """The curve placed by its steps over `total` (a step-budgeted script that prints no
        training clock: the harness's clock, start-up included, would put a slower candidate
        behind at every share of the budget). Unchanged without a step on every point."""
        if total <= 0 or not self.points or any(p.step is None for p in self.points):
            return self
        return Curve(tuple(dataclasses.replace(p, fraction=round(p.step / total, 5)) for p in self.points),
                     self.batch_shape, total, "steps")


def _mean_point(group: Sequence[CurvePoint]) -> CurvePoint:
    """The mean of a stretch of lines, at its mean place and step."""
    lrs, steps = [p.lr for p in group], [p.step for p in group]
    return CurvePoint(fraction=round(float(np.mean([p.fraction for p in group])), 5),
                      loss=_short(float(np.mean([p.loss for p in group]))),
                      step=None if None in steps else int(round(float(np.mean(steps)))),
                      lr=None if None in lrs else _short(float(np.mean(lrs))))


def placement(progress: ProgressPoint, total_steps: int | None = None) -> str:
    """How `curve_point` places this line: "elapsed", "steps" or "clock"."""
    if progress.elapsed_s is not None:
        return "elapsed"
    return "steps" if (progress.total_steps or total_steps) and progress.step is not None else "clock"


def curve_point(progress: ProgressPoint, budget_s: float, wall_s: float | None = None,
                total_steps: int | None = None) -> CurvePoint | None:
    """Where a progress line sits on the run's budget (see the module docstring), or None for
    a line without a finite loss or without any way to place it."""
    loss = progress.loss
    if loss is None or not math.isfinite(loss) or budget_s <= 0:
        return None
    total = progress.total_steps or total_steps
    if progress.elapsed_s is not None:
        fraction = progress.elapsed_s / budget_s
    elif total and progress.step is not None:
        fraction = progress.step / total
    elif wall_s is not None:
        fraction = wall_s / budget_s
    else:
        return None
    lr = progress.values.get("lr", progress.values.get("learning_rate"))
    return CurvePoint(fraction=round(max(fraction, 0.0), 5), loss=_short(loss), step=progress.step,
                      lr=_short(lr) if lr is not None and math.isfinite(lr) else None)


def _short(value: float) -> float:
    """Six significant digits: what a progress line says, in a ledger line a person can read."""
    return float(f"{float(value):.6g}")


def shape_of(values: Mapping[str, float]) -> str | None:
    """The shape of a step ("64x256": batch x context) when a progress line says it."""
    found = [next((values[n] for n in names if n in values), None) for names in SHAPE_NAMES]
    if found[0] is None:
        return None
    return "x".join(f"{v:g}" for v in found if v is not None)


def mean_curve(curves: Sequence[Curve]) -> Curve | None:
    """The point-wise mean of several runs' curves over the stretch of the budget they all
    cover, on an even grid: the incumbent's typical curve, for a candidate run on a seed the
    incumbent did not run. The learning rate is averaged where every curve reports it; the
    shape and step count are kept where all agree. None without a curve of two points."""
    usable = [c for c in curves if len(c.points) >= 2]
    if len(usable) <= 1:
        return usable[0] if usable else None
    lo, hi = max(c.points[0].fraction for c in usable), min(c.reached for c in usable)
    if hi <= lo:
        return None
    grid = np.linspace(lo, hi, min(MAX_POINTS, max(len(c.points) for c in usable)))

    def mean(values_of) -> np.ndarray:
        return np.mean([np.interp(grid, [p.fraction for p in c.points], values_of(c)) for c in usable],
                       axis=0)

    losses = mean(lambda c: [p.loss for p in c.points])
    with_lr = all(p.lr is not None for c in usable for p in c.points)
    lrs = mean(lambda c: [p.lr for p in c.points]) if with_lr else [None] * len(grid)
    with_steps = all(p.step is not None for c in usable for p in c.points)
    steps = mean(lambda c: [p.step for p in c.points]) if with_steps else [None] * len(grid)
    shapes, totals, placed = ({c.batch_shape for c in usable}, {c.total_steps for c in usable},
                              {c.placed for c in usable})
    return Curve(tuple(CurvePoint(fraction=round(float(f), 5), loss=_short(x),
                                  step=None if k is None else int(round(k)),
                                  lr=None if lr is None else _short(lr))
                       for f, x, k, lr in zip(grid, losses, steps, lrs)),
                 batch_shape=shapes.pop() if len(shapes) == 1 else None,
                 total_steps=totals.pop() if len(totals) == 1 else None,
                 placed=placed.pop() if len(placed) == 1 else None)
