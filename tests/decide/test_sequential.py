"""The sequential keep rule, on simulated data: error control, power, no winner's curse.

A small loop here drives the rule exactly as agent's loop does (fresh incumbent runs on the
baseline seeds after every keep, incumbent runs cached per seed, pooled noise from every
commit measured twice), with metrics drawn from a known noise model.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from agent.decide.decision import Decision, Evidence, RunMore, Verdict, pooled_sd
from agent.decide.sequential import SequentialRule
from agent.decide.sequential_math import efficacy_boundaries, gls_difference, own_pairs_p
from agent.record.records import Direction


class Loop:
    """A night in miniature. `effects(i)` gives candidate i's true improvement (σ = 1)."""

    def __init__(self, rule: SequentialRule, seed: int, rerun_selection: bool = False,
                 batches: tuple[int, ...] | None = None) -> None:
        """`batches`: the loop runs several workers and lets each look add a batch of seeds
        drawn from these sizes (the looks are recorded and passed back, as the real loop does);
        None: the serial loop, one seed per look and no record of looks."""
        self.rule, self.rng = rule, random.Random(seed)
        self.batches = batches
        self.level, self.commit = 0.0, 0
        self.cells: dict[tuple[int, int], float] = {}      # a (commit, seed) repeats exactly
        self.values: dict[int, list[float]] = {}
        self.history: list[Decision] = []
        self.decisions: list[Decision] = []
        self.asks: list[RunMore] = []
        self.rerun_selection = rerun_selection
        self.reference = self._baseline()

    def run(self, commit: int, level: float, seed: int) -> float:
        if (commit, seed) not in self.cells:        # deterministic CPU: same seed, same value
            self.cells[commit, seed] = level + self.rng.gauss(0, 1)
        value = self.cells[commit, seed]
        self.values.setdefault(commit, []).append(value)
        return value

    def _baseline(self, selected: dict[int, float] | None = None) -> dict[int, float]:
        ref = {s: self.run(self.commit, self.level, s) for s in self.rule.baseline_seeds()}
        if self.rerun_selection and selected:       # a careless loop: re-run selection seeds
            ref.update({s: self.run(self.commit, self.level, s) for s in selected})
        return ref

    def candidate(self, effect: float) -> Decision:
        self.commit += 1
        commit, level, cand = self.commit, self.level - effect, {}
        looks: list[int] = []
        for _ in range(50):
            sd, dof = pooled_sd(list(self.values.values()))
            batch = self.rng.choice(self.batches) if self.batches else 1
            out = self.rule.next(Evidence(Direction.MINIMIZE, dict(cand), dict(self.reference), sd, dof,
                                          tuple(self.history),
                                          looks=tuple(looks) if self.batches else None, batch=batch))
            if isinstance(out, Decision):
                break
            if out.look is not None:
                looks.append(out.look)
                assert len(out.candidate_seeds) <= batch
            self.asks.append(out)
            assert not set(out.candidate_seeds) & set(cand), "asked again for a seed it has"
            assert out.candidate_seeds or out.reference_seeds, "asked for nothing"
            for s in out.candidate_seeds:
                cand[s] = self.run(commit, level, s)
            for s in out.reference_seeds:
                self.reference.setdefault(s, self.run(self.commit_of_incumbent, self.level, s))
        else:
            raise AssertionError("the rule did not decide within 50 asks")
        self.history.append(out)
        self.decisions.append(out)
        if out.verdict is Verdict.KEEP:
            self.level = level
            self.commit_of_incumbent = commit
            self.reference = self._baseline(out.candidate_values)
        return out

    commit_of_incumbent = 0


def test_no_effect_keep_rate_stays_within_alpha():
    # 4 nights of 150 no-effect candidates: a rule that tested each look at the nominal 5%,
    # or kept whatever beat the reference once, would keep 10-50% of them.
    rule = SequentialRule(alpha=0.05)
    keeps = total = 0
    for night in range(4):
        loop = Loop(rule, seed=night)
        for _ in range(150):
            keeps += loop.candidate(0.0).verdict is Verdict.KEEP
            total += 1
    rate = keeps / total
    assert rate <= 0.05 + 3 * (0.05 * 0.95 / total) ** 0.5, f"kept {keeps} of {total}"


def test_batched_looks_keep_the_no_effect_rate_within_alpha():
    # Several workers: a look adds 1 to 4 seeds at once (the sizes vary with the workers free),
    # so looks land at arbitrary counts; the boundaries follow the looks actually taken.
    rule = SequentialRule(alpha=0.05)
    keeps = total = 0
    uneven = False
    for night in range(4):
        loop = Loop(rule, seed=100 + night, batches=(1, 2, 3, 4))
        for _ in range(150):
            decision = loop.candidate(0.0)
            keeps += decision.verdict is Verdict.KEEP
            total += 1
            at = decision.details.get("looks_at", [])
            uneven |= any(b - a > 1 for a, b in zip(at, at[1:]))
    assert uneven, "no look ever skipped a seed count: the batches were not exercised"
    rate = keeps / total
    assert rate <= 0.05 + 3 * (0.05 * 0.95 / total) ** 0.5, f"kept {keeps} of {total}"


def test_boundaries_for_any_looks_taken_spend_at_most_alpha():
    # The z-statistic of a candidate with no effect, observed at the looks actually taken (a
    # Brownian motion in information time), crosses the computed boundaries at most alpha of
    # the time, for look schedules a serial or a batched night may produce.
    rng = np.random.default_rng(7)
    rule = SequentialRule(alpha=0.05)
    for looks in [(1, 2, 3, 4, 5, 6, 7, 8), (1, 5, 8), (1, 3, 4, 8), (1, 8), (1, 2, 6)]:
        bounds = rule.boundaries(0.05, looks)
        futility = [rule.futility[0]] + [rule.futility[1]] * (len(looks) - 1)
        steps = np.diff((0,) + looks)
        paths = np.cumsum(rng.normal(size=(200_000, len(looks))) * np.sqrt(steps), axis=1)
        z = paths / np.sqrt(looks)
        alive = np.ones(len(z), dtype=bool)
        crossed = np.zeros(len(z), dtype=bool)
        for k in range(len(looks)):
            crossed |= alive & (z[:, k] >= bounds[k])
            alive &= (z[:, k] < bounds[k]) & (z[:, k] > futility[k])
        assert crossed.mean() <= 0.05 + 3 * (0.05 * 0.95 / len(z)) ** 0.5, (looks, crossed.mean())
    # a prefix of the looks gets the same boundaries as the whole schedule (Lan-DeMets)
    assert rule.boundaries(0.05, (1, 3)) == rule.boundaries(0.05, (1, 3, 8))[:2]


def test_a_large_true_effect_is_kept():
    rule = SequentialRule(alpha=0.05)
    loop = Loop(rule, seed=1)
    for _ in range(20):                     # warm up the noise estimate on no-effect changes
        loop.candidate(0.0)
    kept = sum(loop.candidate(3.0).verdict is Verdict.KEEP for _ in range(10))
    assert kept >= 9


def test_clearly_worse_candidates_stop_after_one_run():
    rule = SequentialRule(alpha=0.05)
    loop = Loop(rule, seed=2)
    for _ in range(10):
        loop.candidate(0.0)
    for _ in range(10):
        decision = loop.candidate(-4.0)
        assert decision.verdict is Verdict.DISCARD
        assert len(decision.candidate_values) == 1 and decision.details["look"] == 1


def test_incumbent_reference_never_holds_a_value_that_selected_it():
    rule = SequentialRule(alpha=0.05)
    for rerun in (False, True):             # True: the loop wrongly re-runs selection seeds
        loop = Loop(rule, seed=3, rerun_selection=rerun)
        for i in range(300):
            loop.candidate(2.0 if i % 10 == 0 else 0.0)
        keeps = [i for i, d in enumerate(loop.decisions) if d.verdict is Verdict.KEEP]
        assert len(keeps) >= 3
        for a, b in zip(keeps, keeps[1:] + [len(loop.decisions)]):
            selecting = loop.decisions[a].candidate_values
            for later in loop.decisions[a + 1:b]:
                assert not set(later.reference_values) & set(selecting)
                assert not set(later.reference_values.values()) & set(selecting.values())


def test_seed_plans_keep_calibration_and_selection_seeds_apart():
    rule = SequentialRule(baseline=4, max_seeds=6)
    loop = Loop(rule, seed=4)
    for i in range(200):
        loop.candidate(2.0 if i % 7 == 0 else 0.0)
    reigns: dict[int, set[int]] = {}
    for d in loop.decisions:
        assert not set(d.candidate_values) & set(rule.baseline_seeds())
        reigns.setdefault(d.details["reign"], set()).update(d.candidate_values)
    assert len(reigns) >= 3
    for e in reigns:
        assert not reigns[e] & reigns.get(e + 1, set())


def test_the_rule_is_a_pure_function_of_the_evidence():
    rule = SequentialRule()
    ev = Evidence(Direction.MINIMIZE, {1000: 0.9, 1001: 0.8}, {0: 1.0, 1: 1.2, 2: 1.1, 3: 0.9,
                                                      1000: 1.05, 1001: 1.1}, 0.1, 20)
    first, again = rule.next(ev), SequentialRule().next(ev)
    assert first == again


def test_decision_records_effect_interval_p_value_and_seeds():
    loop = Loop(SequentialRule(), seed=5)
    for _ in range(30):
        d = loop.candidate(1.0)
        lo, hi = d.interval
        assert lo <= d.effect <= hi and 0 <= d.p_value <= 1
        assert tuple(d.candidate_values) == d.seeds
        assert d.details["nominal_keep_p"] <= 0.05


def test_maximized_metrics_flip_the_sign_of_the_effect():
    ev_min = Evidence(Direction.MINIMIZE, {1000: 0.5}, {0: 1.0, 1: 1.1, 2: 0.9, 3: 1.0, 1000: 1.0}, 0.1, 50)
    ev_max = Evidence(Direction.MAXIMIZE, {1000: 0.5}, {0: 1.0, 1: 1.1, 2: 0.9, 3: 1.0, 1000: 1.0}, 0.1, 50)
    assert SequentialRule().next(ev_max).verdict is Verdict.DISCARD
    assert not isinstance(SequentialRule().next(ev_min), Decision) or \
        SequentialRule().next(ev_min).verdict is not Verdict.DISCARD


def null_keep_rate(bounds, futility, looks, paths=200_000):
    """Monte Carlo keep rate of a design under no effect: look k sees the z statistic of the
    first looks[k] seeds (canonical joint law), keeps at bounds[k], stops at futility[k]."""
    z = np.cumsum(np.random.default_rng(0).standard_normal((paths, looks[-1])), axis=1)
    z = z / np.sqrt(np.arange(1, looks[-1] + 1))
    alive, kept = np.ones(paths, bool), np.zeros(paths, bool)
    for k, n in enumerate(looks):
        hit = alive & (z[:, n - 1] >= bounds[k])
        kept |= hit
        alive &= ~hit & (z[:, n - 1] > futility[k])
    return kept.mean()


@pytest.mark.parametrize("futility,power,spent", [((-8.0,) * 6, 1.0, 0.05),
                                                  ((0.0,) * 6, 2.0, 0.05),
                                                  ((1.0,) * 6, 1.0, 0.036)])
def test_boundaries_spend_at_most_alpha(futility, power, spent):
    # With strong binding futility the fixed-sample floor z_0.95 binds at late looks and
    # part of alpha stays unspent (0.036 spent of 0.05); without, all of it is spent.
    looks = tuple(range(1, 7))
    bounds = efficacy_boundaries(0.05, tuple(map(float, looks)), futility, 1, power)
    assert null_keep_rate(bounds, futility, looks) == pytest.approx(spent, abs=0.003)
    assert min(bounds) >= 1.6448


def test_the_default_design_keeps_a_null_candidate_at_most_alpha_of_the_time():
    # program.md's defaults (8 looks, futility 0.75 then 1.0, spend power 1.5), simulated
    # on the canonical joint law of the looks and the keep-needs-two-seeds rule.
    rule = SequentialRule()
    bounds, looks = rule.boundaries(rule.alpha), rule.looks()
    futility = [rule.futility[0]] + [rule.futility[1]] * (len(looks) - 1)
    assert 0.01 < null_keep_rate(bounds, futility, looks) <= rule.alpha + 0.002
    assert bounds[0] >= 12 and min(bounds) >= 1.6448    # no keep on one seed; never below z_.95


def test_gls_uses_pairing_only_when_seeds_share_noise():
    cand = {1: 1.0, 2: 2.0}
    ref = {1: 1.5, 2: 2.5, 10: 0.0, 11: 0.0}
    *_, diff0, sd0 = gls_difference(cand, ref, 0.0)
    *_, diff9, sd9 = gls_difference(cand, ref, 0.9)
    assert diff0 == pytest.approx(np.mean([1.5, 2.5, 0, 0]) - 1.5)
    assert diff9 == pytest.approx(0.5, abs=0.15)     # paired: the seed effects cancel
    assert sd9 < sd0


def test_the_benchmarked_defaults_are_what_the_loop_runs():
    # benchmarks/keep_rule/decisions.py reports SequentialRule()'s defaults; the loop builds its rule
    # from program.md, whose shipped copy spells the defaults out: they must agree.
    from pathlib import Path

    from agent.decide.rules import make_rule
    from agent.program import load_program, parse_program

    def settings(rule):
        return (rule.alpha, rule.min_effect, rule.baseline, rule.screen, rule.max_seeds,
                rule.fdr, rule.futility, rule.spend_power, rule.refresh)

    shipped = load_program(Path(__file__).resolve().parents[2] / "program.md", {})
    bare = parse_program("---\n---\n", "p.md")
    assert settings(make_rule(bare.decision, bare.rule_settings)) == settings(SequentialRule())
    assert settings(make_rule(shipped.decision, shipped.rule_settings)) == settings(SequentialRule())


def test_the_pairs_own_test_is_a_one_sided_paired_t_test():
    from scipy import stats
    improvements = [0.151, 0.175, 0.157, 0.149]
    p, dof = own_pairs_p(improvements)
    assert dof == 3
    assert p == pytest.approx(stats.ttest_1samp(improvements, 0.0, alternative="greater").pvalue)
    assert own_pairs_p([0.2]) is None                      # one pair has no spread of its own
    assert own_pairs_p([0.1, 0.1]) == (0.0, 1)             # agreeing to the last digit, better
    assert own_pairs_p([-0.1, -0.1])[0] == 1.0
    assert own_pairs_p([-0.15, -0.17])[0] > 0.9            # worse on both
