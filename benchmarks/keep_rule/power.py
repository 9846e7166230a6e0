"""What wins a night can find: `python -m benchmarks.keep_rule.power [--nights 300]`.

Issue 40's power figure, beside the alpha. The keep rule holds the share of no-effect
candidates it keeps under `alpha` whatever the noise; what it cannot promise is to find every
real win, because a win of one seed sd looks like a null on one or two seeds. This prints, for
the realistic mix of benchmarks/keep_rule/mix_nights.py (per 40 proposals: 3 wins of 1, 2 and
0.5 seed sds, 12 nulls, 25 losers from 0.25 to 20 sds, evenly in log) driven through the real
SequentialRule in simulated nights (benchmarks/sim/nights.py, seed sd σ = 1), in both regimes:

- how often a win of each size is kept (the power curve: the mix with its three wins all of
  that size), the runs it took, and the smallest win kept with probability 0.8;
- the mix as it is: wins of at least 1 sd kept, nulls kept (against alpha), false keeps a
  night, and progress per run against the single-run rule's on the same proposals (seed 0,
  kept when it beats the best so far);

for program.md's defaults (futility z <= 0 at the screen and z <= 1 later, where a seed does
not fix the run), for the screen before issue 40 (0.75 at the screen) and for a later futility
as lenient as the screen (0.5), which finds more wins and decides fewer proposals an hour.

Regimes: `wallclock` (ρ = 0, the re-run share of the fitted noise model: seeds share nothing)
and `seeded` (ρ = 0.9, re-run share 0.1: a seed fixes most of the run). Runs are counted, not
seconds, and there is no early stopping here (mix_nights.py measures both on real runs).
About a minute a regime at 300 nights on one core.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

PROJECT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT))

from agent.decide.sequential import SequentialRule  # noqa: E402
from benchmarks.keep_rule import mix_nights  # noqa: E402
from benchmarks.sim.nights import NoiseModel, Night, load_noise_model, night_sequential, night_single  # noqa: E402

WIN_SIZES = (0.5, 1.0, 1.5, 2.0, 3.0)         # the power curve's
TARGET_POWER = 0.8
BEFORE = {"futility": (0.75, 1.0)}            # the rule's settings before issue 40
MORE_POWER = {"futility": (0.0, 0.5)}         # a later futility as lenient as the screen's


def mix(rng: np.random.Generator, wins: tuple[float, ...] | None = None) -> list[float]:
    """One night's 40 true effects (σ, positive = better), shuffled: mix_nights.py's mix, its
    wins replaced by `wins` when given."""
    proposals = mix_nights.mix(40)
    effects = [*(wins or (-p.effect / mix_nights.SD for p in proposals if p.kind == "win")),
               *(-p.effect / mix_nights.SD for p in proposals if p.kind != "win")]
    rng.shuffle(effects)
    return effects


def regimes() -> dict[str, NoiseModel]:
    fitted, _ = load_noise_model()
    return {"wallclock": NoiseModel(0.0, fitted.repeat_share), "seeded": NoiseModel(0.9, 0.1)}


@dataclass(frozen=True)
class KeepShare:
    """Proposals of one kind over many nights: how many were tried, kept, and what they cost."""

    tried: int = 0
    kept: int = 0
    runs: int = 0

    @property
    def share(self) -> float:
        return self.kept / self.tried if self.tried else math.nan

    @property
    def se(self) -> float:
        p = self.share
        return math.sqrt(p * (1 - p) / self.tried) if self.tried else math.nan

    def add(self, kept: bool, runs: int) -> "KeepShare":
        return KeepShare(self.tried + 1, self.kept + kept, self.runs + runs)


def keep_share(nights: list[Night], keep: Callable[[float], bool]) -> KeepShare:
    out = KeepShare()
    for night in nights:
        for effect, kept, runs in night.decided:
            if keep(effect):
                out = out.add(kept, runs)
    return out


def play(rule: SequentialRule | None, noise: NoiseModel, nights: int, seed: int,
         wins: tuple[float, ...] | None = None) -> list[Night]:
    """`nights` nights of the mix: the rule (None: the single run), on common random numbers."""
    out = []
    for i in range(nights):
        effects = mix(np.random.default_rng([seed, i, 0]), wins)
        rngs = (np.random.default_rng([seed, i, 0]), np.random.default_rng([seed, i, 1]))
        out.append(night_single(effects, 10 ** 6, rngs, noise, confirm=False) if rule is None
                   else night_sequential(rule, effects, 10 ** 6, rngs, noise))
    return out


def progress_per_run(nights: list[Night]) -> float:
    return sum(n.progress for n in nights) / sum(n.runs for n in nights)


def smallest_found(curve: list[tuple[float, float]], target: float = TARGET_POWER) -> float | None:
    """The win size at which the power curve first reaches `target` (linear between sizes)."""
    for (a, pa), (b, pb) in zip(curve, curve[1:]):
        if pa >= target:
            return a
        if pb >= target:
            return a + (b - a) * (target - pa) / (pb - pa)
    return curve[-1][0] if curve and curve[-1][1] >= target else None


@dataclass(frozen=True)
class Row:
    """One rule in one regime: the figures the table prints."""

    name: str
    curve: list[tuple[float, KeepShare]]
    wins: KeepShare          # wins of at least 1 sd in the mix
    nulls: KeepShare
    false_keeps: float   # null or harmful keeps a night
    ratio: float         # progress per run, against the single run's
    runs: float          # runs a night
    single_false: float


def measure(name: str, settings: dict, noise: NoiseModel, nights: int, seed: int,
            sizes: tuple[float, ...] = WIN_SIZES) -> Row:
    mixed = play(SequentialRule(**settings), noise, nights, seed)
    single = play(None, noise, nights, seed)
    curve = [(size, keep_share(play(SequentialRule(**settings), noise, nights, seed, (size,) * 3),
                          lambda e, size=size: e == size)) for size in sizes]
    return Row(name, curve, keep_share(mixed, lambda e: e >= 1.0), keep_share(mixed, lambda e: e == 0.0),
               sum(k for n in mixed for e, k, _ in n.decided if e <= 0) / nights,
               progress_per_run(mixed) / progress_per_run(single),
               sum(n.runs for n in mixed) / nights,
               sum(k for n in single for e, k, _ in n.decided if e <= 0) / nights)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nights", type=int, default=300, help="simulated nights a cell (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="the nights' random stream (default 0)")
    parser.add_argument("--regime", choices=("wallclock", "seeded"), nargs="+",
                        default=["wallclock", "seeded"])
    args = parser.parse_args(argv)
    alpha = SequentialRule().alpha
    started = time.monotonic()
    for regime in args.regime:
        noise = regimes()[regime]
        print(f"{regime}: seed share {noise.seed_share:g}, re-run share {noise.repeat_share:.2f}, "
              f"{args.nights} nights of 40 proposals a cell, alpha {alpha:g}")
        for name, settings in (("nightshift", {}), ("before issue 40", BEFORE),
                               ("futility (0, 0.5): more power, fewer proposals", MORE_POWER)):
            row = measure(name, settings, noise, args.nights, args.seed)
            curve = "  ".join(f"{size:g} sd {t.share:.2f}" for size, t in row.curve)
            found = smallest_found([(size, t.share) for size, t in row.curve])
            print(f"  {name}")
            print(f"    wins kept by size: {curve}")
            print(f"    runs a win took:   " + "  ".join(f"{size:g} sd {t.runs / t.tried:.1f}"
                                                      for size, t in row.curve))
            print(f"    smallest win kept with probability {TARGET_POWER:g}: "
                  + (f"{found:.2f} sd" if found is not None else f"none up to {row.curve[-1][0]:g} sd"))
            print(f"    the mix: wins >= 1 sd kept {row.wins.share:.2f} ± {row.wins.se:.2f}; "
                  f"nulls kept {row.nulls.share:.3f} (alpha {alpha:g}); null or harmful keeps "
                  f"{row.false_keeps:.2f} a night (single run {row.single_false:.2f}); "
                  f"{row.runs:.0f} runs a night")
            print(f"    progress per run, against the single run's: {row.ratio:.2f}")
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
