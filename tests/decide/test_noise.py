"""Noise calibration: pooled spread, paired spread, seed share, suggested settings."""
from __future__ import annotations

import numpy as np
import pytest

from agent.decide.decision import Decision, Evidence, Verdict
from agent.decide.noise import NoiseEstimate, estimate, paired_noise, pooled_noise, suggest_settings
from agent.record.records import Direction


def commits(rng, n_commits=6, seeds=8, sd=0.1, share=0.0, offsets=None):
    seed_effect = rng.normal(0, sd * share ** 0.5, seeds)
    out = {}
    for c in range(n_commits):
        level = 3.0 + (offsets[c] if offsets else 0.1 * c)
        out[f"c{c}"] = {s: level + seed_effect[s] + rng.normal(0, sd * (1 - share) ** 0.5)
                        for s in range(seeds)}
    return out


def test_pooled_noise_ignores_level_differences_between_commits():
    rng = np.random.default_rng(0)
    sd, dof = pooled_noise(commits(rng, n_commits=20, offsets=[5.0 * c for c in range(20)]))
    assert dof == 20 * 7 and sd == pytest.approx(0.1, rel=0.1)


def test_paired_noise_sees_the_shared_seed_effect():
    rng = np.random.default_rng(1)
    data = commits(rng, n_commits=20, share=0.8)
    values = list(data.values())
    pair_sd, _ = paired_noise(zip(values[::2], values[1::2]))
    # Var(a − b) = 2·sd²·(1 − share) = 0.004
    assert pair_sd == pytest.approx((2 * 0.01 * 0.2) ** 0.5, rel=0.15)


def test_seed_share_is_a_conservative_estimate():
    rng = np.random.default_rng(2)
    shares = []
    for _ in range(200):
        data = commits(rng, n_commits=2, seeds=8, share=0.5)
        a, b = data.values()
        sd, dof = pooled_noise(data)
        pair_sd, pair_dof = paired_noise([(a, b)])
        shares.append(NoiseEstimate(sd, dof, pair_sd, pair_dof).seed_share)
    assert np.mean(shares) < 0.5 and np.mean(shares) > 0.1
    assert NoiseEstimate(0.1, 10, None, 0).seed_share == 0.0


def test_estimate_pools_pairs_from_the_history():
    d = Decision(Verdict.DISCARD, 0.0, None, None, (10, 11, 12),
                 {10: 1.0, 11: 1.2, 12: 0.9}, {10: 1.1, 11: 1.1, 12: 1.0, 0: 1.0}, "x", "")
    ev = Evidence(Direction.MINIMIZE, {20: 1.0}, {0: 1.0, 1: 1.1}, 0.05, 30, (d,))
    est = estimate(ev)
    assert est.sd == 0.05 and est.dof == 30 and est.pair_dof == 2


def test_suggest_settings_scales_with_the_spread():
    rng = np.random.default_rng(3)
    quiet = suggest_settings(commits(rng, sd=0.02))
    loud = suggest_settings(commits(rng, sd=0.2), target_effect=0.1)
    assert quiet["noise_sd"] < loud["noise_sd"]
    assert quiet["min_effect"] < loud["min_effect"]
    assert loud["seeds"]["max"] >= quiet["seeds"]["max"] >= 3
    assert set(quiet["seeds"]) == {"baseline", "screen", "max"} and quiet["reasons"]


def test_suggest_settings_needs_two_seeds_of_something():
    with pytest.raises(ValueError, match="two or more seeds"):
        suggest_settings({"a": {0: 1.0}, "b": [2.0]})
