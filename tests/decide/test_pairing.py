"""Same-seed evidence pooled over a night: the two-way fit of every run, and re-runs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from agent.decide.pairing import repeat_spread, unshared_spread


def night_table(rng, commits=40, seeds=30, p=0.25, share=0.6, level_sd=3.0):
    """commit -> seed -> value under value = level + seed effect (share) + the rest (1 − share),
    each commit on a random subset of the seeds (unbalanced, as a night is)."""
    seed_effect = rng.normal(0, math.sqrt(share), seeds)
    table = {}
    for c in range(commits):
        level = rng.normal(0, level_sd)
        table[f"c{c}"] = {s: level + seed_effect[s] + rng.normal(0, math.sqrt(1 - share))
                          for s in range(seeds) if rng.random() < p}
    return table


def dense_fit(table):
    """The same residual mean square by brute force: dense least squares on every cell of
    commits and seeds that meet at least one other (an independent implementation)."""
    cells = {c: v for c, v in table.items() if len(v) >= 2}
    while True:
        counts = {}
        for values in cells.values():
            for s in values:
                counts[s] = counts.get(s, 0) + 1
        pruned = {c: {s: x for s, x in v.items() if counts[s] >= 2} for c, v in cells.items()}
        pruned = {c: v for c, v in pruned.items() if len(v) >= 2}
        if pruned == cells:
            break
        cells = pruned
    commits = {c: i for i, c in enumerate(cells)}
    seeds = {s: j for j, s in enumerate(sorted({s for v in cells.values() for s in v}))}
    rows = [(commits[c], seeds[s], x) for c, v in cells.items() for s, x in v.items()]
    design = np.zeros((len(rows), len(commits) + len(seeds)))
    for i, (c, s, _) in enumerate(rows):
        design[i, c] = design[i, len(commits) + s] = 1.0
    y = np.array([x for _, _, x in rows])
    fit, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ fit
    dof = len(rows) - rank
    return math.sqrt(residual @ residual / dof), dof


@pytest.mark.parametrize("shape", [(40, 30, 0.25), (12, 8, 0.9), (150, 120, 0.04)])
def test_the_fit_is_the_least_squares_fit_of_commit_plus_seed(shape):
    table = night_table(np.random.default_rng(sum(map(int, [shape[0], shape[1]]))), *shape)
    sd, dof = unshared_spread(table)
    want_sd, want_dof = dense_fit(table)
    assert dof == want_dof and sd == pytest.approx(want_sd, rel=1e-9)


def test_disconnected_parts_of_a_night_each_lose_one_degree_of_freedom():
    rng = np.random.default_rng(5)
    one, two = night_table(rng, 10, 6, 1.0), night_table(rng, 10, 6, 1.0)
    table = {**one, **{f"b{c}": {s + 100: x for s, x in v.items()} for c, v in two.items()}}
    sd, dof = unshared_spread(table)
    assert dof == 2 * (10 * 6 - (10 + 6 - 1))
    assert (sd, dof) == pytest.approx(dense_fit(table))


def test_it_measures_what_commits_do_not_share_whatever_their_levels():
    rng = np.random.default_rng(1)
    variances = [unshared_spread(night_table(rng, share=0.8, level_sd=50.0))[0] ** 2
                 for _ in range(150)]
    assert np.mean(variances) == pytest.approx(0.2, rel=0.05)   # 1 − share


def test_runs_that_meet_no_other_commit_on_a_seed_say_nothing():
    lonely = {"a": {1: 1.0, 2: 1.3}, "b": {3: 1.1, 4: 0.9}, "c": {5: 2.0}}
    assert unshared_spread(lonely) == (None, 0)
    assert unshared_spread({}) == (None, 0)
    # two commits on two shared seeds: one degree of freedom, the paired difference's spread
    sd, dof = unshared_spread({"a": {1: 1.0, 2: 2.0}, "b": {1: 1.5, 2: 2.1, 9: 7.0}})
    assert dof == 1 and sd == pytest.approx(abs((1.0 - 1.5) - (2.0 - 2.1)) / 2)


def test_repeats_measure_the_jitter_of_one_seed():
    assert repeat_spread([]) == (None, 0)
    sd, dof = repeat_spread([(1.0, 1.2), (2.0, 2.0)])
    assert dof == 2 and sd == pytest.approx(math.sqrt((0.2 ** 2) / 4))
