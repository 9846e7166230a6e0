"""What a mid-run loss gap says about a run's final improvement: a line through the night's
finished pairs, shrunk toward a prior measured on real curves. A pure function of its inputs.

Both axes are in units of noise, so that one prior can serve another script and metric:
- the gap (incumbent − candidate training loss before a checkpoint) in units of √2 × the
  seed-to-seed spread of one run's loss there (`CurveNoise`): the spread of a gap between two
  runs that share nothing, an upper bound on a same-seed gap's when nothing changed;
- the final improvement (metric units, positive = better) in units of the spread of a final
  same-seed difference (the keep rule's `pair_sd`, agent/decide/noise.py).

In those units the prior says that a gap carries over about one for one. So a gap many times
the noise of curves is a loss before the night has finished a single pair, while a gap of a few
noise units needs the night's own pairs to show how it carries over.

The fit is Bayesian: y = a + b·x + ε, (a, b) ~ N((0, slope), diag(intercept_sd², slope_sd²))
(with a small prior share of an unknown slope), ε ~ N(0, σ²) with σ² ~ IG(ν0/2, ν0·r²/2)
apart from them; the forecast is the posterior predictive, read on a grid of σ².
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class Prior:
    """What a gap says before the night has pairs of its own, in the noise units above.

    Measured on the 38 comparable pairs of real train.py runs in benchmarks/early_stop/paired_curves.jsonl
    (20-s budget, 2 cores; benchmarks/early_stop/early_stop_replay.py prints the fit, benchmarks/early_stop/curve_prior.py
    makes a prior from it): the least-squares slope was 1.19, 1.38 and 1.03 at 25 %, 50 % and
    75 % of the budget, the residual 1.19, 0.57 and 0.46. The prior takes
    - a slope of 1, at most each measured one (a slope overestimated would stop runs that carry
      less of their gap to the end), give or take `slope_sd`: at the first checkpoint's level
      (z ≈ 2.7) a gap still counts for 0.6 of itself, enough to stop one of ten noise units
      without a single pair (issue 29's 4.36 against 2.35 at 25 % was 18);
    - each checkpoint's residual plus a tenth, rounded up to a tenth (`residuals`, interpolated
      between checkpoints, held beyond): a curve shows more of a run's luck the further it has
      run; the tenth halves the stops a full run would not have made in the simulated nights
      of benchmarks/sim/worker_nights.py, whose curves tell less (1 in 24 nights, as before issue 29);
    - an intercept of 0 (there, the typical change lost by 0.1–1.0 units even at a gap of 0: a
      prior that knew it would stop more);
    - the weight of `pseudo_pairs` pairs for the residual: a night whose pairs scatter more
      widely (a script whose curves tell less: nanoGPT's, by
      benchmarks/early_stop/collect_nanogpt_curves.py) widens it within a few pairs;
    - a small prior share, `other_share`, of a script unlike train.py: any slope within
      `other_slope_sd`. Below the bound's own tail (1/300 a checkpoint), so that it does not on
      its own forbid a stop before the night's first pair; a night whose pairs show another
      slope (a seeded step-budgeted script: final differences far narrower than its curves'
      spread across seeds) makes it the prior within a few pairs."""

    slope: float = 1.0
    slope_sd: float = 0.15
    residuals: tuple[tuple[float, float], ...] = ((0.25, 1.3), (0.5, 0.7), (0.75, 0.6))
    intercept_sd: float = 1.0
    pseudo_pairs: float = 4.0
    other_share: float = 0.001
    other_slope_sd: float = 10.0

    def residual(self, checkpoint: float) -> float:
        """The prior's residual at `checkpoint` (a share of the budget)."""
        at, values = zip(*self.residuals)
        return float(np.interp(checkpoint, at, values))


PRIOR = Prior()


@dataclass(frozen=True)
class CurveNoise:
    """How much one run's training loss before each checkpoint moves with the seed, pooled
    over the night's commits run on two or more seeds (as agent/decide/noise.py pools the final
    metric's): checkpoint -> (sd, degrees of freedom)."""

    spread: Mapping[float, tuple[float, int]]

    def gap_unit(self, checkpoint: float) -> float | None:
        """The spread of a same-seed gap at `checkpoint` when nothing changed, at most (None:
        not measured)."""
        sd, dof = self.spread.get(checkpoint, (0.0, 0))
        return math.sqrt(2.0) * sd if dof >= MIN_DOF and sd > 0 else None


MIN_DOF = 2        # runs beyond one per commit before a curve's spread is believed


def pooled_curve_noise(losses: Mapping[float, Iterable[Sequence[float]]]) -> CurveNoise:
    """`losses`: checkpoint -> one group per commit of its runs' losses before the checkpoint."""
    spread = {}
    for checkpoint, groups in losses.items():
        sum_sq, dof = 0.0, 0
        for values in groups:
            if len(values) >= 2:
                sum_sq += float(np.sum((np.asarray(values) - np.mean(values)) ** 2))
                dof += len(values) - 1
        if dof:
            spread[checkpoint] = (math.sqrt(sum_sq / dof), dof)
    return CurveNoise(spread)


@dataclass(frozen=True)
class Forecast:
    checkpoint: float
    gap: float                      # incumbent − candidate training loss before the checkpoint
    predicted: float                # the final improvement the night's pairs predict
    interval: tuple[float, float]   # its central interval at the per-checkpoint level
    bound: float                    # the favourable end the stop is judged on
    pairs: int                      # finished pairs behind the fit at this checkpoint
    gap_units: float                # the gap in units of a same-seed gap's spread


def forecast(gap: float, checkpoint: float, pairs: Sequence[tuple[float, float]], *,
             gap_unit: float, final_unit: float, tail: float, prior: Prior = PRIOR) -> Forecast:
    """The final improvement predicted from a `gap` at `checkpoint` by the night's `pairs`
    ((gap there, final improvement) of each finished pair, physical units) and the prior;
    `gap_unit`, `final_unit`: the noise units above; `tail`: the one-sided level of the bound."""
    usable = [(x / gap_unit, y / final_unit) for x, y in pairs if math.isfinite(x) and math.isfinite(y)]
    line = _posterior_line(usable, prior, prior.residual(checkpoint))
    mean, sd = line.predictive(gap / gap_unit)
    lo, hi = _quantile(line.weights, mean, sd, tail), _quantile(line.weights, mean, sd, 1 - tail)
    centre = float(line.weights @ mean)
    return Forecast(checkpoint=checkpoint, gap=gap, predicted=centre * final_unit,
                    interval=(lo * final_unit, hi * final_unit), bound=hi * final_unit,
                    pairs=len(usable), gap_units=gap / gap_unit)


@dataclass(frozen=True)
class _Line:
    """The posterior of y = a + b·x + ε on a grid of residual variances: at each, the weight
    of that variance and the normal posterior of (a, b) given it."""

    variances: np.ndarray        # (k,)
    weights: np.ndarray          # (k,), summing to 1
    means: np.ndarray            # (k, 2)
    covariances: np.ndarray      # (k, 2, 2)

    def predictive(self, x: float) -> tuple[np.ndarray, np.ndarray]:
        """Mean and sd of a new pair's y at gap x, under each variance of the grid."""
        here = np.array([1.0, x])
        return self.means @ here, np.sqrt(self.variances + here @ self.covariances @ here)


GRID = 600          # residual variances the posterior is read at, evenly spread in log


def _posterior_line(pairs: Sequence[tuple[float, float]], prior: Prior, residual: float) -> _Line:
    """The posterior of the line, exact up to the grid over σ². The slope's prior is a mixture:
    the measured one, N(slope, slope_sd²), and with prior probability `other_share` a script
    whose gaps relate to its final otherwise, N(0, other_slope_sd²). Both are apart from σ² ~
    IG(ν0/2, ν0·r²/2): a night whose own pairs scatter widely widens the residual without
    loosening the measured slope, and a night whose pairs show another slope than the
    measured one (a step-budgeted script whose seed fixes the run: its final differences are
    far narrower than its curves' spread across seeds) leaves it within a few pairs."""
    design = np.array([[1.0, x] for x, _ in pairs]).reshape(-1, 2)
    y = np.array([y for _, y in pairs])
    n = len(y)
    stats = (n, design.T @ design, design.T @ y, float(y @ y))
    r2, nu = residual ** 2, prior.pseudo_pairs
    # the grid: from far below the prior's residual to far above the pairs' own spread
    top = max(r2, stats[3] / n if n else r2)
    variances = np.exp(np.linspace(math.log(r2) - 12, math.log(top) + 6, GRID))
    # the inverse-gamma prior's log density, and dσ² = σ²·d(log σ²) for the even log grid
    log_variance_prior = -(nu / 2 + 1) * np.log(variances) - nu * r2 / (2 * variances) + np.log(variances)
    parts = [_given_slope(stats, variances, prior.slope, prior.slope_sd, prior.intercept_sd,
                          math.log(1 - prior.other_share)),
             _given_slope(stats, variances, 0.0, prior.other_slope_sd, prior.intercept_sd,
                          math.log(prior.other_share))]
    log_weight = (np.concatenate([log_evidence for log_evidence, _, _ in parts])
                  + np.tile(log_variance_prior, 2))
    weights = np.exp(log_weight - log_weight.max())
    return _Line(np.tile(variances, 2), weights / weights.sum(),
                 np.concatenate([means for _, means, _ in parts]),
                 np.concatenate([covariances for _, _, covariances in parts]))


def _given_slope(stats: tuple[int, np.ndarray, np.ndarray, float], variances: np.ndarray,
                 slope: float, slope_sd: float, intercept_sd: float, log_share: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For (a, b) ~ N((0, slope), diag(intercept_sd², slope_sd²)) at each σ² of the grid: the
    log evidence of the pairs (the linear model's, (a, b) integrated out, plus `log_share`),
    and the normal posterior of (a, b)."""
    n, xtx, xty, yty = stats
    prior_mean = np.array([0.0, slope])
    prior_precision = np.diag([1 / intercept_sd ** 2, 1 / slope_sd ** 2])
    precisions = prior_precision + xtx / variances[:, None, None]
    covariances = np.linalg.inv(precisions)
    means = np.einsum("kij,kj->ki", covariances, prior_precision @ prior_mean + xty / variances[:, None])
    log_evidence = (log_share - 0.5 * n * np.log(variances)
                    + 0.5 * np.log(np.linalg.det(prior_precision)) - 0.5 * np.log(np.linalg.det(precisions))
                    - 0.5 * (yty / variances + prior_mean @ prior_precision @ prior_mean
                             - np.einsum("ki,kij,kj->k", means, precisions, means)))
    return log_evidence, means, covariances


def _quantile(weights: np.ndarray, mean: np.ndarray, sd: np.ndarray, level: float) -> float:
    """The `level` quantile of the mixture of normals N(mean_k, sd_k²) with `weights`."""
    from scipy import optimize, stats   # here, not at import: program.md's parser imports this module

    def below(q: float) -> float:
        return float(weights @ stats.norm.cdf((q - mean) / sd)) - level

    lo, hi = float(np.min(mean - 50 * sd)), float(np.max(mean + 50 * sd))
    return float(optimize.brentq(below, lo, hi, xtol=1e-10 * max(1.0, float(np.max(sd)))))
