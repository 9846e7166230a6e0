"""What each kept change contributes, from leave-one-out runs paired on seeds (pure functions).

A night of K keeps ends at an incumbent I. For each kept change k, the variant I∖k is the
incumbent with that change reverted; all of them, I and the base B run on the same seeds.
Per seed s, in the program's direction (positive = better):

    contribution_k(s) = improvement of I over I∖k on seed s    what removing k costs
    gain(s)           = improvement of I over B on seed s      the night's whole gain
    interaction(s)    = gain(s) − Σ_k contribution_k(s)        what the sum does not explain

Each is estimated by the mean over seeds with a two-sided t interval and p-value (a one-sample
t-test of the per-seed values against 0), the t distribution as in agent/decide. Pairing on
seeds cancels a seed's share of the noise, the way the keep rule pairs a candidate with its
incumbent. With K changes tested at once, Holm's step-down adjustment of the p-values is given
beside them (it bounds the chance of calling any no-effect change real at the level).

An interaction of 0 means the changes add up; a positive one, that together they do more
than apart (a change that only helps with another); a negative one, that they overlap (two
ways to the same gain: each looks useless with the other present).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from agent.record.records import Direction

LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    """The mean of per-seed values with its interval and two-sided p-value against 0
    (None where fewer than two seeds make them undefined)."""

    value: float | None
    interval: tuple[float, float] | None
    p_value: float | None
    n: int
    level: float = LEVEL

    @property
    def excludes_zero(self) -> bool | None:
        """Whether the interval lies wholly on one side of 0 (None without an interval)."""
        if self.interval is None:
            return None
        return self.interval[0] > 0 or self.interval[1] < 0


def improvement(a: Mapping[int, float], b: Mapping[int, float], direction: Direction) -> dict[int, float]:
    """Per common seed, how much better `a` is than `b` (positive = better in `direction`)."""
    sign = Direction(direction).sign
    return {seed: sign * (a[seed] - b[seed]) for seed in sorted(set(a) & set(b))}


def estimate(per_seed: Mapping[int, float], level: float = LEVEL) -> Estimate:
    """Mean, t interval and two-sided one-sample t-test p-value of `per_seed`'s values."""
    from scipy import stats

    values = list(per_seed.values())
    n = len(values)
    if n == 0:
        return Estimate(None, None, None, 0, level)
    mean = statistics.fmean(values)
    if n < 2:
        return Estimate(mean, None, None, 1, level)
    sd = statistics.stdev(values)
    if sd == 0 or not math.isfinite(sd):
        # Identical differences on every seed: no spread to test against (a deterministic
        # script). The interval is the point; p is 1 for no difference, else 0.
        return Estimate(mean, (mean, mean), 1.0 if mean == 0 else 0.0, n, level)
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    p = float(2 * stats.t.sf(abs(mean / se), n - 1))
    return Estimate(mean, (mean - half, mean + half), p, n, level)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the order given (None stays None)."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (len(ranked) - rank) * p))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Ablation:
    """The leave-one-out answer: each change's contribution, the whole gain, and the rest."""

    contributions: dict[str, Estimate]       # change -> what removing it costs
    adjusted: dict[str, float | None]        # change -> Holm-adjusted p-value
    gain: Estimate                           # incumbent vs base
    sum_contributions: float | None          # Σ of the contributions' estimates
    interaction: Estimate                    # gain − Σ contributions, per seed


def leave_one_out(incumbent: Mapping[int, float], base: Mapping[int, float],
                  without: Mapping[str, Mapping[int, float]], direction: Direction,
                  level: float = LEVEL) -> Ablation:
    """Contributions of the changes of `without` (change -> seed -> metric of the incumbent
    without it), the gain of `incumbent` over `base`, and their interaction; all paired on
    seeds. The interaction uses the seeds on which every one of them has a value."""
    per_change = {name: improvement(incumbent, values, direction) for name, values in without.items()}
    contributions = {name: estimate(values, level) for name, values in per_change.items()}
    names = list(contributions)
    adjusted = dict(zip(names, holm([contributions[n].p_value for n in names])))
    gain_per_seed = improvement(incumbent, base, direction)
    common = set(gain_per_seed).intersection(*(set(v) for v in per_change.values()))
    rest = {seed: gain_per_seed[seed] - sum(values[seed] for values in per_change.values())
            for seed in sorted(common)}
    measured = [c.value for c in contributions.values() if c.value is not None]
    return Ablation(contributions=contributions, adjusted=adjusted,
                    gain=estimate(gain_per_seed, level),
                    sum_contributions=sum(measured) if measured else None,
                    interaction=estimate(rest, level))
