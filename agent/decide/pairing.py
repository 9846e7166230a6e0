"""Same-seed evidence pooled over a whole night: how much of a run's luck two commits share
when they run on the same seed, and how much a re-run of one (commit, seed) reproduces.

Two sources, and what each may be used for:

- **every run of the night, commit × seed** (`unshared_spread`). Under
  `metric = commit level + seed effect + the rest`, the least-squares fit of the additive
  two-way model leaves residuals whose mean square estimates the variance of "the rest":
  the part of one run that two commits on the same seed do NOT share. It does not depend
  on how far apart the commits' levels are (each gets its own), and it counts each run
  once, whichever decisions it served (the incumbent's run on a seed is paired with every
  candidate of its reign). The incumbents of a night all run on the calibration seeds, so
  they pair with each other too. A commit on one seed only, or a seed run by one commit
  only, says nothing about it and drops out.
- **a re-run of one (commit, seed)** (`repeat_spread`): the baseline runs one seed twice.
  Their difference is the run-to-run jitter alone (the wall-clock step count, a
  non-deterministic kernel). It bounds the shared part from *above* only: two different
  commits on one seed share at most what one commit shares with itself, and often much less
  (on the CPU proxy a re-run repeats half of a run's luck, while two commits share none of
  it: benchmarks/sim/noise_model.json). So a repeat can show that seeds cannot share much (and
  pairing is not worth its runs), never that they do; only differences between commits
  can credit pairing.
"""
from __future__ import annotations

import math
from typing import Hashable, Mapping, Sequence

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import spsolve

Table = Mapping[Hashable, Mapping[int, float]]


def _informative(commit: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Which cells carry same-seed information: those of commits on two or more seeds and
    of seeds run by two or more commits, pruned until both hold (dropping one may orphan the
    other)."""
    keep = np.ones(len(commit), dtype=bool)
    while True:
        per_seed = np.bincount(seed[keep], minlength=seed.max() + 1)
        per_commit = np.bincount(commit[keep], minlength=commit.max() + 1)
        now = keep & (per_seed[seed] >= 2) & (per_commit[commit] >= 2)
        if (now == keep).all():
            return keep
        keep = now


def _dense(labels: np.ndarray) -> tuple[np.ndarray, int]:
    """Labels renumbered 0..k-1, and k."""
    unique, dense = np.unique(labels, return_inverse=True)
    return dense, len(unique)


def _components(ci: np.ndarray, si: np.ndarray, n_c: int, n_s: int) -> tuple[np.ndarray, np.ndarray]:
    """The connected components of the commit–seed graph (cell i joins commit ci[i] and
    seed si[i]): a label per commit and per seed (union-find)."""
    parent = list(range(n_c + n_s))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for commit, seed in zip(ci.tolist(), (n_c + si).tolist()):
        a, b = root(commit), root(seed)
        if a != b:
            parent[a] = b
    labels = np.array([root(i) for i in range(n_c + n_s)])
    return labels[:n_c], labels[n_c:]


def unshared_spread(runs: Table) -> tuple[float | None, int]:
    """The sd of the part of one run that commits on the same seed do not share, and its
    degrees of freedom, from `runs` (commit -> seed -> metric, one run per cell).

    The residual mean square of `value ~ commit + seed` fitted by least squares; degrees of
    freedom = cells − (commits + seeds − connected components of the commit–seed graph).
    (None, 0) when no two commits share two seeds. Two commits run on the same seed differ by
    this much times √2 (the paired spread of agent.decide.noise)."""
    seed_index: dict[int, int] = {}
    cells = [(i, seed_index.setdefault(seed, len(seed_index)), value)
             for i, values in enumerate(runs.values()) if len(values) >= 2
             for seed, value in values.items()]
    if not cells:
        return None, 0
    commit, seed, y = (np.array(column) for column in zip(*cells))
    keep = _informative(commit, seed)
    if not keep.any():
        return None, 0
    (ci, n_c), (si, n_s), y = _dense(commit[keep]), _dense(seed[keep]), y[keep].astype(float)
    n = len(y)
    commit_part, seed_part = _components(ci, si, n_c, n_s)
    dof = n - (n_c + n_s - len(np.unique(commit_part)))
    if dof <= 0:
        return None, 0
    # Eliminate the commit levels: what is left is a system in the seed effects alone (the
    # Schur complement, seeds × seeds, small: a night has tens to hundreds of seeds).
    count = np.bincount(ci, minlength=n_c).astype(float)
    centred = y - (np.bincount(ci, weights=y, minlength=n_c) / count)[ci]
    score = np.bincount(si, weights=centred, minlength=n_s)
    # One seed effect per connected component is not identified (it trades with the commit
    # levels): fix the first one of each at zero, and the rest is positive definite.
    first = np.zeros(n_s, dtype=bool)
    first[np.unique(seed_part, return_index=True)[1]] = True
    free = np.flatnonzero(~first)
    effects = _seed_effects(ci, si, count, n_c, n_s, free, score[free])
    square = float(centred @ centred - effects @ score[free])
    return math.sqrt(max(square, 0.0) / dof), dof


def _seed_effects(ci: np.ndarray, si: np.ndarray, count: np.ndarray, n_c: int, n_s: int,
                  free: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Solve (diag(runs per seed) − Zᵀ·diag(1/runs per commit)·Z) g = score for the free
    seeds, Z the commit × seed incidence: densely when small, else sparse (a seed meets few
    commits: those of one reign, and the incumbents on the calibration seeds)."""
    if not len(free):
        return np.zeros(0)
    if n_s <= 80:
        shared = np.zeros((n_c, n_s))
        shared[ci, si] = 1.0 / np.sqrt(count[ci])
        system = np.diag(np.bincount(si, minlength=n_s).astype(float)) - shared.T @ shared
        return np.linalg.solve(system[np.ix_(free, free)], score)
    shared = sparse.csr_matrix((1.0 / np.sqrt(count[ci]), (ci, si)), shape=(n_c, n_s))
    system = sparse.diags(np.bincount(si, minlength=n_s).astype(float)) - shared.T @ shared
    return spsolve(sparse.csc_matrix(system)[free][:, free], score)


def repeat_spread(repeats: Sequence[tuple[float, float]]) -> tuple[float | None, int]:
    """The run-to-run jitter of one (commit, seed): sd and degrees of freedom from pairs of
    runs of the same commit on the same seed (each pair: one degree of freedom)."""
    if not repeats:
        return None, 0
    square = sum((a - b) ** 2 for a, b in repeats)
    return math.sqrt(square / (2 * len(repeats))), len(repeats)
