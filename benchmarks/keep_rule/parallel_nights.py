"""Simulated nights on N workers, for `benchmarks/keep_rule/decisions.py --workers 1 4 8`.

Time is measured in runs (one run ≈ 75 s: a 60 s budget plus start-up and evaluation), a
night is `runs` of them per worker, and runs last 0.9–1.1 units so workers drift apart as
they do. Two ways to use N workers:

- nightshift: the loop's scheduler, in miniature. Up to N runs in flight; a free worker takes
  the rule's requested seeds of pending candidates first (a batch of N // pending seeds per
  look, paired incumbent runs beside them), then the incumbent's reference seeds, then a new
  candidate's screen. The real SequentialRule decides, with the looks actually taken; a keep
  supersedes the candidates in flight (never kept on evidence against the old incumbent),
  and each is re-applied onto the new incumbent as a new candidate with probability
  `reapply` (its diff merges; its effect adds to the new incumbent's).
- single run (SkyPilot-style): every worker runs its own serial single-run loop on the shared
  branch: take the current incumbent, try a candidate once, keep it when its one value beats
  the best recorded so far. A candidate started before another was kept still competes with
  the new best on its old base: its true level is the old incumbent's minus its effect.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from agent.decide.decision import Evidence, RunMore
from agent.decide.sequential import SequentialRule
from agent.record.events import Decision, Direction, Verdict

RUN_S = 75.0


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


@dataclass
class Candidate:
    commit: int
    level: float
    gain: float                    # true improvement over the incumbent it runs against
    history: tuple
    values: dict[int, float] = field(default_factory=dict)
    looks: list[int] = field(default_factory=list)
    asked: RunMore | None = None


def nightshift(rule: SequentialRule, workers: int, draw, world, rng: np.random.Generator,
               runs_per_worker: int, reapply: float = 0.5) -> Result:
    result, horizon = Result(), float(runs_per_worker)
    level, incumbent, commit = 0.0, 0, 0
    reference: dict[int, float] = {}
    history: list[Decision] = []
    pending: list[Candidate] = []
    in_flight: dict[tuple[int, int], float] = {}          # (commit, seed) -> finish time
    events: list[tuple[float, int, int, float]] = []      # (time, commit, seed, level)
    groups: dict[int, list[float]] = {}
    table: dict[int, dict[int, float]] = {}                # commit -> seed -> value (first)
    repeats: list[tuple[float, float]] = []                # the night's same-seed repeat
    repeat_wanted = list(rule.repeat_seeds())
    waiting_reapply: list[float] = []                      # gains of superseded diffs to re-try
    cancelled: set[int] = set()                            # superseded commits: runs stopped
    now = 0.0

    def start(c: int, seed: int, lvl: float) -> None:
        finish = now + rng.uniform(0.9, 1.1)
        in_flight[c, seed] = finish
        heapq.heappush(events, (finish, c, seed, lvl))

    def noise() -> tuple[float | None, int]:
        ss = dof = 0
        for values in groups.values():
            if len(values) > 1:
                mean = sum(values) / len(values)
                ss += sum((v - mean) ** 2 for v in values)
                dof += len(values) - 1
        return (math.sqrt(ss / dof), dof) if dof else (None, 0)

    def evidence(cand: Candidate) -> Evidence:
        sd, dof = noise()
        return Evidence(Direction.MINIMIZE, dict(cand.values), dict(reference), sd, dof, cand.history,
                        looks=tuple(cand.looks), batch=max(1, workers // max(1, len(pending))),
                        runs=table, repeats=tuple(repeats))

    while True:
        # decide what can be decided (the baseline first)
        if all(s in reference for s in rule.baseline_seeds()):
            for cand in list(pending):
                asked = cand.asked
                if asked and (any(s not in cand.values for s in asked.candidate_seeds)
                              or any(s not in reference for s in asked.reference_seeds)):
                    continue
                step = rule.next(evidence(cand))
                if isinstance(step, RunMore):
                    if step.look is not None and step.look not in cand.looks:
                        cand.looks.append(step.look)
                    cand.asked = step
                    continue
                pending.remove(cand)
                history.append(step)
                if step.verdict is Verdict.KEEP:
                    result.keep(cand.gain)
                    level, incumbent = cand.level, cand.commit
                    reference = {}
                    for other in pending:       # measured against a gone incumbent
                        result.superseded += 1
                        cancelled.add(other.commit)
                        for key in [k for k in in_flight if k[0] == other.commit]:
                            del in_flight[key]      # its runs are stopped: the worker is free
                        if rng.random() < reapply:
                            waiting_reapply.append(other.gain)
                    pending = []
                    break
        # fill free workers, most useful first
        while now < horizon and len(in_flight) < workers:
            wanted = None
            for cand in pending:
                asked = cand.asked
                for s in (asked.candidate_seeds if asked else ()):
                    if s not in cand.values and (cand.commit, s) not in in_flight:
                        wanted = (cand.commit, s, cand.level)
                        break
                for s in (asked.reference_seeds if asked and wanted is None else ()):
                    if s not in reference and (incumbent, s) not in in_flight:
                        wanted = (incumbent, s, level)
                        break
                if wanted:
                    break
            if wanted is None:
                for s in rule.baseline_seeds():
                    if s not in reference and (incumbent, s) not in in_flight:
                        wanted = (incumbent, s, level)
                        break
            if wanted is None and repeat_wanted and repeat_wanted[0] in reference \
                    and (incumbent, -1 - repeat_wanted[0]) not in in_flight:
                seed = repeat_wanted.pop(0)      # the baseline's same-seed repeat, once
                wanted = (incumbent, -1 - seed, level)
            if wanted is None:                   # a new candidate's screen
                gain = waiting_reapply.pop(0) if waiting_reapply else draw()
                commit += 1
                result.candidates += 1
                cand = Candidate(commit, level - gain, gain, tuple(history))
                cand.asked = rule.next(evidence(cand))
                pending.append(cand)
                continue
            start(*wanted)
        if not events:
            break
        now, c, seed, lvl = heapq.heappop(events)
        if c in cancelled:
            continue
        in_flight.pop((c, seed), None)
        result.runs += 1
        if seed < 0:                             # a repeat (seed −1 − s): jitter only
            if c == incumbent and -1 - seed in reference:
                repeats.append((reference[-1 - seed], world.run(c, lvl, -1 - seed)))
            continue
        value = world.run(c, lvl, seed)
        table.setdefault(c, {}).setdefault(seed, value)
        groups.setdefault(c, []).append(value)
        if c == incumbent:
            reference.setdefault(seed, value)
        for cand in pending:
            if cand.commit == c:
                cand.values[seed] = value
    result.progress, result.hours = -level, now * RUN_S / 3600
    return result


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
        results.append(nightshift(SequentialRule(), workers, draw, world, timing, runs)
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
