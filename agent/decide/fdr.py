"""Night-wide false-discovery control: LORD++ (Ramdas, Yang, Wainwright, Jordan 2017).

A night tests hundreds of candidates one after another. Testing each at `alpha` keeps about
`alpha` of the no-effect ones; LORD++ instead gives test t its own level `alpha_t`, paid from
a "wealth" that starts at `w0` and is refilled by each discovery (keep), so that the
(modified) false discovery rate over the night stays at or below `alpha` for independent
tests:

    alpha_t = gamma(t) * w0 + (alpha - w0) * gamma(t - tau_1) + alpha * sum_{j>=2} gamma(t - tau_j)

where tau_j is the index of the j-th keep and `gamma` is a non-increasing sequence summing
to at most 1. Long dry spells make the level small; keeps make it large again.

The state is a pure function of the earlier decisions (`Evidence.history`, oldest first,
one entry per finished experiment), so a resumed loop computes the same levels.
"""
from __future__ import annotations

import math
from typing import Sequence

from agent.record.events import Decision, Verdict

METHODS = ("none", "lord")   # program.md `fdr:`: per-candidate alpha, or LORD++ over the night


def gamma(j: int, horizon: int | None = None) -> float:
    """The spending sequence, j = 1, 2, ...

    Default: the sequence of the LORD++ paper, ~log(j)/(j·e^sqrt(log j)), which sums to 1
    over an infinite horizon. With `horizon` (the expected number of tests in a night) the
    sequence 1/(h·(1 + j/h)^2) is used instead: it sums to less than 1 and spends half of
    the wealth within `horizon` tests of a discovery, which is what an 8-hour night needs.
    """
    if j < 1:
        return 0.0
    if horizon is None:
        return 0.0722 * math.log(max(j, 2)) / (j * math.exp(math.sqrt(math.log(j))))
    h = float(horizon)
    # sum_{j>=1} 1/(h (1+j/h)^2) < integral_0^inf dx/(1+x)^2 = 1
    return 1.0 / (h * (1.0 + j / h) ** 2)


def keep_indices(history: Sequence[Decision]) -> list[int]:
    """1-based test indices of earlier keeps."""
    return [i + 1 for i, d in enumerate(history) if d.verdict == Verdict.KEEP]


def lord_level(history: Sequence[Decision], alpha: float, w0: float | None = None,
               horizon: int | None = 100) -> float:
    """The level at which the next test (index len(history)+1) must be run under LORD++.

    Every earlier decision counts as one test, whatever its verdict; keeps are discoveries.
    `w0` defaults to alpha/2.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"fdr alpha must be in (0, 1), got {alpha}")
    w0 = alpha / 2 if w0 is None else w0
    if not 0 <= w0 <= alpha:
        raise ValueError(f"LORD++ initial wealth w0 must be in [0, alpha], got {w0}")
    t = len(history) + 1
    taus = keep_indices(history)
    level = gamma(t, horizon) * w0
    for j, tau in enumerate(taus):
        level += (alpha - w0 if j == 0 else alpha) * gamma(t - tau, horizon)
    return min(level, alpha)
