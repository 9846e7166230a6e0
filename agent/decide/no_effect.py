"""A candidate whose runs equal the incumbent's on the same seeds: the change did nothing.

A script that is deterministic given its seed gives the incumbent's exact value again when an
edit never reaches what it computes (a setting the script overwrites, a constant it never
reads, a comment). Such a candidate is neither a loss nor a win, and its difference from the
mean of the incumbent's other seeds is no effect at all: it is recorded as `no_effect`, and
the researcher is told the change did not act.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

# A value printed with fewer significant digits than this can match by chance on one seed:
# such a metric needs two seeds that match before the change is called inert.
SURE_DIGITS = 5


def no_effect(candidate: Mapping[int, float], incumbent: Mapping[int, Sequence[float]]) -> str | None:
    """The reason, when the candidate's value on every seed it shares with the incumbent is
    one of the incumbent's values on that seed (and enough seeds are shared), else None.
    `incumbent`: seed -> every value the incumbent got on it."""
    shared = sorted(seed for seed in candidate if incumbent.get(seed))
    if not shared:
        return None
    for seed in shared:
        if not any(_same(candidate[seed], value) for value in incumbent[seed]):
            return None
    needed = 1 if all(_digits(candidate[seed]) >= SURE_DIGITS for seed in shared) else 2
    if len(shared) < needed:
        return None
    pairs = ", ".join(f"seed {seed}: {candidate[seed]:.6g}" for seed in shared[:3])
    return (f"no effect: its runs equal the incumbent's on the same seed{'s' if len(shared) > 1 else ''} "
            f"({pairs}), so the change did not reach what the script computes (a setting the "
            f"script overwrites, or a value it never reads)")


def _same(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def _digits(value: float) -> int:
    """Significant digits in the shortest repr of `value` (2.2425 -> 5, 2.25 -> 3)."""
    if not math.isfinite(value) or value == 0:
        return 0
    mantissa = repr(abs(value)).lower().split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) or 1
