"""Keep rules compared over simulated, compute-matched nights.

    python -m benchmarks.keep_rule.decisions [--nights 100] [--runs 400] [--seed 0] [--quick] [--jobs 2]
    python -m benchmarks.keep_rule.decisions --workers 1 4 8 [--nights 30] [--jobs 2]
    python -m benchmarks.keep_rule.decisions --pairing [--nights 40] [--rho 0 0.5 0.9] [--drift 0.5] [--jobs 2]
    python -m benchmarks.keep_rule.decisions --early-stop [--workers 1 4] [--nights 20] [--jobs 2]

A night is a fixed budget of training runs (400 ≈ 8 h of 60 s runs plus overhead), simulated
by benchmarks/sim/nights.py: candidates with true effects drawn from a prior, in σ units (the
seed-to-seed sd of one run), and runs that follow the noise model fitted to real runs of
train/train.py (benchmarks/sim/noise_model.json).

Rules (lower metric is better):
  (a) single   one run on seed 0 per candidate; keep when it beats the best recorded value
  (b) confirm  as (a), then a re-run on seed 1; keep when both beat the best; the recorded
               value is the mean of the two
  (c) nightshift  agent.sequential.SequentialRule driven through the real Evidence/RunMore
               interface, with the loop's reference caching and pooled noise estimate

Printed per rule: real progress (true improvement of the final incumbent, σ), recorded
optimism (true − recorded value of the final incumbent, σ; positive = the record flatters),
keeps that were truly helpful / no-effect / harmful, candidates tried, runs per candidate.
Then false keeps per 100 candidates on nights where no candidate has any effect.

With --pairing: the same nights at same-seed correlations ρ = 0, 0.5 and 0.9: the single run,
the rule before issue 29 (by its settings), the rule now and the one-seed-at-α reference, with
the shares of runs on calibration and paired incumbent runs, false keeps on steady and on
drifting null nights (`--drift` σ over the night), and issue 29's targets met or missed
(benchmarks/keep_rule/pairing_nights.py).

With --early-stop [--workers 1 4]: nights whose runs print learning curves, today's rule
(every run to its budget) beside early stopping (agent/decide/early_stop.py) and Optuna's
MedianPruner on the same curves: decisions and progress per hour (benchmarks/sim/worker_nights.py).

With --workers: nights of the same wall-clock length (`--runs` runs per worker) on N workers,
the loop's scheduler with batched looks and superseding (benchmarks/keep_rule/parallel_nights.py)
beside N workers each running its own single-run loop on the shared branch (SkyPilot's way):
progress per night and per hour, keeps, and false keeps on no-effect nights.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import sys
import time

import numpy as np

from agent.decide.sequential import SequentialRule
from benchmarks.sim.nights import RULES, NoiseModel, load_noise_model, simulate_cell


def nightshift_rules(quick: bool) -> dict[str, SequentialRule]:
    """program.md's defaults (seeds 6/1/8, alpha .04), a stricter alpha, and LORD++."""
    rules = {"(c) nightshift defaults": SequentialRule(),
             "(c) nightshift alpha .03": SequentialRule(alpha=0.03),
             "(c) nightshift lord": SequentialRule(fdr="lord")}
    return dict(list(rules.items())[:1]) if quick else rules



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nights", type=int, default=100)
    parser.add_argument("--runs", type=int, default=400, help="runs per night")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="one nightshift setting only")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (same result)")
    parser.add_argument("--repeat-share", type=float, help="override the fitted re-run jitter")
    parser.add_argument("--seed-share", type=float, help="override the fitted ρ")
    parser.add_argument("--workers", type=int, nargs="+",
                        help="compare nights on these worker counts instead (see above)")
    parser.add_argument("--early-stop", action="store_true",
                        help="compare early stopping on simulated curves instead (see above)")
    parser.add_argument("--pairing", action="store_true",
                        help="compare at same-seed correlations 0, 0.5, 0.9 instead (see above)")
    parser.add_argument("--rho", type=float, nargs="+",
                        help="with --pairing: only these of the correlations 0, 0.5, 0.9")
    parser.add_argument("--drift", type=float, default=0.5,
                        help="with --pairing: σ the metric drifts over a night for the drift "
                             "column (false keeps on null nights whose machine speeds up)")
    args = parser.parse_args(argv)
    noise, data = load_noise_model()
    if args.seed_share is not None or args.repeat_share is not None:
        rho = noise.seed_share if args.seed_share is None else args.seed_share
        tau = noise.repeat_share if args.repeat_share is None else args.repeat_share
        noise = NoiseModel(rho, min(tau, 1 - rho))
    started = time.time()
    if args.early_stop:
        from benchmarks.early_stop.curve_table import compare_early_stop

        with multiprocessing.Pool(args.jobs) if args.jobs > 1 else contextlib.nullcontext() as pool:
            return compare_early_stop(args, noise, lambda f, cells: pool.map(f, cells, chunksize=1)
                                      if pool else list(map(f, cells)), started)
    if args.workers:
        from benchmarks.keep_rule.parallel_nights import compare_workers

        return compare_workers(args, noise, data, started)
    if args.pairing:
        from benchmarks.keep_rule.pairing_nights import compare_pairing

        with multiprocessing.Pool(args.jobs) if args.jobs > 1 else contextlib.nullcontext() as pool:
            return compare_pairing(args, noise.repeat_share, started,
                                   lambda f, cells: pool.map(f, cells, chunksize=1) if pool
                                   else list(map(f, cells)))
    print(f"noise model: σ = {data['sd']:.4g} {data['metric']} per run ({data['budget_s']} s "
          f"budget); same-seed correlation of two commits ρ = {noise.seed_share:.2f}; "
          f"re-run jitter share {noise.repeat_share:.2f}")
    print(f"{args.nights} nights × {args.runs} runs per prior; effects in σ units\n")
    names = list(RULES) + list(nightshift_rules(args.quick))
    ns_rules = nightshift_rules(args.quick)
    cells = [(prior, name, args.nights if prior != "null" else max(args.nights // 3, 10),
              args.runs, args.seed, noise, ns_rules.get(name))
             for prior in ("large", "small", "null") for name in names]
    # Cells are independent (each seeds its own generators), so a pool gives the same table.
    with multiprocessing.Pool(args.jobs) if args.jobs > 1 else contextlib.nullcontext() as pool:
        done = pool.map(simulate_cell, cells, chunksize=1) if pool else map(simulate_cell, cells)
    summaries = {(cell[0], cell[1]): summary for cell, summary in zip(cells, done)}
    header = (f"{'rule':27s} {'progress σ':>12s} {'vs (a)':>10s} {'optimism σ':>10s} "
              f"{'true':>5s} {'null':>5s} {'harm':>5s} {'cands':>6s} {'runs/c':>6s}")
    for prior in ("large", "small"):
        print(f"prior: {prior}")
        print(header)
        ref = summaries[prior, names[0]]
        base = np.array(ref["per_night"])
        for name in names:
            s = summaries[prior, name]
            ratio = s["progress"] / ref["progress"] if ref["progress"] > 0 else float("nan")
            # Paired nights (common random numbers): se of the ratio by the delta method.
            resid = np.array(s["per_night"]) - ratio * base
            ratio_se = float(np.std(resid) / math.sqrt(len(base)) / abs(ref["progress"]))
            print(f"{name:27s} {s['progress']:7.2f}±{s['progress_se']:.2f} {ratio:5.0%}±"
                  f"{min(ratio_se, 9.99):<4.0%} "
                  f"{s['optimism']:10.2f} {s['true']:5.1f} {s['null']:5.1f} {s['harmful']:5.2f} "
                  f"{s['candidates']:6.0f} {s['runs_per_candidate']:6.2f}")
        print()
    print("false keeps per 100 no-effect candidates (nights where nothing works):")
    for name in names:
        s = summaries["null", name]
        print(f"  {name:27s} {s['null_per_100']:5.2f}   ({s['candidates']:.0f} candidates a night)")
    print()
    print_targets(summaries, names, ns_rules)
    print(f"\n({time.time() - started:.0f} s)")
    return 0


def print_targets(summaries: dict, names: list[str], rules: dict[str, SequentialRule]) -> None:
    single = names[0]
    print("targets, both priors: progress >= 95% of (a); optimism <= 0.5σ; null+harmful keeps "
          "<= 1/4 of (a)'s; harmful <= 0.1/night; false keeps/100 <= 100·alpha")
    for name in rules:
        missed = []
        for prior in ("large", "small"):
            s, a = summaries[prior, name], summaries[prior, single]
            checks = {"progress": s["progress"] >= 0.95 * a["progress"],
                      "optimism": s["optimism"] <= 0.5,
                      "null+harmful": s["null"] + s["harmful"] <= 0.25 * (a["null"] + a["harmful"]),
                      "harmful": s["harmful"] <= 0.1}
            missed += [f"{k} ({prior})" for k, ok in checks.items() if not ok]
        if summaries["null", name]["null_per_100"] > 100 * rules[name].alpha:
            missed.append("false keeps/100")
        print(f"  {name:27s} {'all met' if not missed else 'missed: ' + ', '.join(missed)}")


if __name__ == "__main__":
    sys.exit(main())
