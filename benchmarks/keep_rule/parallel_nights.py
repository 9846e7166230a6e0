"""Simulated nights on N workers, for `benchmarks/keep_rule/decisions.py --workers 1 4 8`.

Time is measured in runs (one run ≈ 75 s: a 60 s budget plus start-up and evaluation), a
night is `runs` of them per worker, and runs last 0.9–1.1 units so workers drift apart as
they do. Two ways to use N workers:

- nightshift: the loop's scheduler, in miniature (benchmarks/sim/worker_nights.py, the one
  scheduler simulation, every run to its budget). Up to N runs in flight; a free worker takes
  the rule's requested seeds of pending candidates first (a batch of N // pending seeds per
  look, paired incumbent runs beside them), then the incumbent's reference seeds, then a new
  candidate's screen. The real SequentialRule decides, with the looks actually taken; a keep
  supersedes the candidates in flight (never kept on evidence against the old incumbent),
  and each is re-applied onto the new incumbent as a new candidate with probability one half
  (its diff merges; its effect adds to the new incumbent's).
- single run (SkyPilot-style): every worker runs its own serial single-run loop on the shared
  branch: take the current incumbent, try a candidate once, keep it when its one value beats
  the best recorded so far. A candidate started before another was kept still competes with
  the new best on its old base: its true level is the old incumbent's minus its effect.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from agent.decide.sequential import SequentialRule
from benchmarks.sim import worker_nights
from benchmarks.sim.worker_nights import RUN_S


@dataclass
class Result:
    progress: float = 0.0          # true improvement of the final incumbent (σ)
    keeps: dict[str, int] = field(default_factory=lambda: {"true": 0, "null": 0, "harmful": 0})
    candidates: int = 0
    runs: int = 0
    superseded: int = 0
    hours: float = 0.0

    def keep(self, gain: float) -> None:
        self.keeps["true" if gain > 1e-12 else "null" if gain > -1e-12 else "harmful"] += 1


def single_run(workers: int, draw, world, rng: np.random.Generator,
               runs_per_worker: int) -> Result:
    """Every worker its own serial single-run loop on the shared branch."""
    result, horizon = Result(), float(runs_per_worker)
    level, commit = 0.0, 0
    best = world.run(0, level, 0)
    events: list[tuple[float, int, float, float]] = []    # (time, commit, level, base level)

    def launch(now: float) -> None:
        nonlocal commit
        commit += 1
        result.candidates += 1
        gain = draw()
        heapq.heappush(events, (now + rng.uniform(0.9, 1.1), commit, level - gain, level))

    for _ in range(workers):
        launch(0.0)
    now = 0.0
    while events:
        now, c, lvl, _ = heapq.heappop(events)
        value = world.run(c, lvl, 0)
        result.runs += 1
        if value < best:
            result.keep(level - lvl)            # gain over the incumbent it replaces now
            best, level = value, lvl
        if now < horizon:
            launch(now)
    result.progress, result.hours = -level, now * RUN_S / 3600
    return result


def parallel_cell(cell: tuple) -> dict[str, float]:
    """One (prior, rule, workers) cell of --workers: mean figures over its nights."""
    from benchmarks.sim.nights import World, draw_effect

    prior, name, workers, nights, runs, seed, noise = cell
    results = []
    for i in range(nights):
        key = [seed, ("large", "small", "null").index(prior), i]
        effects, streams = np.random.default_rng(key + [0]), np.random.default_rng(key + [1])
        world, timing = World(streams, noise), np.random.default_rng(key + [2])
        draw = lambda: draw_effect(prior, effects)  # noqa: E731
        results.append(worker_nights.night("today", workers, draw, world, timing,
                                           np.random.default_rng(key + [3]), runs)
                       if name == "nightshift" else single_run(workers, draw, world, timing, runs))
    mean = lambda xs: float(np.mean(xs))  # noqa: E731
    return {"progress": mean([r.progress for r in results]),
            "per_hour": mean([r.progress / r.hours for r in results]),
            "hours": mean([r.hours for r in results]),
            "true": mean([r.keeps["true"] for r in results]),
            "bad": mean([r.keeps["null"] + r.keeps["harmful"] for r in results]),
            "harmful": mean([r.keeps["harmful"] for r in results]),
            "candidates": mean([r.candidates for r in results]),
            "superseded": mean([r.superseded for r in results]),
            "runs": mean([r.runs for r in results]),
            "null_per_100": 100 * sum(r.keeps["null"] for r in results)
                            / max(sum(r.candidates for r in results), 1)}


def compare_workers(args, noise, data: dict, started: float) -> int:
    import contextlib
    import multiprocessing
    import time

    nights = args.nights if args.nights != 100 else 30
    print(f"{nights} nights per cell of {args.runs} runs per worker ({args.runs * 75 / 3600:.1f} h "
          f"of 75-s runs); σ = {data['sd']:.4g} {data['metric']}, ρ = {noise.seed_share:.2f}\n")
    cells = [(prior, name, workers, nights if prior != "null" else max(nights // 2, 10),
              args.runs, args.seed, noise)
             for prior in ("large", "small", "null") for workers in args.workers
             for name in ("nightshift", "single run")]
    with multiprocessing.Pool(args.jobs) if args.jobs > 1 else contextlib.nullcontext() as pool:
        done = pool.map(parallel_cell, cells, chunksize=1) if pool else map(parallel_cell, cells)
    table = {(c[0], c[1], c[2]): s for c, s in zip(cells, done)}
    for prior in ("large", "small"):
        print(f"prior: {prior}")
        print(f"{'workers':>7s} {'rule':12s} {'progress σ':>10s} {'σ/hour':>7s} {'vs 1 w':>7s} "
              f"{'true':>5s} {'null+harm':>9s} {'harm':>5s} {'cands':>6s} {'supers.':>7s}")
        for workers in args.workers:
            for name in ("nightshift", "single run"):
                s, one = table[prior, name, workers], table[prior, name, args.workers[0]]
                speed = s["per_hour"] / one["per_hour"] if one["per_hour"] > 0 else float("nan")
                print(f"{workers:7d} {name:12s} {s['progress']:10.2f} {s['per_hour']:7.2f} "
                      f"{speed:6.1f}x {s['true']:5.1f} {s['bad']:9.1f} {s['harmful']:5.2f} "
                      f"{s['candidates']:6.0f} {s['superseded']:7.1f}")
        print()
    print("false keeps per 100 no-effect candidates (nights where nothing works):")
    for workers in args.workers:
        row = "  ".join(f"{name} {table['null', name, workers]['null_per_100']:5.2f}"
                        for name in ("nightshift", "single run"))
        print(f"  {workers} workers: {row}   (bound for nightshift: {100 * SequentialRule().alpha:.0f})")
    print(f"\n({time.time() - started:.0f} s)")
    return 0
