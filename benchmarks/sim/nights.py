"""Simulated nights, shared by the benchmarks that compare keep rules (keep_rule/), early
stopping (early_stop/curve_table.py) and researchers (researchers/researcher_search.py).

A night is a fixed budget of training runs. Each candidate is a change to the current
incumbent with a true effect drawn from a prior, in units of σ (the seed-to-seed sd of one
run). Every run's metric follows the noise model fitted to real runs of train/train.py
(noise_model.json beside this file, measured by benchmarks/keep_rule/noise_runs.py):

    metric = true level + seed effect (shared by all commits on that seed, share ρ)
             + commit×seed effect (fixed for a (commit, seed): a re-run repeats it)
             + run-to-run jitter (wall-clock budget: steps differ between runs)

`night_single` plays the single-run rule (and its confirm variant), `night_sequential` drives
the real agent.decide.sequential.SequentialRule through its Evidence/RunMore interface as the
loop does; `simulate` runs nights of either on common random numbers, `summarize` averages.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from agent.decide.decision import Evidence
from agent.decide.sequential import SequentialRule
from agent.record.events import Decision, Direction, Verdict

MODEL_PATH = Path(__file__).with_name("noise_model.json")   # fitted to real runs of train.py


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


Prior = str | Sequence[float]   # a prior's name, or the night's proposals' effects in order


def proposals(prior: Prior, rng: np.random.Generator) -> Iterator[float]:
    """The night's true effects: drawn from the named prior one at a time (as many as the
    budget takes), or the given ones in order (the night ends after the last)."""
    if isinstance(prior, str):
        while True:
            yield draw_effect(prior, rng)
    yield from prior


@dataclass
class Night:
    progress: float = 0.0          # true improvement of the final incumbent over the start
    optimism: float = 0.0          # true − recorded level of the final incumbent
    keeps: dict[str, int] = field(default_factory=lambda: {"true": 0, "null": 0, "harmful": 0})
    candidates: int = 0
    runs: int = 0
    calibration: int = 0           # runs of new incumbents on the baseline seeds (and the repeat)
    paired: int = 0                # incumbent runs a candidate asked for
    decided: list[tuple[float, bool, int]] = field(default_factory=list)  # (effect, kept, runs)

    def count_keep(self, effect: float) -> None:
        self.keeps["true" if effect > 0 else "null" if effect == 0 else "harmful"] += 1


# ---------------------------------------------------------------- the rules
def night_single(prior: Prior, budget: int, rngs: tuple[np.random.Generator, ...],
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
    effects = proposals(prior, rng)
    while night.runs < budget and (effect := next(effects, None)) is not None:
        commit, before = commit + 1, night.runs
        cand_level = level - effect
        first = world.run(commit, cand_level, 0)
        night.runs += 1
        night.candidates += 1
        kept = first < best - margin
        if kept and confirm:
            second = world.run(commit, cand_level, 1)
            night.runs += 1
            kept = second < best
            first = (first + second) / 2
        night.decided.append((effect, kept, night.runs - before))
        if not kept:
            continue
        best, level = first, cand_level
        night.count_keep(effect)
    night.progress, night.optimism = -level, level - best
    return night


def night_sequential(rule: SequentialRule, prior: Prior, budget: int,
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
    effects = proposals(prior, rng)
    while night.runs < budget and (effect := next(effects, None)) is not None:
        commit, before = commit + 1, night.runs
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
        night.decided.append((effect, decision.verdict is Verdict.KEEP, night.runs - before))
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
