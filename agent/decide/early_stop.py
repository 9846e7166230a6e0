"""Stopping a losing run early: a candidate's partial curve against its incumbent's on the
same seed. A pure function of its inputs.

At each checkpoint (a share of the budget: 25%, 50%, 75% by default) the gap between the
two curves, `incumbent loss − candidate loss` averaged over the last stretch before the
checkpoint, predicts the candidate's final improvement on this seed (metric units, positive
= better) through a line fitted to the night's finished pairs at that checkpoint, shrunk
toward a prior measured on real curves (agent/decide/curve_forecast.py). Both are in units
of noise: the gap in √2 × the spread of a run's loss there across seeds (the night's
reference curves measure it, `CurveNoise`), the final in the spread of a final same-seed
difference. So a gap many times the noise of curves stops its run at the first checkpoint,
before the night has finished a single pair, and smaller gaps stop once the night's own
pairs show that they carry over.

A run stops when even the favourable end of its predicted final improvement still `loses`:
ends the candidate (by default: worse than the incumbent on this seed; the loop asks its
keep rule whether a run ending there would discard the candidate). The end is a one-sided
bound at `confidence`, split over the checkpoints (Bonferroni), so that a run that would
not have lost is stopped with probability at most 1 − confidence over the whole run, if the
line fits. Two guards against curves that cross late: a gap closing fast enough to come
within a noise unit of crossing before the end is never stopped (its trend since the
checkpoint before, or since half of the first one), and curves that cannot be compared are not paired (`CannotPair`, with
why: no progress lines, a different context length or step count, a different learning-rate
schedule; a different batch count pairs). Nor is any run judged before the night has measured the spread of its curves
(runs of a commit on three seeds: the baseline's).

What a stop may be used for is the caller's contract (the loop's: agent/night/early_stops.py):
a stopped run is evidence for discarding its candidate only, never for a keep, a reference
or the noise estimate, so the keep rule's false-keep bound is untouched; incumbent,
baseline and replay runs are never judged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from agent.decide.curve_forecast import (PRIOR, CurveNoise, Forecast, Prior, forecast,
                                         pooled_curve_noise)
from agent.record.curves import Curve

MODES = ("auto", "off")
WINDOW = 0.1          # the gap at a checkpoint: the mean over this much of the budget before it
SCHEDULE_TOLERANCE = 0.15   # largest gap between two normalised lr profiles of "one schedule"
PEAK_SHARE = 0.999          # a rate this close to the run's peak so far is at its peak


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
class FinishedPair:
    """A candidate run and its incumbent's run on the same seed, both finished: the loss gap
    at each checkpoint both curves reached, and the final improvement it turned into. Curves
    that cannot be compared (`why_unpaired`) have no gaps: the line is fitted on the pairs the
    rule would have judged, not on other contexts or schedules, whose gaps mean less."""

    gaps: Mapping[float, float]   # checkpoint -> incumbent − candidate loss before it
    final_gap: float              # the candidate's final improvement on this seed, metric units

    @classmethod
    def of(cls, candidate: Curve, incumbent: Curve, final_gap: float,
           checkpoints: Sequence[float]) -> "FinishedPair":
        if why_unpaired(candidate, incumbent, 1.0, EarlyStopSettings(checkpoints=tuple(checkpoints))):
            return cls(gaps={}, final_gap=final_gap)
        gaps = {c: gap for c in checkpoints
                if (gap := gap_at(candidate, incumbent, c)) is not None}
        return cls(gaps=gaps, final_gap=final_gap)


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
    """The curve's mean loss over the stretch of the budget just before `checkpoint`: the
    mean of the line through its points there, every point counted (a script that prints
    every step's loss has noisy points, and two curves thinned for the ledger keep different
    ones). None: it does not cover the stretch."""
    points = curve.upto(checkpoint).points
    if not points:
        return None
    fractions = np.array([p.fraction for p in points])
    losses = np.array([p.loss for p in points])
    lo = max(checkpoint - min(WINDOW, checkpoint / 2), fractions[0])
    hi = min(checkpoint, fractions[-1])
    if hi <= lo:
        # One point only, close enough to the checkpoint to stand for it.
        last = points[-1]
        return last.loss if checkpoint - last.fraction <= WINDOW else None
    at = np.concatenate([[lo], fractions[(fractions > lo) & (fractions < hi)], [hi]])
    return float(np.trapezoid(np.interp(at, fractions, losses), at) / (hi - lo))


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
    mine, theirs = _context(candidate.batch_shape), _context(incumbent.batch_shape)
    if mine and theirs and mine != theirs:
        return (f"a different context ({candidate.batch_shape} against the incumbent's "
                f"{incumbent.batch_shape}): its loss is a mean over other positions")
    if candidate.total_steps and incumbent.total_steps and candidate.total_steps != incumbent.total_steps:
        return (f"a different step grid ({candidate.total_steps} steps against the incumbent's "
                f"{incumbent.total_steps})")
    differs = _schedule_gap(candidate, incumbent)
    if differs is not None and differs > SCHEDULE_TOLERANCE:
        return (f"a different learning-rate schedule (the normalised rates differ by "
                f"{differs:.0%} of the peak): curves on other schedules cross late")
    return None


def _context(batch_shape: str | None) -> str | None:
    """A step's shape without its batch count ("64x256" -> "256"; None: not known, or no
    context printed). The batch count may differ between curves that pair: a batch's mean
    loss estimates the same expected loss at any batch size, only more or less noisily (the
    window before a checkpoint averages that out), so a gap at the same share of the budget
    says what it says for any other change; a smaller batch is ahead early and loses its lead
    late (never stopped wrongly), a larger one behind early and closing (the closing guard's).
    A different context length is another loss: a mean over positions with other amounts of
    context before them."""
    if not batch_shape or "x" not in batch_shape:
        return None
    return batch_shape.split("x", 1)[1]


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
    # From the incumbent's second point at its peak on: in a warm-up a line's fraction is its
    # clock rounded as printed (train.py: 0.1 s, a quarter of a 20-s budget's 0.4-s warm-up), so
    # two lines at the "same" fraction differ by up to a quarter of the peak there, and a run's
    # last warm-up line may fall after the other's first line at its peak. Read from the start,
    # 8 of the 52 real pairs that keep their schedule differed by over 10 % of the peak (up to
    # 18 %, past the 15 % tolerance), so the same loser was "another schedule" on one night
    # and not on another. A longer warm-up still shows:
    # its rate is below the peak the incumbent has held since.
    at_peak = [f for f, lr in theirs if lr >= PEAK_SHARE * peak_theirs]
    inside = [(f, lr) for f, lr in inside if f >= at_peak[min(1, len(at_peak) - 1)]]
    if not inside:
        return None
    at = np.array([f for f, _ in inside])
    ref = np.interp(at, [f for f, _ in theirs], [lr / peak_theirs for _, lr in theirs])
    return float(np.max(np.abs(np.array([lr / peak_mine for _, lr in inside]) - ref)))


def curve_noise(commits: Iterable[Sequence[Curve]], checkpoints: Sequence[float]) -> CurveNoise:
    """The spread of a run's loss before each checkpoint across seeds, within a commit, pooled
    over `commits` (each: the curves of one commit's runs, placed on one axis)."""
    return pooled_curve_noise({
        c: [[x for curve in curves if (x := loss_before(curve, c)) is not None] for curves in commits]
        for c in checkpoints})


def judge(candidate: Curve, incumbent: Curve, pairs: Sequence[FinishedPair],
          settings: EarlyStopSettings, *, scale: float, noise: CurveNoise | None,
          now: float | None = None, loses: Callable[[float], bool] | None = None,
          prior: Prior = PRIOR) -> Judgement:
    """Continue, stop or cannot pair, for a candidate run whose curve is `candidate` so far
    (at `now` of its budget by the harness's clock; default: its last point) against the
    incumbent's curve on the same seed. `pairs`: the night's finished pairs; `scale`: the sd
    of a final same-seed difference (agent/decide/noise.py's pair_sd, or √2·sd); `noise`: the
    spread of the night's curves (`curve_noise`); `loses(g)`: whether a run that ends g better
    than the incumbent's on this seed (metric units) ends its candidate, monotone (if g loses,
    so does anything less); default g <= 0."""
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
    unit = noise.gap_unit(checkpoint) if noise is not None else None
    if unit is None:
        return Continue(f"the spread of curves at {checkpoint:.0%} is not measured yet (runs of a "
                        f"commit on three seeds)")
    gap = gap_at(candidate, incumbent, checkpoint)
    if gap is None:
        return Continue(f"no progress lines near {checkpoint:.0%} of the budget on both runs")
    tail = (1 - settings.confidence) / len(settings.checkpoints)
    calibration = [(x, pair.final_gap) for pair in pairs if (x := pair.gaps.get(checkpoint)) is not None]
    result = forecast(gap, checkpoint, calibration, gap_unit=unit, final_unit=scale, tail=tail,
                      prior=prior)
    where = f"at {checkpoint:.0%}: predicted {result.predicted:+.4g} [{result.interval[0]:+.4g}, " \
            f"{result.interval[1]:+.4g}] from a gap of {gap:+.4g} ({result.gap_units:+.1f} noise " \
            f"sds; {result.pairs} finished pairs)"
    if not (loses or _worse)(result.bound):
        return Continue(where, result)
    # Closing: the straight line through this gap and an earlier one (the checkpoint before,
    # or at the first one the gap at half of it) comes within a noise unit of crossing before
    # the end. A night's pairs cannot tell a curve that crosses late from a loser at one
    # checkpoint; its trend can, give or take the noise of the two gaps it is drawn through.
    earlier = [c for c in settings.checkpoints if c < checkpoint]
    then = earlier[-1] if earlier else checkpoint / 2
    before = gap_at(candidate, incumbent, then)
    if before is not None and gap > before:
        ahead = gap + (gap - before) / (checkpoint - then) * (1 - checkpoint)
        if ahead + unit >= 0:
            return Continue(f"{where}; closing: it would cross before the end", result)
    return Stop(result, saved=1.0 - checkpoint,
                reason=f"a discard stopped early {where}: at best {result.bound:+.4g}")
