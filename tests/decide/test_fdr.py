"""LORD++ night-wide false-discovery control: levels from the history alone."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from agent.decide.fdr import gamma, keep_indices, lord_level
from agent.record.events import Decision, Verdict


def decisions(verdicts: str) -> tuple[Decision, ...]:
    return tuple(Decision(verdict={"k": Verdict.KEEP, "d": Verdict.DISCARD}[v]) for v in verdicts)


@pytest.mark.parametrize("horizon", [None, 30, 100])
def test_gamma_is_non_increasing_and_sums_to_at_most_one(horizon):
    g = [gamma(j, horizon) for j in range(1, 20_000)]
    assert all(a >= b for a, b in zip(g, g[1:]))
    assert sum(g) <= 1.0


def test_level_depends_only_on_the_history():
    h = decisions("ddkdddkd")
    assert lord_level(h, 0.05) == lord_level(decisions("ddkdddkd"), 0.05)
    assert keep_indices(h) == [3, 7]


def test_a_keep_refills_the_wealth_and_dry_spells_drain_it():
    before = lord_level(decisions("dddd"), 0.05)
    after_keep = lord_level(decisions("dddk"), 0.05)
    later = lord_level(decisions("dddk" + "d" * 50), 0.05)
    assert after_keep > before and later < after_keep


def test_without_keeps_the_levels_spend_at_most_the_initial_wealth():
    spent = sum(lord_level(decisions("d" * t), 0.05, horizon=100) for t in range(2000))
    assert spent <= 0.025 + 1e-12


def test_false_discovery_proportion_stays_below_alpha():
    # Streams of independent one-sided tests: 10% strong signals, the rest null.
    rng = np.random.default_rng(0)
    fdps = []
    for _ in range(80):
        history: list[Decision] = []
        false = true = 0
        for _ in range(150):
            signal = rng.random() < 0.1
            p = stats.norm.sf(rng.normal(3.0 if signal else 0.0))
            keep = p <= lord_level(tuple(history), 0.1)
            history.append(Decision(verdict=Verdict.KEEP if keep else Verdict.DISCARD))
            false += keep and not signal
            true += keep and signal
        fdps.append(false / max(false + true, 1))
    assert np.mean(fdps) <= 0.1


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="alpha"):
        lord_level((), 1.5)
    with pytest.raises(ValueError, match="w0"):
        lord_level((), 0.05, w0=0.2)
