"""The night's noise regime: how much of a run its seed fixes, as the night's same-seed evidence
measures it (issue 29; docs/decisions.md "The night's regime"). The keep rule spends its runs by
it (agent/decide/sequential.py) and every decision records the one it measured, so that the
next candidate follows the regime its history names.
"""
from __future__ import annotations

import enum

from agent.decide import noise as noise_module

PAIRED_SHARE = 0.5     # a seed fixes at least half of a run (80% lower bound): "paired"
UNPAIRED_SHARE = 0.1   # at most a tenth: "unpaired" (pairs do not pay for their runs)


class Regime(str, enum.Enum):
    """A night's regime; recorded in a decision's details by its value."""

    UNKNOWN = "unknown"     # too few pairs to tell (the start of every night)
    UNPAIRED = "unpaired"   # seeds share nothing worth a run (a wall-clock budget)
    MIXED = "mixed"         # pairs are credited, but less than half a run
    PAIRED = "paired"       # a seed fixes most of a run (a deterministic GPU script)

    def __str__(self) -> str:   # the value in reasons and f-strings, on every Python
        return self.value

    @classmethod
    def recorded(cls, value: object) -> "Regime | None":
        """The regime a decision's details name, or None (an older ledger, another rule)."""
        try:
            return cls(value)
        except ValueError:   # not one of the values (Enum's lookup raises it for any other object)
            return None


def measure(estimate: noise_module.NoiseEstimate, share: float) -> Regime:
    """The night's regime from its same-seed evidence (`share`: the credited seed share).

    - paired: the credited share, an 80% lower bound on at least MIN_PAIR_DOF degrees of
      freedom (a 99% one on two or three: the first win's pairs), is >= PAIRED_SHARE;
    - unpaired: a re-run of one seed already differs like two seeds (share_cap <= 0.1), or
      twice MIN_PAIR_DOF degrees of freedom of pairs credit at most UNPAIRED_SHARE;
    - mixed: pairs are credited, but less than half a run;
    - unknown: too few pairs to tell.
    """
    if estimate.share_cap <= UNPAIRED_SHARE:
        return Regime.UNPAIRED
    if estimate.pair_dof >= noise_module.FEW_PAIR_DOF and share >= PAIRED_SHARE:
        return Regime.PAIRED
    if estimate.pair_dof < noise_module.MIN_PAIR_DOF:
        return Regime.UNKNOWN
    if share > UNPAIRED_SHARE:
        return Regime.MIXED
    if estimate.pair_dof >= 2 * noise_module.MIN_PAIR_DOF:
        return Regime.UNPAIRED
    return Regime.UNKNOWN
