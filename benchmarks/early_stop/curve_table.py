"""The table of `benchmarks/keep_rule/decisions.py --early-stop`: simulated nights with curves
(benchmarks/sim/worker_nights.py) per prior, stopper and worker count, side by side."""
from __future__ import annotations

import numpy as np

from benchmarks.sim.worker_nights import RUN_S, STOPPERS, CurveModel, night


def curve_cell(cell: tuple) -> dict:
    """One (prior, stopper, workers) cell of --early-stop: mean figures over its nights."""
    from benchmarks.sim.nights import World, draw_effect

    prior, stopper, workers, nights, runs, seed, noise = cell
    results = []
    for i in range(nights):
        key = [seed, ("large", "small", "null").index(prior), i]
        effects, streams = np.random.default_rng(key + [0]), np.random.default_rng(key + [1])
        world, timing, curves = World(streams, noise), np.random.default_rng(key + [2]), \
            np.random.default_rng(key + [3])
        results.append(night(stopper, workers, lambda: draw_effect(prior, effects), world, timing,
                             curves, runs))
    mean = lambda xs: float(np.mean(xs))  # noqa: E731
    discards = [max(r.decided - sum(r.keeps.values()), 1) for r in results]
    return {"progress": mean([r.progress for r in results]),
            "per_hour": mean([r.progress / r.hours for r in results]),
            "decisions_per_hour": mean([r.decided / r.hours for r in results]),
            "true": mean([r.keeps["true"] for r in results]),
            "bad": mean([r.keeps["null"] + r.keeps["harmful"] for r in results]),
            "stopped": mean([r.stopped for r in results]),
            "wins_stopped": mean([r.wins_stopped for r in results]),
            "premature": mean([r.premature for r in results]),
            "premature_wins": mean([r.premature_wins for r in results]),
            "saved": mean([r.saved_time / max(r.candidate_time + r.saved_time, 1e-9) for r in results]),
            "time_per_discard": mean([r.candidate_time / d for r, d in zip(results, discards)]),
            "null_per_100": 100 * sum(r.keeps["null"] for r in results)
                            / max(sum(r.candidates for r in results), 1)}


def compare_early_stop(args, noise, pool_map, started: float) -> int:
    import time

    workers = args.workers or [1, 4]
    nights = args.nights if args.nights != 100 else 20
    print(f"{nights} nights per cell of {args.runs} runs per worker ({args.runs * RUN_S / 3600:.1f} h "
          f"of 75-s runs); curve model {CurveModel()}; ρ = {noise.seed_share:.2f}\n")
    cells = [(prior, stopper, w, nights if prior != "null" else max(nights // 2, 10), args.runs,
              args.seed, noise) for prior in ("large", "small", "null") for w in workers
             for stopper in STOPPERS]
    table = {(c[0], c[1], c[2]): s for c, s in zip(cells, pool_map(curve_cell, cells))}
    for prior in ("large", "small"):
        print(f"prior: {prior}")
        print(f"{'workers':>7s} {'runs':10s} {'decisions/h':>11s} {'σ/hour':>7s} {'progress σ':>10s} "
              f"{'true':>5s} {'null+harm':>9s} {'stopped':>7s} {'wins stopped':>12s} "
              f"{'premature':>9s} {'time saved':>10s} {'time/discard':>12s}")
        for w in workers:
            for stopper in STOPPERS:
                s = table[prior, stopper, w]
                print(f"{w:7d} {stopper:10s} {s['decisions_per_hour']:11.1f} {s['per_hour']:7.2f} "
                      f"{s['progress']:10.2f} {s['true']:5.1f} {s['bad']:9.1f} {s['stopped']:7.1f} "
                      f"{s['wins_stopped']:12.2f} {s['premature']:9.2f} {s['saved']:10.0%} "
                      f"{s['time_per_discard']:12.2f}")
        print()
    print("false keeps per 100 no-effect candidates (nights where nothing works):")
    for w in workers:
        row = "  ".join(f"{stopper} {table['null', stopper, w]['null_per_100']:5.2f}" for stopper in STOPPERS)
        print(f"  {w} workers: {row}")
    print("(time saved: share of candidate-run time that stopped runs did not spend; time/discard: "
          "candidate-run time per discarded candidate, in runs; wins stopped: candidates with a "
          "real improvement that a stopped run discarded; premature: stops where the full run "
          "would not have ended the candidate at that look)")
    print(f"\n({time.time() - started:.0f} s)")
    return 0
