"""The pairing benchmark's reference rules do what their rows claim
(benchmarks/keep_rule/pairing_nights.py): the one-seed rule at level α keeps at most α of the
no-effect candidates, many times fewer than the single run, its peer without a bar."""
from __future__ import annotations

import pytest

from benchmarks.sim.nights import NoiseModel, simulate, summarize
from benchmarks.keep_rule.pairing_nights import OneSeedAtLevel, rules


@pytest.mark.parametrize("rho, tau", [(0.0, 0.47), (0.9, 0.0)])
def test_the_one_seed_rule_keeps_at_most_alpha_of_no_effect_candidates(rho, tau):
    noise, alpha = NoiseModel(rho, tau), 0.04
    one_seed = summarize(simulate("one seed", "null", 10, 400, 0, noise, OneSeedAtLevel(rho, alpha)))
    single = summarize(simulate("(a) single run", "null", 10, 400, 0, noise, None))
    assert one_seed["runs_per_candidate"] == pytest.approx(1.0, abs=0.01)
    assert one_seed["null_per_100"] <= 100 * alpha
    # The single run, the same rule with no bar (level 0.5), keeps a no-effect candidate each
    # time one draws below the best so far (about ln 400 records a night): many times as often.
    assert single["null_per_100"] > 4 * one_seed["null_per_100"]
    no_bar = summarize(simulate("one seed", "null", 10, 400, 0, noise, OneSeedAtLevel(rho, 0.5)))
    assert no_bar["per_night"] == single["per_night"] and no_bar["null"] == single["null"]


def test_quick_rows_are_the_single_run_nightshift_and_the_one_seed_rule():
    assert list(rules(0.5, quick=True)) == ["single run", "nightshift", "one seed at α, ρ known"]
    assert set(rules(0.5, quick=True)) < set(rules(0.5))
