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

import math
from dataclasses import dataclass

from sandbox.progress import ProgressPoint

MAX_POINTS = 64     # a curve in the ledger: enough for three checkpoints and a chart


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

    @property
    def reached(self) -> float:
        """The budget fraction of the last point (0 without points)."""
        return self.points[-1].fraction if self.points else 0.0

    def upto(self, fraction: float) -> "Curve":
        """The curve as it stood at `fraction` of the budget (what a live reader had then)."""
        return Curve(tuple(p for p in self.points if p.fraction <= fraction + 1e-12),
                     self.batch_shape, self.total_steps)

    def compact(self, max_points: int = MAX_POINTS) -> "Curve":
        """At most `max_points`, evenly spread over the budget, first and last kept."""
        points = self.points
        if len(points) <= max_points:
            return self
        fractions = [p.fraction for p in points]
        lo, hi = fractions[0], fractions[-1]
        chosen, i = [], 0
        for k in range(max_points):          # the point nearest each of evenly spread targets
            want = lo + (hi - lo) * k / (max_points - 1)
            while i + 1 < len(points) and abs(fractions[i + 1] - want) <= abs(fractions[i] - want):
                i += 1
            if not chosen or chosen[-1] != i:
                chosen.append(i)
        return Curve(tuple(points[i] for i in chosen), self.batch_shape, self.total_steps)


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
    return CurvePoint(fraction=max(fraction, 0.0), loss=float(loss), step=progress.step,
                      lr=float(lr) if lr is not None and math.isfinite(lr) else None)
