"""The numbers behind the sequential keep rule (agent/decide/sequential.py): the
group-sequential efficacy boundaries that spend at most alpha over a candidate's looks, and the
generalized-least-squares difference between a candidate and the incumbent when same-seed runs
share part of their luck. Pure functions; no knowledge of nights or ledgers."""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, stats

_NO_BOUND = 12.0       # a z-boundary that is never crossed


def spent_by(alpha: float, info: float, info_max: float, spend_power: float) -> float:
    """The error the spending function allows by information `info` of `info_max`:
    alpha·t^spend_power, t the information fraction (at most 1)."""
    return alpha * min(1.0, info / info_max) ** spend_power


@functools.lru_cache(maxsize=1024)
def efficacy_boundaries(alpha: float, info: tuple[float, ...], futility: tuple[float, ...],
                        first_efficacy: int, spend_power: float,
                        info_max: float | None = None) -> tuple[float, ...]:
    """z-boundaries e_k so that P_H0(cross e_k at some look) <= alpha.

    Canonical joint distribution of the looks (Z_k with corr sqrt(I_j/I_k)), binding futility
    boundaries `futility[k]` (stop when Z_k <= f_k), error spent by `alpha·t^spend_power`
    (t = I_k / info_max, the information fraction; info_max defaults to the last look's) from
    look `first_efficacy` on, and never below the fixed-sample boundary z_(1-alpha) (unspent
    error is then left unspent). Boundary k depends only on looks 0..k and info_max, so the
    boundaries of the looks taken so far can be computed before later looks are known: the
    Lan-DeMets property that lets batches of seeds land at any counts. Computed by recursive
    numerical integration (Armitage, McPherson & Rowe 1969) on a Simpson grid. Pure; cached.
    """
    total = info_max or info[-1]
    spent, bounds = 0.0, []
    grid = weights = None
    floor = float(stats.norm.isf(alpha))
    for k, (ik, fk) in enumerate(zip(info, futility)):
        lo = max(fk, -8.0)
        if k == 0:
            def cross(u: float) -> float:
                return float(stats.norm.sf(u))
        else:
            r = math.sqrt(info[k - 1] / ik)
            s = math.sqrt((ik - info[k - 1]) / ik)

            def cross(u: float, r=r, s=s, grid=grid, weights=weights) -> float:
                return float(np.dot(weights, stats.norm.sf((u - grid * r) / s)))
        target = spent_by(alpha, ik, total, spend_power) - spent if k >= first_efficacy else 0.0
        if target <= 1e-12:
            upper = _NO_BOUND
        elif cross(lo) <= target:
            upper = lo
        else:
            upper = optimize.brentq(lambda u: cross(u) - target, lo, _NO_BOUND, xtol=1e-7)
        # Binding futility removes so many null paths that late boundaries could fall below
        # a fixed-sample test at alpha; never keep on evidence weaker than that.
        upper = max(upper, floor)
        spent += cross(upper)
        bounds.append(upper)
        if k + 1 < len(info):
            hi = min(upper, 8.0)
            n = 2 * max(int((hi - lo) / 0.04), 2) + 1
            z = np.linspace(lo, hi, n)
            simpson = np.ones(n)
            simpson[1:-1:2], simpson[2:-1:2] = 4.0, 2.0
            simpson *= (hi - lo) / (n - 1) / 3.0
            if k == 0:
                density = stats.norm.pdf(z)
            else:
                density = (weights[None, :] * stats.norm.pdf(
                    (z[:, None] - grid[None, :] * r) / s) / s).sum(axis=1)
            grid, weights = z, density * simpson
    return tuple(bounds)


def gls_difference(candidate: dict[int, float], reference: dict[int, float],
                   seed_share: float) -> tuple[float, float, float, float]:
    """(reference level, candidate level, level difference ref − cand, its sd in units of σ).

    Model: value = level + seed effect + noise, with Var(seed effect) = share·σ² shared by
    all commits on that seed. Seeds are independent, so the information matrix is a sum of
    per-seed 2×2 blocks (written out: this runs once per look of every candidate).
    """
    vg, ve = seed_share, 1.0 - seed_share
    det = ve * (2 * vg + ve)
    a = b = c = sr = sc = 0.0                 # information [[a, b], [b, c]], score (sr, sc)
    for seed, r in reference.items():
        if seed in candidate:
            x = candidate[seed]
            a += (vg + ve) / det
            c += (vg + ve) / det
            b -= vg / det
            sr += ((vg + ve) * r - vg * x) / det
            sc += ((vg + ve) * x - vg * r) / det
        else:
            a += 1.0
            sr += r
    for seed, x in candidate.items():
        if seed not in reference:
            c += 1.0
            sc += x
    if a == 0 or c == 0:
        raise ValueError("gls_difference needs at least one run of each commit")
    inv_det = 1.0 / (a * c - b * b)
    ref_level = (c * sr - b * sc) * inv_det
    cand_level = (a * sc - b * sr) * inv_det
    var = (c + a + 2 * b) * inv_det           # Var(ref − cand) = cov00 + cov11 − 2·cov01
    return ref_level, cand_level, ref_level - cand_level, math.sqrt(max(var, 0.0))


def own_pairs_p(improvements: list[float]) -> tuple[float, int] | None:
    """(one-sided p, dof) of a paired t test that the mean of `improvements` (candidate better
    than the incumbent on the same seed, positive = better) is above zero; None under two
    pairs. The pairs' own spread is its variance, so the test holds whatever seeds share, and
    its n − 1 degrees of freedom pay for how little it knows. A spread of exactly zero is a
    difference the pairs agree on to the last digit: p 0 when it favours the candidate, else 1."""
    n = len(improvements)
    if n < 2:
        return None
    mean = sum(improvements) / n
    spread = math.sqrt(sum((d - mean) ** 2 for d in improvements) / (n - 1))
    if spread == 0:
        return (0.0 if mean > 0 else 1.0), n - 1
    return float(stats.t.sf(mean / (spread / math.sqrt(n)), n - 1)), n - 1
