"""The decision interface: given the measurements so far, run more seeds or decide.

A rule is a pure function of the evidence, so the loop can be killed between any two runs
and resume by asking the rule again with what the ledger holds.

Conventions:
- seeds are integers; the candidate and the incumbent are compared on the same seeds
  (paired) whenever the rule asks for reference runs on those seeds;
- `effect` is the improvement in the program's direction: incumbent − candidate for a
  minimised metric, candidate − incumbent for a maximised one. Positive is better.
- the incumbent's `reference` values come only from runs that were *not* used to select
  it (no winner's curse): the loop never puts a commit's candidate runs there.
"""
from __future__ import annotations

import math
import statistics
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Hashable, Mapping

from agent.record.events import Decision, Verdict
from agent.record.records import Direction


@dataclass(frozen=True)
class Evidence:
    direction: Direction                  # a str is taken too, and made a Direction
    candidate: dict[int, float]           # seed -> metric of the candidate
    reference: dict[int, float]           # seed -> metric of the incumbent, fresh runs only
    noise_sd: float | None = None         # pooled seed-to-seed sd from earlier commits
    noise_dof: int = 0                    # degrees of freedom behind noise_sd
    history: tuple[Decision, ...] = ()    # the night's earlier tests, oldest first
    looks: tuple[int, ...] | None = None  # seed counts of this candidate's earlier looks
                                          # (None: not recorded, a serial night looked at each)
    batch: int = 1                        # how many seeds the next look may add (free workers)
    runs: Mapping[Hashable, Mapping[int, float]] = field(default_factory=dict)
                                          # every commit's OK runs of the night, seed -> metric
                                          # (the first per seed): the pooled same-seed spread
    repeats: tuple[tuple[float, float], ...] = ()   # a (commit, seed) run twice: both values
    reference_order: Mapping[int, int] = field(default_factory=dict)
                                          # seed -> when the incumbent's run on it landed (its
                                          # place in the night's runs, from the ledger; empty:
                                          # not known, every reference run counts alike)
    incumbent_runs: Mapping[int, tuple[tuple[int, float], ...]] = field(default_factory=dict)
                                          # seed -> every OK run of the incumbent on it, any
                                          # role, as (place, metric) in landing order
    candidate_order: Mapping[int, int] = field(default_factory=dict)
                                          # seed -> the place of the candidate's run on it
                                          # (with incumbent_runs: which incumbent runs came
                                          # before and after it; empty: not known)

    def __post_init__(self) -> None:
        object.__setattr__(self, "direction", Direction(self.direction))

    def improvement(self, candidate_value: float, reference_value: float) -> float:
        """Signed improvement, positive = better, in metric units."""
        return self.direction.improvement(candidate_value, reference_value)


@dataclass(frozen=True)
class RunMore:
    """Ask the loop for more measurements before deciding."""

    candidate_seeds: tuple[int, ...] = ()
    reference_seeds: tuple[int, ...] = ()
    reason: str = ""
    look: int | None = None       # the candidate seed count the rule looked at, if it looked
    again_seeds: tuple[int, ...] = ()   # seeds the incumbent already ran, to run again now, after
                                        # the candidate's run on them (a bracket: drift cancels)


@dataclass(frozen=True)
class SeedPlan:
    """How many seeds a candidate and an incumbent get (program.md `seeds:`)."""

    baseline: int = 2   # fresh seeds each new incumbent is measured on (its reference); the
                        # rule pairs more as the night's regime asks (docs/decisions.md)
    screen: int = 1     # seeds a candidate runs before the rule first looks
    max: int = 8        # most seeds a candidate may get before the rule must decide
    repeat: int = 1     # baseline seeds run a second time, once a night (same-seed repeatability)


@dataclass(frozen=True)
class RuleSettings:
    """What program.md says about the keep rule. These defaults are program.md's defaults,
    written once, here, beside the rules that use them."""

    alpha: float = 0.04
    min_effect: float = 0.0   # smallest improvement worth keeping, metric units
    fdr: str = "none"         # "none" | "lord" (see agent/decide/fdr.py)
    seeds: SeedPlan = field(default_factory=SeedPlan)


class DecisionRule(ABC):
    """Decides keep / discard / inconclusive for one candidate against the incumbent.

    Contract: `next(evidence)` returns either `RunMore` naming seeds still to run (never
    seeds already present in the evidence) or a final `Decision`. It must terminate: after
    finitely many RunMore answers it decides. `baseline_seeds()` are the seeds the loop
    measures each new incumbent on (its fresh reference).

    With several workers the loop runs all the seeds of one RunMore before asking again (a
    batch; `evidence.batch` says how many the rule may ask for at once), and records every
    look the rule took (`RunMore.look`), which comes back as `evidence.looks`: a rule that
    spends error over looks must compute its boundaries for the looks actually taken.
    """

    name: str = "abstract"

    @abstractmethod
    def next(self, evidence: Evidence) -> RunMore | Decision:
        ...

    @abstractmethod
    def baseline_seeds(self) -> tuple[int, ...]:
        ...

    def incumbent_seeds(self, history: tuple[Decision, ...]) -> tuple[int, ...]:
        """The seeds a new incumbent must run on before anything is judged against it, given
        the night's decisions so far (a pure function of them, so a resumed night asks for
        the same). By default every baseline seed; a rule may ask for fewer where its
        candidates' pairs give it references anyway. The loop still runs every baseline
        seed of the night's last incumbent when the night ends (its record's fresh value)."""
        return self.baseline_seeds()

    def repeat_seeds(self) -> tuple[int, ...]:
        """Baseline seeds the loop runs a second time, once a night, on the incumbent of the
        moment: the run-to-run jitter of one (commit, seed), as reference-role runs (the
        ledger keeps the first value of a seed as the reference, the second as a repeat).
        None by default."""
        return ()


def pooled_sd(groups: list[list[float]]) -> tuple[float | None, int]:
    """Pooled within-group standard deviation and its degrees of freedom."""
    sum_sq, dof = 0.0, 0
    for values in groups:
        if len(values) < 2:
            continue
        mean = statistics.fmean(values)
        sum_sq += sum((v - mean) ** 2 for v in values)
        dof += len(values) - 1
    if dof == 0:
        return None, 0
    return math.sqrt(sum_sq / dof), dof


@dataclass(frozen=True)
class Difference:
    """mean(a) − mean(b) with its two-sided t interval at `level`."""

    estimate: float
    interval: tuple[float, float] | None   # None with fewer than two runs on a side
    level: float
    paired: int                            # seeds both share (0: Welch's unpaired interval)
    n_a: int
    n_b: int


def mean_difference(a: dict[int, float], b: dict[int, float], level: float = 0.95) -> Difference:
    """How far mean(a) is from mean(b), seed -> value each. Paired over the seeds both
    share when at least two do (a seed's share of the noise cancels; the baseline's two
    calibration seeds are what a new incumbent shares with it by default), else Welch's
    interval over all the runs. For the morning's headline: the incumbent's fresh seeds
    against the baseline's, both measured after the fact, neither the runs that selected."""
    from scipy import stats

    estimate = statistics.fmean(a.values()) - statistics.fmean(b.values())
    common = sorted(set(a) & set(b))
    if len(common) >= 2:
        diffs = [a[s] - b[s] for s in common]
        centre, se, dof = statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs)), len(diffs) - 1
        estimate = centre
    elif len(a) >= 2 and len(b) >= 2:
        va, vb = statistics.variance(a.values()) / len(a), statistics.variance(b.values()) / len(b)
        se = math.sqrt(va + vb)
        dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if va + vb > 0 else 1
        common = []
    else:
        return Difference(estimate, None, level, 0, len(a), len(b))
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    return Difference(estimate, (estimate - half, estimate + half), level, len(common), len(a), len(b))


class NoiseBandRule(DecisionRule):
    """The simple rule of the first loop: keep when the candidate's mean beats the
    incumbent's fresh reference mean by more than `k` standard errors of the difference.

    Runs the candidate on `seeds` seeds, paired with the reference seeds. No sequential
    looks, no p-value control: `agent.decide.sequential` holds the statistical rule.
    """

    name = "noise_band"

    def __init__(self, seeds: int = 2, baseline: int = 3, k: float = 2.0) -> None:
        self.seeds, self.baseline, self.k = seeds, baseline, k

    def baseline_seeds(self) -> tuple[int, ...]:
        return tuple(range(self.baseline))

    def next(self, evidence: Evidence) -> RunMore | Decision:
        wanted = tuple(range(self.seeds))
        missing = tuple(s for s in wanted if s not in evidence.candidate)
        if missing:
            return RunMore(candidate_seeds=missing, reason="screen")
        cand = [evidence.candidate[s] for s in wanted]
        ref = list(evidence.reference.values())
        sd = evidence.noise_sd or (statistics.stdev(ref) if len(ref) > 1 else None)
        effect = evidence.improvement(statistics.fmean(cand), statistics.fmean(ref))
        if sd is None or sd == 0:
            se = 0.0
        else:
            se = sd * math.sqrt(1 / len(cand) + 1 / len(ref))
        keep = effect > self.k * se
        return Decision(
            verdict=Verdict.KEEP if keep else Verdict.DISCARD,
            effect=effect,
            interval=(effect - 2 * se, effect + 2 * se),
            p_value=None,
            seeds=wanted,
            candidate_values=dict(evidence.candidate),
            reference_values=dict(evidence.reference),
            rule=self.name,
            reason=f"effect {effect:+.4f} vs band {self.k:g}·se = {self.k * se:.4f}",
        )
