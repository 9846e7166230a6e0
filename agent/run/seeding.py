"""Whether a commit's metric changes with the seed, from its successful runs: recorded with
every run, and the first of the checks a night and `nightshift check` make (a script that
seeds itself makes every candidate a seed change, the trap the keep rule exists to avoid)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class SeedingObservation:
    kind: str                  # "varies" | "identical" | "unobserved"
    note: str


def observe_seeding(values: Mapping[int, float], metric: str) -> SeedingObservation:
    """Whether a commit's metric changed with the seed, from its successful runs."""
    if len(values) < 2:
        return SeedingObservation("unobserved", "not yet observed: fewer than two seeds of this "
                                                "commit have succeeded")
    seeds = ", ".join(str(s) for s in sorted(values))
    if len(set(values.values())) == 1:
        value = next(iter(values.values()))
        return SeedingObservation("identical", (
            f"observed identical: {metric} {value:.6g} on every seed ({seeds}); the script "
            f"ignores the seed"))
    return SeedingObservation("varies", f"observed to vary: {metric} differs across seeds {seeds}")


# ---- verdicts ------------------------------------------------------------------------------
