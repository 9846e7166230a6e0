"""How early stopping's prior is measured (agent/decide/curve_forecast.py's `Prior`): the
line of a pair's final improvement on its mid-run loss gap, in noise units, over recorded pairs
of real runs (benchmarks/early_stop/early_stop_replay.py's pairs files), and the prior that line gives.

The units are the rule's: a gap over √2 × the spread of the incumbent's curves across seeds
there, a final over √2 × the spread of its finals (the incumbent's runs of the file stand for
a night's baseline). `prior_from` applies the rule the default prior was made by: the slope at
most 1 and below every checkpoint's, each checkpoint's residual rounded up to a tenth. To read
a prior against pairs it was not measured on, `split` halves a file by seed.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from agent.decide.curve_forecast import PRIOR, Prior
from agent.decide.early_stop import EarlyStopSettings, gap_at, why_unpaired
from benchmarks.early_stop.pairs import Baseline, Pair


@dataclass(frozen=True)
class Line:
    """final = intercept + slope × gap, in noise units, at one checkpoint."""

    checkpoint: float
    pairs: int
    intercept: float
    slope: float
    residual: float              # the sd of what the line leaves, in final noise units
    r2: float


def fit(pairs: list[Pair], settings: EarlyStopSettings, baseline: Baseline) -> list[Line]:
    """At each checkpoint, the least-squares line over the pairs whose curves can be compared."""
    lines = []
    for checkpoint in settings.checkpoints:
        unit = baseline.noise.gap_unit(checkpoint)
        points = [(gap / unit, pair.improvement / baseline.scale) for pair in pairs
                  if unit and baseline.scale
                  and why_unpaired(pair.candidate.curve, pair.incumbent.curve, 1.0, settings) is None
                  and (gap := gap_at(pair.candidate.curve, pair.incumbent.curve, checkpoint)) is not None]
        if len(points) < 3:
            continue
        x, y = np.array(points).T
        slope, intercept = np.polyfit(x, y, 1)
        left = y - (intercept + slope * x)
        lines.append(Line(checkpoint, len(points), float(intercept), float(slope),
                          float(left.std(ddof=2)), float(1 - left.var() / y.var()) if y.var() else math.nan))
    return lines


def prior_from(lines: list[Line], base: Prior = PRIOR) -> Prior:
    """The prior the default was made by, from `lines` (the default where there are none)."""
    if not lines:
        return base
    slope = min(1.0, math.floor(10 * min(line.slope for line in lines)) / 10)
    residuals = tuple((line.checkpoint, math.ceil(10 * line.residual + 1 - 1e-9) / 10) for line in lines)
    return dataclasses.replace(base, slope=max(slope, 0.1), residuals=residuals)


def split(pairs: list[Pair]) -> tuple[list[Pair], list[Pair]]:
    """The pairs of the first half of the seeds, and of the rest (file order kept)."""
    keys = [pair.seed if pair.seed is not None else i for i, pair in enumerate(pairs)]
    seeds = list(dict.fromkeys(keys))
    first = set(seeds[:len(seeds) // 2])
    return ([p for p, k in zip(pairs, keys) if k in first],
            [p for p, k in zip(pairs, keys) if k not in first])


def describe(lines: list[Line], baseline: Baseline, prior: Prior) -> list[str]:
    out = [f"how telling a mid-run gap is, in noise units (a gap over {_units(baseline)}):"]
    for line in lines:
        out.append(f"  at {line.checkpoint:.0%}: final = {line.intercept:+.2f} + {line.slope:.2f} x gap "
                   f"over {line.pairs} pairs, R² {line.r2:.2f}, residual {line.residual:.2f}")
    residuals = ", ".join(f"{r:g} at {c:.0%}" for c, r in prior.residuals)
    out.append(f"  the prior: slope {prior.slope:g} ± {prior.slope_sd:g}, intercept 0 ± "
               f"{prior.intercept_sd:g}, residual {residuals}, worth {prior.pseudo_pairs:g} pairs")
    return out


def _units(baseline: Baseline) -> str:
    gaps = ", ".join(f"{unit:.3f} at {c:.0%}" for c in sorted(baseline.noise.spread)
                     if (unit := baseline.noise.gap_unit(c)))
    return f"{gaps}; a final over {baseline.scale:.4f}"
