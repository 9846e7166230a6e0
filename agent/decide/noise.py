"""Noise calibration: how much one run's metric moves with the seed, pooled over a night.

Two numbers drive every keep decision:

- `sd`: the seed-to-seed standard deviation of one run of one commit (within-commit spread),
  pooled over every commit measured on two or more seeds;
- `pair_sd`: the standard deviation of the *difference* between two commits run on the same
  seed, one run each. Seeds fix the initialisation and the data order, so two commits on the
  same seed share part of their luck; `pair_sd² = 2·sd²·(1 − seed_share)`.

Both are pure functions of the measurements (no state), so the loop can recompute them at
any point of a night, and they sharpen as the night goes on: every reference run of an
incumbent and every candidate confirmed on a second seed adds degrees of freedom.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from scipy import special, stats

from agent.decide import pairing
from agent.decide.decision import Evidence, pooled_sd
from agent.record.events import Decision

Values = Mapping[int, float] | Sequence[float]


@dataclass(frozen=True)
class NoiseEstimate:
    sd: float | None          # seed-to-seed sd of one run, within a commit
    dof: int
    pair_sd: float | None     # sd of (commit A − commit B) on the same seed, one run each
    pair_dof: int
    repeat_sd: float | None = None   # sd of one (commit, seed) run again: the jitter alone
    repeat_dof: int = 0

    @property
    def seed_share(self) -> float:
        """Fraction of the run-to-run variance that two commits share on the same seed.

        A conservative (80% lower-bound) estimate; 0 when unknown (no credit for pairing is the conservative choice), clipped to
        [0, 0.95] so that a lucky small estimate of `pair_sd` cannot claim near-perfect
        pairing, and never above `share_cap` (what a re-run of one seed allows).
        """
        if not self.sd or self.pair_sd is None or self.pair_dof < FEW_PAIR_DOF:
            return 0.0
        # An 80% upper bound on the paired spread, so that sampling luck in a few pairs
        # does not buy the candidate a tighter interval than the data support; a 99% one
        # on fewer than MIN_PAIR_DOF degrees of freedom, where only a seed that fixes the
        # run (a spread a hundred times under the seed's) earns credit.
        level = 0.8 if self.pair_dof >= MIN_PAIR_DOF else 0.99
        upper = self.pair_sd ** 2 * self.pair_dof / special.chdtri(self.pair_dof, level)
        share = 1.0 - upper / (2.0 * self.sd ** 2)
        return min(max(share, 0.0), 0.95, self.share_cap)

    @property
    def point_share(self) -> float:
        """The seed share at the paired spread's point estimate (clipped to [0, 0.999] and
        the re-run cap's point value): for a test whose t statistic already has the paired
        spread's degrees of freedom, which then pays for its uncertainty once, not twice
        (the paired regime of agent/decide/sequential.py, which a 99% bound admits on two or
        three degrees of freedom). 0 when unknown."""
        if not self.sd or self.pair_sd is None or self.pair_dof < FEW_PAIR_DOF:
            return 0.0
        share = 1.0 - self.pair_sd ** 2 / (2.0 * self.sd ** 2)
        cap = 1.0 if self.repeat_sd is None or self.repeat_dof < 1 else \
            1.0 - self.repeat_sd ** 2 / self.sd ** 2
        return min(max(share, 0.0), 0.999, max(cap, 0.0))

    @property
    def share_cap(self) -> float:
        """The most two commits can share on a seed, by the re-runs of one (commit, seed): no
        more than a commit shares with itself. 1 without a re-run. Taken at an 80% lower bound
        on the jitter, so a re-run that happened to agree closely does not cap it too low.
        An upper bound only: agent/decide/pairing.py says why it never credits pairing."""
        if not self.sd or self.repeat_sd is None or self.repeat_dof < 1:
            return 1.0
        jitter = self.repeat_sd ** 2 * self.repeat_dof / special.chdtri(self.repeat_dof, 0.2)
        return min(max(1.0 - jitter / self.sd ** 2, 0.0), 1.0)


# From this many degrees of freedom the paired spread is credited at an 80% bound; from
# FEW_PAIR_DOF at a 99% bound (the first candidate's pairs, where a seed fixes the run:
# issue 29). On two degrees of freedom a night whose seeds share nothing passes for one
# that pairs with probability 0.005 (a spread under a tenth of its true value), against
# about 0.06 on four at the 80% bound.
MIN_PAIR_DOF = 4
FEW_PAIR_DOF = 2


def _as_list(values: Values) -> list[float]:
    return list(values.values()) if isinstance(values, Mapping) else list(values)


def pooled_noise(values_per_commit: Mapping[Any, Values]) -> tuple[float | None, int]:
    """Pooled within-commit sd (and dof) over commits measured on ≥2 seeds."""
    return pooled_sd([_as_list(v) for v in values_per_commit.values()])


def paired_noise(pairs: Iterable[tuple[Mapping[int, float], Mapping[int, float]]]
                 ) -> tuple[float | None, int]:
    """Pooled sd of same-seed differences `a[s] − b[s]`, over pairs sharing ≥2 seeds.

    Each pair contributes the spread of its differences around their own mean, so a real
    difference between the two commits does not count as noise.
    """
    groups = []
    for a, b in pairs:
        shared = sorted(set(a) & set(b))
        if len(shared) >= 2:
            groups.append([a[s] - b[s] for s in shared])
    return pooled_sd(groups)


def _int_keys(values: Mapping[Any, float]) -> dict[int, float]:
    return {int(k): float(v) for k, v in values.items()}


def history_differences(history: Iterable[Decision]) -> list[list[float]]:
    """Same-seed differences (reference − candidate) of earlier decisions with ≥2 shared seeds."""
    groups = []
    for decision in history:
        cand = decision.candidate_values
        if len(cand) >= 2:
            ref = decision.reference_values
            diffs = [ref[s] - v for s, v in cand.items() if s in ref]
            if len(diffs) >= 2:
                groups.append(diffs)
    return groups


def estimate(evidence: Evidence) -> NoiseEstimate:
    """Noise estimate for one decision, from the loop's pooled sd and the night's pairs.

    `sd` is the loop's pooled estimate when it has one (it sees every commit of the night);
    otherwise the current candidate's and incumbent's own spreads. `pair_sd` pools the
    same-seed differences of the whole night: every commit on every seed (`evidence.runs`,
    agent.decide.pairing) when the loop gives them, else the earlier decisions in
    `evidence.history` and the current one. `repeat_sd` is the jitter of re-run seeds.
    """
    if evidence.noise_sd is not None and evidence.noise_dof > 0:
        sd, dof = evidence.noise_sd, evidence.noise_dof
    else:
        sd, dof = pooled_noise({"candidate": evidence.candidate, "reference": evidence.reference})
    if evidence.runs:
        unshared, pair_dof = pairing.unshared_spread(evidence.runs)
        pair_sd = None if unshared is None else unshared * math.sqrt(2.0)
    else:
        groups = history_differences(evidence.history)
        current = [evidence.reference[s] - v for s, v in evidence.candidate.items()
                   if s in evidence.reference]
        pair_sd, pair_dof = pooled_sd(groups + [current])
    repeat_sd, repeat_dof = pairing.repeat_spread(evidence.repeats)
    return NoiseEstimate(sd=sd, dof=dof, pair_sd=pair_sd, pair_dof=pair_dof,
                         repeat_sd=repeat_sd, repeat_dof=repeat_dof)


def suggest_settings(values_per_commit: Mapping[Any, Values], alpha: float = 0.05,
                     power: float = 0.8, target_effect: float | None = None,
                     max_seeds_cap: int = 12) -> dict[str, Any]:
    """Suggest seeds and `min_effect` for program.md from measured runs.

    `values_per_commit` maps a commit (any label) to its runs, `{seed: metric}` (needed to
    measure pairing: the same seed numbers across commits) or a plain list. `target_effect`
    is the improvement, in metric units, the night should detect with probability `power`
    (default: one seed-to-seed sd). Returns the measured noise, the smallest effect detectable
    at each number of seeds, and suggested `seeds: {baseline, screen, max}` and `min_effect`,
    with the reason for each. Detectable effects are for a fixed-size one-sided test at
    `alpha`; the sequential rule needs ~10% more, and spends far fewer runs on most candidates.
    """
    sd, dof = pooled_noise(values_per_commit)
    if sd is None or sd == 0:
        raise ValueError("suggest_settings needs at least one commit measured on two or more "
                         "seeds with some spread; run the baseline on 4+ seeds first")
    keyed = [_int_keys(v) for v in values_per_commit.values() if isinstance(v, Mapping)]
    pairs = [(a, b) for i, a in enumerate(keyed) for b in keyed[i + 1:]]
    pair_sd, pair_dof = paired_noise(pairs)
    noise = NoiseEstimate(sd=sd, dof=dof, pair_sd=pair_sd, pair_dof=pair_dof)
    share = noise.seed_share
    baseline = 8 if dof < 8 else 6
    # Per candidate seed: the candidate's own spread, plus the incumbent's — the unshared
    # part of a paired run, or the share of a `baseline`-run mean, whichever is smaller.
    diff_sd = sd * math.sqrt(1.0 + min(1.0 - share, 1.0 / baseline))
    z = stats.norm.ppf(1 - alpha) + stats.norm.ppf(power)
    detectable = {n: float(z * diff_sd / math.sqrt(n)) for n in range(1, max_seeds_cap + 1)}
    target = sd if target_effect is None else target_effect
    max_seeds = next((n for n, d in detectable.items() if d <= target), max_seeds_cap)
    max_seeds = max(max_seeds, 3)
    return {
        "noise_sd": sd, "dof": dof,
        "pair_sd": pair_sd, "pair_dof": pair_dof, "seed_share": share,
        "detectable_effect": detectable,
        "seeds": {"baseline": baseline, "screen": 1, "max": max_seeds},
        "min_effect": diff_sd / math.sqrt(max_seeds),
        "reasons": {
            "baseline": ("8 seeds: the noise estimate has under 8 degrees of freedom"
                         if baseline == 8 else "6 seeds (the default): a reference mean of 6 "
                         "runs keeps small effects detectable; 4 cost power in "
                         "benchmarks/keep_rule/decisions.py"),
            "screen": "one run, then stop candidates that look no better (futility)",
            "max": (f"smallest n whose detectable effect at power {power:g} is ≤ "
                    f"{target:.4g} (capped at {max_seeds_cap}, at least 3)"),
            "min_effect": ("one standard error of a comparison at the maximum seeds: smaller "
                           "improvements are below what the night can resolve; raise it to "
                           "demand a practically useful gain"),
        },
    }
