"""The power benchmark (benchmarks/keep_rule/power.py) measures what its rows claim: the real
rule in simulated nights of the realistic mix, wins found more often the larger they are,
nulls kept under alpha, and the issue-40 screen finding more one-sd wins than the old one on
the same nights."""
from __future__ import annotations

import numpy as np
import pytest

from agent.decide.sequential import SequentialRule
from benchmarks.keep_rule.power import BEFORE, measure, mix, regimes, smallest_found


def test_the_mix_is_mix_nights_mix():
    effects = mix(np.random.default_rng(0))
    assert len(effects) == 40 and sorted(e for e in effects if e > 0) == [0.5, 1.0, 2.0]
    assert effects.count(0.0) == 12
    losers = sorted(-e for e in effects if e < 0)
    assert len(losers) == 25 and losers[0] == pytest.approx(0.25) and losers[-1] == pytest.approx(20)


def test_smallest_found_interpolates_where_the_curve_crosses():
    assert smallest_found([(0.5, 0.2), (1.0, 0.6), (2.0, 1.0)]) == pytest.approx(1.5)
    assert smallest_found([(0.5, 0.9), (1.0, 1.0)]) == 0.5
    assert smallest_found([(0.5, 0.1), (1.0, 0.3)]) is None


@pytest.mark.parametrize("regime", ["wallclock", "seeded"])
def test_wins_are_found_more_often_the_larger_they_are_and_nulls_stay_under_alpha(regime):
    row = measure("nightshift", {}, regimes()[regime], nights=25, seed=3, sizes=(0.5, 3.0))
    (small, small_tally), (large, large_tally) = row.curve
    assert large_tally.share > small_tally.share + 0.3
    assert row.nulls.tried == 25 * 12 and row.nulls.share <= SequentialRule().alpha
    assert row.single_false > 3 * row.false_keeps     # the single run keeps nulls and losers


def test_the_issue_40_screen_finds_more_one_sd_wins_where_seeds_share_nothing():
    noise = regimes()["wallclock"]
    now = measure("nightshift", {}, noise, nights=40, seed=5, sizes=(1.0,)).curve[0][1]
    before = measure("before", BEFORE, noise, nights=40, seed=5, sizes=(1.0,)).curve[0][1]
    assert now.tried == before.tried == 120
    assert now.share > before.share + 0.05
