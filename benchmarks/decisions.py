"""Keep rules compared over simulated, compute-matched nights.

    python benchmarks/decisions.py [--nights 100] [--runs 400] [--seed 0] [--quick] [--jobs 2]
    python benchmarks/decisions.py --workers 1 4 8 [--nights 30] [--jobs 2]
    python benchmarks/decisions.py --pairing [--nights 40] [--rho 0 0.5 0.9] [--drift 0.5] [--jobs 2]
    python benchmarks/decisions.py --early-stop [--workers 1 4] [--nights 20] [--jobs 2]

A night is a fixed budget of training runs (400 ≈ 8 h of 60 s runs plus overhead). Each
candidate is a change to the current incumbent with a true effect drawn from a prior, in
units of σ (the seed-to-seed sd of one run). Every run's metric follows the noise model
fitted to real runs of train/train.py (benchmarks/noise_model.json):

    metric = true level + seed effect (shared by all commits on that seed, share ρ)
             + commit×seed effect (fixed for a (commit, seed): a re-run repeats it)
             + run-to-run jitter (wall-clock budget: steps differ between runs)

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
(benchmarks/pairing_nights.py).

With --early-stop [--workers 1 4]: nights whose runs print learning curves, today's rule
(every run to its budget) beside early stopping (agent/decide/early_stop.py) and Optuna's
MedianPruner on the same curves: decisions and progress per hour (benchmarks/curve_nights.py).

With --workers: nights of the same wall-clock length (`--runs` runs per worker) on N workers,
the loop's scheduler with batched looks and superseding (benchmarks/parallel_nights.py)
beside N workers each running its own single-run loop on the shared branch (SkyPilot's way):
progress per night and per hour, keeps, and false keeps on no-effect nights.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import sys
import time
from dataclasses import dataclass, field
from typing import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agent.decide.decision import Evidence  # noqa: E402
from agent.record.events import Decision, Direction, Verdict  # noqa: E402
from agent.decide.sequential import SequentialRule  # noqa: E402

MODEL_PATH = Path(__file__).with_name("noise_model.json")


# ---------------------------------------------------------------- noise and priors
@dataclass(frozen=True)
class NoiseModel:
    seed_share: float      # ρ: correlation of two commits on the same seed
    repeat_share: float    # share of variance that is run-to-run jitter for one (commit, seed)
    drift: float = 0.0     # σ the metric falls over a night (the machine speeds up), linear
                           # in the run index: the same edit looks better the later it runs


def load_noise_model(path: Path = MODEL_PATH) -> tuple[NoiseModel, dict]:
    data = json.loads(path.read_text())
    return NoiseModel(data["seed_share"], data["repeat_share"]), data


class World:
    """Lazily drawn seed and commit×seed effects of one night; σ = 1."""

    def __init__(self, rng: np.random.Generator, noise: NoiseModel, budget: int = 400) -> None:
        self.rng, self.noise, self.budget = rng, noise, budget
        self.seed_effect: dict[int, float] = {}
        self.cell: dict[tuple[int, int], float] = {}
        self.clock = 0                           # runs made so far (the drift's time)

    def run(self, commit: int, level: float, seed: int) -> float:
        rho, tau = self.noise.seed_share, self.noise.repeat_share
        if self.noise.drift:
            level = level - self.noise.drift * self.clock / self.budget
        self.clock += 1
        if seed not in self.seed_effect:
            self.seed_effect[seed] = self.rng.normal(0, math.sqrt(rho))
        if (commit, seed) not in self.cell:
            self.cell[commit, seed] = self.rng.normal(0, math.sqrt(max(1 - rho - tau, 0)))
        return level + self.seed_effect[seed] + self.cell[commit, seed] + \
            self.rng.normal(0, math.sqrt(tau))


def draw_effect(prior: str, rng: np.random.Generator) -> float:
    """True improvement (σ units, positive = better) of one candidate."""
    u = rng.random()
    if prior == "large":     # mostly nothing, some harmful, ~10% helpful by 0.5–2σ
        if u < 0.70:
            return 0.0
        if u < 0.90:
            return -rng.uniform(0.5, 3.0)
        return rng.uniform(0.5, 2.0)
    if prior == "small":     # every effect under 0.6σ
        if u < 0.50:
            return 0.0
        if u < 0.80:
            return rng.uniform(0.0, 0.6)
        return -rng.uniform(0.0, 0.6)
    if prior == "null":
        return 0.0
    raise ValueError(f"unknown prior {prior!r}")


@dataclass
class Night:
    progress: float = 0.0          # true improvement of the final incumbent over the start
    optimism: float = 0.0          # true − recorded level of the final incumbent
    keeps: dict[str, int] = field(default_factory=lambda: {"true": 0, "null": 0, "harmful": 0})
    candidates: int = 0
    runs: int = 0
    calibration: int = 0           # runs of new incumbents on the baseline seeds (and the repeat)
    paired: int = 0                # incumbent runs a candidate asked for

    def count_keep(self, effect: float) -> None:
        self.keeps["true" if effect > 0 else "null" if effect == 0 else "harmful"] += 1


# ---------------------------------------------------------------- the rules
def night_single(prior: str, budget: int, rngs: tuple[np.random.Generator, ...],
                 noise: NoiseModel, confirm: bool, margin: float = 0.0) -> Night:
    """One run per candidate on seed 0 (and seed 1 with `confirm`), kept when it beats the
    best recorded value by more than `margin` (σ units; 0: at all)."""
    rng, world, night = rngs[0], World(rngs[1], noise, budget), Night()
    level, commit = 0.0, 0                       # true level of the incumbent (lower = better)
    best = world.run(0, level, 0)
    if confirm:
        best = (best + world.run(0, level, 1)) / 2
        night.runs += 1
    night.runs += 1
    while night.runs < budget:
        effect, commit = draw_effect(prior, rng), commit + 1
        cand_level = level - effect
        first = world.run(commit, cand_level, 0)
        night.runs += 1
        night.candidates += 1
        if first >= best - margin:
            continue
        if confirm:
            second = world.run(commit, cand_level, 1)
            night.runs += 1
            if second >= best:
                continue
            first = (first + second) / 2
        best, level = first, cand_level
        night.count_keep(effect)
    night.progress, night.optimism = -level, level - best
    return night


def night_sequential(rule: SequentialRule, prior: str, budget: int,
                     rngs: tuple[np.random.Generator, ...], noise: NoiseModel) -> Night:
    """One night of the real rule, driven the way agent's loop drives it."""
    rng, world, night = rngs[0], World(rngs[1], noise, budget), Night()
    groups: dict[int, list[float]] = {}          # commit -> values, for the pooled noise sd
    table: dict[int, dict[int, float]] = {}      # commit -> seed -> value: same-seed pairs
    pooled = {"ss": 0.0, "dof": 0}
    order: dict[tuple[int, int], int] = {}       # (commit, seed) -> run index

    def measure(commit: int, level: float, seed: int) -> float:
        order[commit, seed] = world.clock          # when it ran (the ledger's run order)
        value = world.run(commit, level, seed)
        table.setdefault(commit, {})[seed] = value
        values = groups.setdefault(commit, [])
        if values:                               # Welford update of the pooled sum of squares
            mean = sum(values) / len(values)
            pooled["ss"] += len(values) / (len(values) + 1) * (value - mean) ** 2
            pooled["dof"] += 1
        values.append(value)
        night.runs += 1
        return value

    level, incumbent = 0.0, 0
    reference = {s: measure(0, level, s) for s in rule.baseline_seeds()}
    repeats = tuple((reference[s], world.run(0, level, s)) for s in rule.repeat_seeds())
    night.runs += len(repeats)                   # the loop re-runs one baseline seed, once
    night.calibration += len(reference) + len(repeats)
    history: list[Decision] = []
    commit = 0
    while night.runs < budget:
        effect, commit = draw_effect(prior, rng), commit + 1
        cand_level, candidate = level - effect, {}
        decision = None
        while night.runs < budget:
            sd = math.sqrt(pooled["ss"] / pooled["dof"]) if pooled["dof"] else None
            out = rule.next(Evidence(Direction.MINIMIZE, dict(candidate), dict(reference), sd,
                                     pooled["dof"], tuple(history), runs=table,
                                     repeats=repeats, reference_order={
                                         s: order[incumbent, s] for s in reference}))
            if isinstance(out, Decision):
                decision = out
                break
            for s in out.candidate_seeds:
                candidate[s] = measure(commit, cand_level, s)
            for s in out.reference_seeds:
                if s not in reference:
                    reference[s] = measure(incumbent, level, s)
                    night.paired += 1
        if decision is None:                     # the night ended mid-experiment
            break
        night.candidates += 1
        history.append(decision)    # the typed record the loop's history holds
        if decision.verdict is Verdict.KEEP:
            night.count_keep(effect)
            level, incumbent = cand_level, commit
            # The loop measures every new incumbent on the calibration seeds, even when that
            # runs a few past the budget: the morning report needs an unbiased level.
            reference = {s: measure(commit, level, s) for s in rule.incumbent_seeds(tuple(history))}
            night.calibration += len(reference)
    if not reference:     # the loop runs the last incumbent's baseline seeds as the night ends
        reference = {s: measure(incumbent, level, s) for s in rule.baseline_seeds()}
        night.calibration += len(reference)
    night.progress = -level
    # The record's value: the incumbent's fresh runs (never the ones that selected it: the
    # loop's reference role; in the paired regime the rule pairs on its selecting runs too,
    # but they stay candidate runs and never enter this mean).
    night.optimism = level - float(np.mean(list(reference.values())))
    return night


# ---------------------------------------------------------------- the table
RULES = {
    "(a) single run": lambda p, b, r, n, **_: night_single(p, b, r, n, confirm=False),
    "(b) confirm re-run": lambda p, b, r, n, **_: night_single(p, b, r, n, confirm=True),
}


def nightshift_rules(quick: bool) -> dict[str, SequentialRule]:
    """program.md's defaults (seeds 6/1/8, alpha .04), a stricter alpha, and LORD++."""
    rules = {"(c) nightshift defaults": SequentialRule(),
             "(c) nightshift alpha .03": SequentialRule(alpha=0.03),
             "(c) nightshift lord": SequentialRule(fdr="lord")}
    return dict(list(rules.items())[:1]) if quick else rules


def simulate(name: str, prior: str, nights: int, budget: int, seed: int,
             noise: NoiseModel, rule: SequentialRule | Callable[..., Night] | None) -> list[Night]:
    """`nights` nights of one rule: RULES[name] when `rule` is None, the real rule when it is
    a SequentialRule, else `rule(prior, budget, rngs, noise)` itself."""
    # Common random numbers: night i of every rule sees the same sequence of candidate
    # effects (first stream) and draws its noise from the same stream (second), so the
    # differences between rules are not drowned by night-to-night luck.
    def rngs(i: int) -> tuple[np.random.Generator, ...]:
        key = [seed, ("large", "small", "null").index(prior), i]
        return np.random.default_rng(key + [0]), np.random.default_rng(key + [1])
    if isinstance(rule, SequentialRule):
        return [night_sequential(rule, prior, budget, rngs(i), noise) for i in range(nights)]
    play = RULES[name] if rule is None else rule
    return [play(prior, budget, rngs(i), noise) for i in range(nights)]


def simulate_cell(cell: tuple) -> dict[str, float]:
    prior, name, nights, budget, seed, noise, rule = cell
    return summarize(simulate(name, prior, nights, budget, seed, noise, rule))


def summarize(results: list[Night]) -> dict[str, float]:
    mean = lambda xs: float(np.mean(xs))
    return {
        "per_night": [r.progress for r in results],
        "progress": mean([r.progress for r in results]),
        "progress_se": float(np.std([r.progress for r in results]) / math.sqrt(len(results))),
        "optimism": mean([r.optimism for r in results]),
        "true": mean([r.keeps["true"] for r in results]),
        "null": mean([r.keeps["null"] for r in results]),
        "harmful": mean([r.keeps["harmful"] for r in results]),
        "candidates": mean([r.candidates for r in results]),
        "runs_per_candidate": mean([r.runs / max(r.candidates, 1) for r in results]),
        "null_per_100": 100 * sum(r.keeps["null"] for r in results)
                        / max(sum(r.candidates for r in results), 1),
        "calibration_share": sum(r.calibration for r in results) / max(sum(r.runs for r in results), 1),
        "paired_share": sum(r.paired for r in results) / max(sum(r.runs for r in results), 1),
    }


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
        from benchmarks.curve_table import compare_early_stop

        with multiprocessing.Pool(args.jobs) if args.jobs > 1 else contextlib.nullcontext() as pool:
            return compare_early_stop(args, noise, lambda f, cells: pool.map(f, cells, chunksize=1)
                                      if pool else list(map(f, cells)), started)
    if args.workers:
        from benchmarks.parallel_nights import compare_workers

        return compare_workers(args, noise, data, started)
    if args.pairing:
        from benchmarks.pairing_nights import compare_pairing

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
