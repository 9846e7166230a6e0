"""Pairing from the first look: the night's same-seed evidence pooled over every run, the
baseline's same-seed repeat, and what a decision says it was measured against.

The nights here pass the rule what the loop passes it (agent/night/loop.py `_evidence`):
every commit's runs by seed (`runs`) and the re-run of a baseline seed (`repeats`), with
metrics from `metric = level + seed effect (ρ) + commit × seed effect + jitter (τ)`.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from agent.decide.decision import Evidence, RunMore, pooled_sd
from agent.decide.noise import NoiseEstimate, estimate
from agent.decide.sequential import SequentialRule
from agent.record.records import Comparison, Decision, Direction, Verdict


class Night:
    """Candidates against one incumbent (σ = 1), the way the loop runs them."""

    def __init__(self, rule: SequentialRule, rng: np.random.Generator, rho: float, tau: float) -> None:
        self.rule, self.rng, self.rho, self.tau = rule, rng, rho, tau
        self.seed_effect: dict[int, float] = {}
        self.cell: dict[tuple[int, int], float] = {}
        self.table: dict[int, dict[int, float]] = {}
        self.history: list[Decision] = []
        self.commit = 0
        self.reference = {s: self.run(0, 0.0, s) for s in rule.baseline_seeds()}
        self.repeats = tuple((self.reference[s], self.run(0, 0.0, s, again=True))
                             for s in rule.repeat_seeds())

    def run(self, commit: int, level: float, seed: int, again: bool = False) -> float:
        if seed not in self.seed_effect:
            self.seed_effect[seed] = self.rng.normal(0, math.sqrt(self.rho))
        if (commit, seed) not in self.cell:
            self.cell[commit, seed] = self.rng.normal(0, math.sqrt(1 - self.rho - self.tau))
        value = self.seed_effect[seed] + self.cell[commit, seed] + level + \
            self.rng.normal(0, math.sqrt(self.tau))
        if not again:
            self.table.setdefault(commit, {})[seed] = value
        return value

    def evidence(self, candidate: dict[int, float]) -> Evidence:
        sd, dof = pooled_sd([list(v.values()) for v in self.table.values()])
        return Evidence(Direction.MINIMIZE, dict(candidate), dict(self.reference), sd, dof,
                        tuple(self.history), runs=self.table, repeats=self.repeats)

    def candidate(self, effect: float) -> Decision:
        """One candidate of true improvement `effect`, never kept into the night (the
        incumbent stays: every candidate is judged against the same one)."""
        self.commit += 1
        candidate: dict[int, float] = {}
        while True:
            step = self.rule.next(self.evidence(candidate))
            if isinstance(step, Decision):
                self.history.append(as_if_not_kept(step))
                return step
            for s in step.candidate_seeds:
                candidate[s] = self.run(self.commit, -effect, s)
            for s in step.reference_seeds:
                self.reference.setdefault(s, self.run(0, 0.0, s))


def as_if_not_kept(decision: Decision) -> Decision:
    """History as if nothing was kept: the incumbent, its seeds and reign stay the same."""
    if decision.verdict is Verdict.KEEP:
        return dataclasses.replace(decision, verdict=Verdict.DISCARD)
    return decision


@pytest.mark.parametrize("rho, tau", [(0.9, 0.0), (0.0, 0.05)])
def test_null_candidates_are_kept_at_most_alpha_whatever_seeds_share(rho, tau):
    # (0.9, 0): a deterministic machine whose seeds fix most of a run, pairing credited;
    # (0, 0.05): a re-run of one (commit, seed) repeats it almost exactly, yet two commits
    # share nothing. A rule that read the repeat as pairing would credit it and keep nulls.
    rule, keeps, n = SequentialRule(), 0, 0
    for night in range(6):
        sim = Night(rule, np.random.default_rng([night, int(rho * 10)]), rho, tau)
        for _ in range(100):
            keeps += sim.candidate(0.0).verdict is Verdict.KEEP
            n += 1
    assert keeps / n <= rule.alpha, f"{keeps} of {n} null candidates kept"


def test_a_re_run_that_reproduces_its_seed_never_credits_pairing_by_itself():
    rule = SequentialRule()
    sim = Night(rule, np.random.default_rng(3), rho=0.0, tau=0.02)
    shares = [sim.candidate(0.0).details["seed_share"] for _ in range(120)]
    assert abs(sim.repeats[0][0] - sim.repeats[0][1]) < 0.5         # the repeat agrees...
    assert np.mean(shares[-40:]) < 0.05                            # ...pairing is not credited
    noise = estimate(sim.evidence({}))
    assert noise.share_cap > 0.5                                   # it could not rule it out


def test_a_re_run_that_differs_like_two_seeds_stops_pairing_early():
    rule = SequentialRule()
    sim = Night(rule, np.random.default_rng(4), rho=0.0, tau=0.98)
    sim.repeats = ((0.0, 3.0),)                  # the seed reproduced nothing of the run
    for _ in range(12):
        sim.candidate(0.0)
    noise = estimate(sim.evidence({}))
    assert noise.share_cap <= 0.1 and noise.seed_share <= noise.share_cap
    # Enough incumbent runs, not a refresh candidate: no incumbent run is added beside it.
    first = rule.next(sim.evidence({}))
    assert isinstance(first, RunMore) and first.candidate_seeds and not first.reference_seeds


def test_the_share_is_known_from_the_first_candidate_of_a_later_reign():
    # Pooled over the whole night: the pairs of earlier candidates and the incumbents'
    # calibration seeds count, so the first look of a candidate already leans on its pair.
    rule = SequentialRule()
    sim = Night(rule, np.random.default_rng(5), rho=0.9, tau=0.0)
    for _ in range(40):
        sim.candidate(0.0)
    decision = sim.candidate(-2.0)                     # clearly worse: stops at the screen
    assert decision.details["look"] == 1 and decision.details["seed_share"] > 0.5
    assert decision.comparison.paired and decision.comparison.paired_seeds == 1
    assert (decision.effect > 0) == (decision.comparison.paired_effect > 0)


def test_an_unpaired_first_look_says_so_and_shows_its_pair():
    # e0001 of a real night: better than the mean of the incumbent's runs, worse than the
    # incumbent on its own seed, and nothing yet shows that seeds share noise. (A screen that
    # stops below z 0.75, so that this look decides: the words, not the screen, are tested.)
    reference = {0: 2.30, 1: 2.36, 2: 2.33, 3: 2.40, 4: 2.31, 5: 2.35, 1000: 2.300}
    decision = SequentialRule(futility=(0.75, 1.0)).next(Evidence(Direction.MINIMIZE, {1000: 2.325}, reference, 0.03, 5))
    assert isinstance(decision, Decision) and decision.verdict is Verdict.DISCARD
    comparison = decision.comparison
    assert comparison.seed_share == 0 and not comparison.paired
    assert decision.effect > 0 > comparison.paired_effect
    text = comparison.describe(decision.effect)
    assert "not paired" in text and f"{comparison.paired_effect:+.4f}" in text


def test_comparison_words_never_contradict_the_pairs():
    paired = Comparison(paired_seeds=3, paired_effect=-0.01, incumbent_runs=9, seed_share=0.4)
    assert "paired on 3 seeds" in paired.describe(0.02)
    assert "the 3 same-seed pairs alone -0.0100" in paired.describe(0.02)    # signs differ
    assert "alone" not in paired.describe(-0.005)                            # they agree
    alone = Comparison(paired_seeds=0, paired_effect=None, incumbent_runs=7, seed_share=0.0)
    assert alone.describe(0.01) == "vs the mean of 7 incumbent runs, none on its seeds"


def test_noise_estimate_caps_the_share_by_the_repeat():
    free = NoiseEstimate(sd=1.0, dof=30, pair_sd=0.3, pair_dof=40)
    assert free.share_cap == 1.0 and free.seed_share > 0.9
    capped = NoiseEstimate(sd=1.0, dof=30, pair_sd=0.3, pair_dof=40, repeat_sd=0.9, repeat_dof=3)
    assert capped.share_cap < 0.6 and capped.seed_share == capped.share_cap


def test_repeat_seeds_follow_seeds_repeat():
    assert SequentialRule().repeat_seeds() == (0,)
    assert SequentialRule(repeat=0).repeat_seeds() == ()
    with pytest.raises(ValueError, match="seeds.repeat"):
        SequentialRule(repeat=7)


def test_successive_incumbents_on_the_calibration_seeds_are_pairs_too():
    # No candidate has reached a second seed yet, so no decision holds a pair; the night's
    # two incumbents ran on the same six calibration seeds, which do.
    rng = np.random.default_rng(6)
    seed_effect = rng.normal(0, 0.3, 6)
    old = {s: 2.0 + seed_effect[s] + rng.normal(0, 0.01) for s in range(6)}
    new = {s: 1.9 + seed_effect[s] + rng.normal(0, 0.01) for s in range(6)}
    evidence = Evidence(Direction.MINIMIZE, {2000: 1.95}, {**new, 2000: 1.9 + rng.normal(0, 0.3)},
                        0.3, 10, runs={"old": old, "new": new})
    noise = estimate(evidence)
    assert noise.pair_dof == 5 and noise.seed_share > 0.9
    assert estimate(Evidence(Direction.MINIMIZE, {2000: 1.95}, new, 0.3, 10)).pair_dof == 0
