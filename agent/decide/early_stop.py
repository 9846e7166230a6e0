"""Stopping a losing run early: a candidate's partial curve against its incumbent's on the
same seed, calibrated on the night's own finished pairs. A pure function of its inputs.

At each checkpoint (a share of the budget: 25%, 50%, 75% by default) the gap between the
two curves, `incumbent loss − candidate loss` averaged over the last stretch before the
checkpoint, predicts the candidate's final improvement on this seed (metric units, positive
= better) through a line fitted to the night's finished pairs at that checkpoint,
`final = a + b·gap + ε`. The fit is Bayesian (normal–inverse-gamma), shrunk toward a
conservative prior: the gap says nothing (b = 0) and the residual is as wide as a final
paired difference, worth `Prior.pseudo_pairs` pairs. So the first candidates of a night are
never stopped, and stops begin once its own pairs show that a mid-run gap carries over.

A run stops when even the favourable end of its predicted final improvement still `loses`:
ends the candidate (by default: worse than the incumbent on this seed; the loop asks its
keep rule whether a run ending there would discard the candidate). The end is a one-sided
bound at `confidence`, split over the checkpoints (Bonferroni), so that a run that would
not have lost is stopped with probability at most 1 − confidence over the whole run, if the
line fits. Two guards against curves that cross late: a gap closing fast enough to
cross before the end is never stopped (its trend since the checkpoint before, or since half
of the first one), and curves that cannot be compared are not paired (`CannotPair`, with
why: no progress lines, a different batch shape or step count, a different learning-rate
schedule). Nor is any run before the night has `Prior.min_pairs` finished pairs.

What a stop may be used for is the caller's contract (the loop's: agent/night/early_stops.py):
a stopped run is evidence for discarding its candidate only, never for a keep, a reference
or the noise estimate, so the keep rule's false-keep bound is untouched; incumbent,
baseline and replay runs are never judged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from agent.record.curves import Curve

MODES = ("auto", "off")
WINDOW = 0.1          # the gap at a checkpoint: the mean over this much of the budget before it
GRID = 5              # points of that stretch where both curves are read (linear interpolation)
SCHEDULE_TOLERANCE = 0.15   # largest gap between two normalised lr profiles of "one schedule"


@dataclass(frozen=True)
class EarlyStopSettings:
    """program.md's `early_stop:` (auto | off, or {mode, checkpoints, confidence})."""

    mode: str = "auto"
    checkpoints: tuple[float, ...] = (0.25, 0.5, 0.75)   # shares of the budget, increasing
    confidence: float = 0.99     # that a stopped run would have ended at or below the threshold

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"early_stop mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not self.checkpoints or list(self.checkpoints) != sorted(set(self.checkpoints)) \
                or not all(0 < c < 1 for c in self.checkpoints):
            raise ValueError(f"early_stop checkpoints must be increasing shares of the budget in "
                             f"(0, 1), like [0.25, 0.5, 0.75], got {list(self.checkpoints)}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"early_stop confidence must be in (0.5, 1), got {self.confidence}")

    @property
    def enabled(self) -> bool:
        return self.mode == "auto"


@dataclass(frozen=True)
class Prior:
    """What a mid-run gap says about the final one before the night has pairs of its own:
    nothing (slope 0), with a residual `residual` times the final paired spread, worth
    `pseudo_pairs` finished pairs. Conservative by construction. Measured on 45 recorded pairs
    of real train.py runs (benchmarks/paired_curves.jsonl, 20-s budget, 2 idle cores;
    benchmarks/early_stop_replay.py --sweep): a mid-run gap's residual there was 0.56 of the
    final gaps' size at 25 % of the budget and 0.27 and 0.23 at 50 % and 75 %; this prior saved 13 % per
    discard, 0.5 would save 23 % with no real win lost on those pairs, but it was chosen on
    them, and on the simulated curves of benchmarks/curve_nights.py (a gap less telling) it
    stopped a run its full run would not have ended. It stays 1.0 until more real pairs say so."""

    residual: float = 1.0
    pseudo_pairs: float = 4.0
    intercept_sd: float = 1.0      # in units of the final paired spread
    slope_sd: float = 100.0        # in units of that spread per unit of mid-run gap spread
    min_pairs: int = 3             # finished pairs at a checkpoint before any stop there


PRIOR = Prior()


@dataclass(frozen=True)
class FinishedPair:
    """A candidate run and its incumbent's run on the same seed, both finished: the loss gap
    at each checkpoint both curves reached, and the final improvement it turned into."""

    gaps: Mapping[float, float]   # checkpoint -> incumbent − candidate loss before it
    final_gap: float              # the candidate's final improvement on this seed, metric units

    @classmethod
    def of(cls, candidate: Curve, incumbent: Curve, final_gap: float,
           checkpoints: Sequence[float]) -> "FinishedPair":
        gaps = {c: gap for c in checkpoints
                if (gap := gap_at(candidate, incumbent, c)) is not None}
        return cls(gaps=gaps, final_gap=final_gap)


@dataclass(frozen=True)
class Forecast:
    checkpoint: float
    gap: float                      # incumbent − candidate training loss before the checkpoint
    predicted: float                # the final improvement the night's pairs predict
    interval: tuple[float, float]   # its central interval at the per-checkpoint level
    bound: float                    # the favourable end the stop is judged on
    pairs: int                      # finished pairs behind the fit at this checkpoint


@dataclass(frozen=True)
class Continue:
    reason: str
    forecast: Forecast | None = None


@dataclass(frozen=True)
class Stop:
    forecast: Forecast
    saved: float                    # share of the budget not run: 1 − the checkpoint
    reason: str


@dataclass(frozen=True)
class CannotPair:
    reason: str


Judgement = Continue | Stop | CannotPair


def _worse(gap: float) -> bool:
    return gap <= 0


def loss_before(curve: Curve, checkpoint: float) -> float | None:
    """The curve's mean loss over the stretch of the budget just before `checkpoint`, read by
    linear interpolation at a few evenly spread fractions (None: it does not cover it)."""
    points = curve.upto(checkpoint).points
    if not points:
        return None
    fractions = np.array([p.fraction for p in points])
    losses = np.array([p.loss for p in points])
    grid = np.linspace(checkpoint - min(WINDOW, checkpoint / 2), checkpoint, GRID)
    grid = grid[(grid >= fractions[0]) & (grid <= fractions[-1])]
    if not len(grid):
        # One point only, close enough to the checkpoint to stand for it.
        last = points[-1]
        return last.loss if checkpoint - last.fraction <= WINDOW else None
    return float(np.interp(grid, fractions, losses).mean())


def gap_at(candidate: Curve, incumbent: Curve, checkpoint: float) -> float | None:
    """incumbent − candidate loss before `checkpoint` (positive: the candidate is ahead)."""
    mine, theirs = loss_before(candidate, checkpoint), loss_before(incumbent, checkpoint)
    return None if mine is None or theirs is None else theirs - mine


def why_unpaired(candidate: Curve, incumbent: Curve, now: float,
                 settings: EarlyStopSettings) -> str | None:
    """Why these two curves cannot be compared, or None when they can."""
    first = settings.checkpoints[0]
    if not incumbent.points:
        return "the incumbent's run on this seed printed no progress lines"
    if not candidate.points and now >= first:
        return f"the run printed no progress lines by {first:.0%} of its budget"
    if candidate.batch_shape and incumbent.batch_shape and candidate.batch_shape != incumbent.batch_shape:
        return (f"a different batch shape ({candidate.batch_shape} against the incumbent's "
                f"{incumbent.batch_shape}): its steps see other data")
    if candidate.total_steps and incumbent.total_steps and candidate.total_steps != incumbent.total_steps:
        return (f"a different step grid ({candidate.total_steps} steps against the incumbent's "
                f"{incumbent.total_steps})")
    differs = _schedule_gap(candidate, incumbent)
    if differs is not None and differs > SCHEDULE_TOLERANCE:
        return (f"a different learning-rate schedule (the normalised rates differ by "
                f"{differs:.0%} of the peak): curves on other schedules cross late")
    return None


def _schedule_gap(candidate: Curve, incumbent: Curve) -> float | None:
    """Largest difference between the two runs' lr, each over its own peak so far, where both
    report it (None: one of them does not)."""
    mine = [(p.fraction, p.lr) for p in candidate.points if p.lr is not None]
    theirs = [(p.fraction, p.lr) for p in incumbent.upto(candidate.reached).points if p.lr is not None]
    if len(mine) < 2 or len(theirs) < 2:
        return None
    peak_mine, peak_theirs = max(lr for _, lr in mine), max(lr for _, lr in theirs)
    if peak_mine <= 0 or peak_theirs <= 0:
        return None
    # Only where both runs have points: np.interp holds an end value flat beyond it, which
    # read a run's first point in warm-up against the other's first point past it as "another
    # schedule" (9 of 45 real pairs, null edits among them, were refused that way).
    lo, hi = max(mine[0][0], theirs[0][0]), min(mine[-1][0], theirs[-1][0])
    inside = [(f, lr) for f, lr in mine if lo <= f <= hi]
    if not inside:
        return None
    at = np.array([f for f, _ in inside])
    ref = np.interp(at, [f for f, _ in theirs], [lr / peak_theirs for _, lr in theirs])
    return float(np.max(np.abs(np.array([lr / peak_mine for _, lr in inside]) - ref)))


def forecast(gap: float, checkpoint: float, pairs: Sequence[FinishedPair], scale: float,
             tail: float, prior: Prior = PRIOR) -> Forecast:
    """The final improvement predicted from a `gap` at `checkpoint`, by the night's `pairs`
    and the prior (`scale`: the sd of a final same-seed difference, metric units; `tail`: the
    one-sided level of the bound).

    The prior's unit is the larger of `scale` and the size of the pairs' final gaps (their
    root mean square), real effects included: "a gap tells nothing" means a residual as wide
    as the final differences themselves. Where seeds fix most of a run (a deterministic script) the noise alone is far
    narrower than the candidates' effects, and a prior that narrow would let two or three
    pairs draw a confident line through noise."""
    xs, ys = [], []
    for pair in pairs:
        x = pair.gaps.get(checkpoint)
        if x is not None and math.isfinite(x) and math.isfinite(pair.final_gap):
            xs.append(x)
            ys.append(pair.final_gap)
    if ys:
        scale = max(scale, math.sqrt(float(np.mean(np.square(ys)))))
    x_scale = float(np.std(xs)) if len(xs) >= 2 and np.std(xs) > 0 else max(abs(gap), 1e-12)
    # Normal–inverse-gamma regression of y on (1, x), y in units of `scale`, x of `x_scale`:
    # σ² ~ IG(ν0/2, ν0·s0²/2) with s0 = prior.residual, and (a, b) | σ² ~ N(0, σ²·V0) with
    # V0 = diag(intercept_sd², slope_sd²) / s0², so that a and b have about those sds a priori.
    design = np.column_stack([np.ones(len(xs)), np.array(xs) / x_scale]) if xs else np.zeros((0, 2))
    y = np.array(ys) / scale
    v0_inv = np.diag([1 / prior.intercept_sd ** 2, 1 / prior.slope_sd ** 2]) * prior.residual ** 2
    precision = v0_inv + design.T @ design
    covariance = np.linalg.inv(precision)
    mean = covariance @ (design.T @ y)
    nu = prior.pseudo_pairs + len(xs)
    sse = float(y @ y - mean @ precision @ mean)
    s2 = (prior.pseudo_pairs * prior.residual ** 2 + max(sse, 0.0)) / nu
    here = np.array([1.0, gap / x_scale])
    centre = float(here @ mean)
    spread = math.sqrt(s2 * (1.0 + here @ covariance @ here))
    from scipy import stats   # here, not at import: program.md's parser imports this module

    t = float(stats.t.ppf(1 - tail, nu))
    lo, hi = centre - t * spread, centre + t * spread
    return Forecast(checkpoint=checkpoint, gap=gap, predicted=centre * scale,
                    interval=(lo * scale, hi * scale), bound=hi * scale, pairs=len(xs))


def judge(candidate: Curve, incumbent: Curve, pairs: Sequence[FinishedPair],
          settings: EarlyStopSettings, *, scale: float, now: float | None = None,
          loses: Callable[[float], bool] | None = None, prior: Prior = PRIOR) -> Judgement:
    """Continue, stop or cannot pair, for a candidate run whose curve is `candidate` so far
    (at `now` of its budget by the harness's clock; default: its last point) against the
    incumbent's curve on the same seed. `pairs`: the night's finished pairs; `scale`: the sd
    of a final same-seed difference (agent/decide/noise.py's pair_sd, or √2·sd; the forecast
    widens it to the size of the pairs' final gaps where that is larger); `loses(g)`:
    whether a run that ends g better than the incumbent's on this seed (metric units) ends its
    candidate, monotone (if g loses, so does anything less); default g <= 0."""
    now = candidate.reached if now is None else now
    if not settings.enabled:
        return Continue("early stopping is off")
    why = why_unpaired(candidate, incumbent, now, settings)
    if why is not None:
        return CannotPair(why)
    reached = [c for c in settings.checkpoints if c <= min(candidate.reached, incumbent.reached)]
    if not reached:
        return Continue(f"before the first checkpoint ({settings.checkpoints[0]:.0%})")
    if not scale or not math.isfinite(scale) or scale <= 0:
        return Continue("no noise estimate to scale the forecast by")
    checkpoint = reached[-1]
    gap = gap_at(candidate, incumbent, checkpoint)
    if gap is None:
        return Continue(f"no progress lines near {checkpoint:.0%} of the budget on both runs")
    tail = (1 - settings.confidence) / len(settings.checkpoints)
    result = forecast(gap, checkpoint, pairs, scale, tail, prior)
    where = f"at {checkpoint:.0%}: predicted {result.predicted:+.4g} [{result.interval[0]:+.4g}, " \
            f"{result.interval[1]:+.4g}] from a gap of {gap:+.4g} ({result.pairs} finished pairs)"
    if not (loses or _worse)(result.bound):
        return Continue(where, result)
    if result.pairs < prior.min_pairs:
        return Continue(f"{where}; a stop needs {prior.min_pairs} finished pairs here", result)
    # Closing: the straight line through this gap and an earlier one (the checkpoint before,
    # or at the first one the gap at half of it) crosses before the end. A night's pairs
    # cannot tell a curve that crosses late from a loser at one checkpoint; its trend can.
    earlier = [c for c in settings.checkpoints if c < checkpoint]
    then = earlier[-1] if earlier else checkpoint / 2
    before = gap_at(candidate, incumbent, then)
    if before is not None and gap > before:
        ahead = gap + (gap - before) / (checkpoint - then) * (1 - checkpoint)
        if ahead >= 0:
            return Continue(f"{where}; closing: it would cross before the end", result)
    return Stop(result, saved=1.0 - checkpoint,
                reason=f"a discard stopped early {where}: at best {result.bound:+.4g}")
