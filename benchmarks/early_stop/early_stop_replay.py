"""Early stopping replayed on recorded pairs of real runs: what it saves and what it loses.

    python -m benchmarks.early_stop.early_stop_replay PAIRS.jsonl [--confidence 0.99] [--checkpoints 0.25 0.5 0.75]
                                           [--orders 20] [--prior-pairs 4] [--cross]
    python -m benchmarks.early_stop.early_stop_replay --synthetic OUT.jsonl [--pairs 60] [--seed 0]

PAIRS.jsonl holds one pair a line, in the order the runs finished (a night's order): a
candidate run and its incumbent's run on the same seed, both run to their full budget.

    {"seed": 1000, "change": "LR 3e-3 -> 6e-3", "null": false,
     "metric": "val_bpb", "direction": "minimize", "budget_s": 60,
     "candidate": {"final": 2.3130, "run_s": 75.2, "batch_shape": "64x256", "total_steps": null,
                   "points": [[0.05, 100, 3.912, 0.01], [0.10, 200, 3.402, 0.01], ...]},
     "incumbent": {"final": 2.3177, "run_s": 74.8, ...}}

`points` are [budget fraction, step, training loss, learning rate or null] (the bundled
train.py's step lines through sandbox/progress.py and agent/record/curves.py: fraction =
`elapsed` / budget; a step-budgeted script's steps over the incumbent's, as
benchmarks/early_stop/collect_nanogpt_curves.py writes them); `final` is the run's metric; `run_s` its wall time, start-up and
evaluation included (optional: without it a run counts as one unit, 0.1 of it start-up, 0.8
training, 0.1 evaluation), and with `train_s`, `export_s`, `eval_s` (the training loop, the
model's export, the evaluation step: benchmarks/early_stop/collect_curves.py writes them) a stop at f
costs run_s − (1 − f)·train_s − export_s − eval_s; `null` marks a pair whose candidate changes
nothing that matters (a whitespace edit, a renamed variable), for the false-keep count;
`change` is free text.

Each pair is replayed as a night would meet it: the early-stop rule judges the candidate's
curve at each checkpoint (as the night has it then: up to the first point past it) against
the incumbent's, calibrated on the pairs before it only, and the pair then joins the
calibration. What the night measures before its first candidate, the spread of the
incumbent's curves and finals across seeds, comes from the file's incumbent runs (one a seed).
The candidate's fate without early stopping is the keep rule's screen on this one seed:
discarded when its final improvement is at most `futility` (0.75) times the spread of the
final differences of the pairs so far (none before three pairs, and no stop either), which
is also what a stop must be sure of. Printed: run time per discarded candidate without and
with early stopping, and what that is of the most a rule could save (every candidate the
screen discards stopped at the first checkpoint if its curve can be compared, as if the rule
knew the answer); the candidates that passed the screen but were stopped (real wins lost: a
conservative count, since more candidates pass a one-seed screen than are kept), and the null
pairs that pass the screen (false keeps) without and with it; early stopping can only remove
candidates, so that last figure cannot grow. With `--orders N` every figure is the mean over N
shuffles of the pairs (the first is the file's order): which pairs calibrate the rule before a
given one depends on the order, and one order is one draw of it.

How telling the curves are, first (benchmarks/early_stop/curve_prior.py): at each checkpoint, the
least-squares line of the final improvement on the loss gap, in the rule's noise units, over
the pairs that can be compared (same batch shape and schedule), and the prior of
agent/decide/curve_forecast.py beside it; the default prior was measured that way on
benchmarks/early_stop/paired_curves.jsonl. So that the figures are not read only on the pairs the prior
was measured on, `--cross` also measures a prior on the pairs of half the seeds and replays
the other half with it, both ways.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.decide.curve_forecast import PRIOR, Prior
from agent.decide.early_stop import EarlyStopSettings, FinishedPair, Stop, judge, why_unpaired
from agent.record.curves import Curve
from agent.record.records import Direction
from benchmarks.early_stop import curve_prior
from benchmarks.early_stop.pairs import FormatError, Pair, Run, baseline, read_pairs

START, TRAIN = 0.1, 0.8      # a run's time without run_s: start-up, training, evaluation
FUTILITY = 0.75              # the screen's futility boundary, in sds of a paired difference
MIN_SCALE_PAIRS = 3          # pairs needed before the spread of final differences is known


def replay(pairs: list[Pair], settings: EarlyStopSettings, prior: Prior = PRIOR) -> dict:
    calibration: list[FinishedPair] = []
    rows = []
    measured = baseline(pairs, settings)
    for pair in pairs:
        finals = [p.improvement for p in pairs[:len(rows)]]
        # The screen's bar: a spread of final differences from the pairs so far (real effects
        # included: wider than the noise alone, so fewer candidates pass than a night's screen
        # would let through); none before three pairs, and no stop either.
        spread = statistics.stdev(finals) if len(finals) >= MIN_SCALE_PAIRS else 0.0
        bar = FUTILITY * spread
        full = _cost(pair.candidate, 1.0)
        stopped_at = None
        for checkpoint in settings.checkpoints if spread else ():
            verdict = judge(read_at(pair.candidate.curve, checkpoint), pair.incumbent.curve,
                            calibration, settings, scale=measured.scale, noise=measured.noise,
                            now=checkpoint, loses=lambda g, bar=bar: g <= bar, prior=prior)
            if isinstance(verdict, Stop):
                stopped_at = checkpoint
                break
        passes = spread > 0 and pair.improvement > bar
        rows.append({"passes": passes, "stopped": stopped_at, "null": pair.null,
                     "cost": full, "cost_early": full if stopped_at is None else
                     _cost(pair.candidate, stopped_at)})
        calibration.append(FinishedPair.of(pair.candidate.curve, pair.incumbent.curve,
                                           pair.improvement, settings.checkpoints))
    discards = [r for r in rows if not r["passes"] or r["stopped"] is not None]
    today = [r for r in rows if not r["passes"]]
    return {
        "pairs": len(rows),
        "time_per_discard_today": _mean(r["cost"] for r in today),
        "time_per_discard_early": _mean(r["cost_early"] for r in discards),
        "stopped": sum(r["stopped"] is not None for r in rows),
        "passes": sum(r["passes"] for r in rows),
        "wins_lost": sum(r["passes"] and r["stopped"] is not None for r in rows),
        "null_pairs": sum(r["null"] for r in rows),
        "false_keeps_today": sum(r["null"] and r["passes"] for r in rows),
        "false_keeps_early": sum(r["null"] and r["passes"] and r["stopped"] is None for r in rows),
        "time_total_today": sum(r["cost"] for r in rows),
        "time_total_early": sum(r["cost_early"] for r in rows),
    }


def read_at(curve: Curve, checkpoint: float) -> Curve:
    """The curve as the night has it when it looks at `checkpoint`: up to the first point at
    or past it (the line that crossed it woke the look, agent/run/live.py)."""
    past = next((p.fraction for p in curve.points if p.fraction >= checkpoint), None)
    return curve.upto(checkpoint if past is None else past)


def _cost(run: Run, fraction: float) -> float:
    """What the run costs when it stops at `fraction` of its budget (1: runs to the end)."""
    if run.run_s and run.train_s is not None:
        if fraction >= 1.0:
            return run.run_s
        return run.run_s - (1 - fraction) * run.train_s - (run.export_s or 0.0) - (run.eval_s or 0.0)
    unit = run.run_s if run.run_s else 1.0
    return unit * (START + TRAIN * fraction + (1 - START - TRAIN) * (fraction >= 1.0))


def replays(pairs: list[Pair], settings: EarlyStopSettings, prior: Prior, orders: int,
            seed: int = 0) -> dict:
    """`replay`'s figures, the mean over `orders` orders of the pairs (the file's first)."""
    rng = np.random.default_rng(seed)
    results = []
    for k in range(orders):
        order = list(pairs) if k == 0 else [pairs[i] for i in rng.permutation(len(pairs))]
        results.append(replay(order, settings, prior))
    return {key: float(np.mean([r[key] for r in results])) for key in results[0]}


@dataclass(frozen=True)
class Ceiling:
    lines: list[str]
    first: float          # the share saved stopping every comparable discard at the first checkpoint


def ceilings(pairs: list[Pair], settings: EarlyStopSettings) -> Ceiling:
    """What a perfect rule would save: every candidate whose full run the one-seed screen
    discards, stopped at a checkpoint if its curve can be compared at all (unpaired curves
    run to the end whatever a rule knows), in the file's order and with all the pairs'
    spread as the screen's scale."""
    finals = [p.improvement for p in pairs]
    if len(finals) < MIN_SCALE_PAIRS:
        return Ceiling([], float("nan"))
    bar = FUTILITY * statistics.stdev(finals)
    discards = [p for p in pairs if p.improvement <= bar]
    if not discards:
        return Ceiling([], float("nan"))
    today = _mean(_cost(p.candidate, 1.0) for p in discards)
    comparable = [why_unpaired(p.candidate.curve, p.incumbent.curve, 1.0, settings) is None
                  for p in discards]
    lines = [f"the most a rule could save ({sum(comparable)} of {len(discards)} discards can be "
             f"compared): every comparable discard stopped at"]
    saved = []
    for checkpoint in settings.checkpoints:
        early = _mean(_cost(p.candidate, checkpoint if ok else 1.0)
                      for p, ok in zip(discards, comparable))
        saved.append(1 - early / today)
        lines.append(f"  {checkpoint:.0%}: {saved[-1]:.0%} less run time per discard")
    return Ceiling(lines, saved[0])


def _mean(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else float("nan")


def synthetic(path: Path, pairs: int, seed: int) -> None:
    """A pairs file drawn from the curve model of benchmarks/sim/worker_nights.py (one incumbent,
    candidates of the large prior, a fifth of them null), to try the replay on."""
    rng = np.random.default_rng(seed)
    grid = np.arange(1, 41) / 40
    lines = []
    for i in range(pairs):
        null = rng.random() < 0.2
        gain = 0.0 if null else float(rng.choice([-1, 1]) * rng.uniform(0.3, 2.0))
        crossing = not null and rng.random() < 0.25
        cross = rng.uniform(0.3, 0.9)
        w = (grid - cross) / (1 - cross) if crossing else np.sqrt(grid)
        g = rng.normal(0, 0.3)
        runs = {}
        for who, shift in (("incumbent", np.zeros_like(grid)), ("candidate", -gain * w)):
            rest = rng.normal(0, 0.9)
            losses = 4 * (1 - np.sqrt(grid)) + shift + g + rest * np.sqrt(grid) + rng.normal(0, 0.3, 40)
            runs[who] = {"final": float(shift[-1] + g + rest), "run_s": 75.0,
                         "points": [[float(f), 25 * (k + 1), float(x), 0.01] for k, (f, x)
                                    in enumerate(zip(grid, losses))]}
        lines.append(json.dumps({"seed": 1000 + i, "change": "synthetic", "null": bool(null),
                                 "metric": "val_bpb", "direction": Direction.MINIMIZE.value,
                                 "budget_s": 60, **runs}))
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("pairs", type=Path, nargs="?", help="a pairs file (JSON lines)")
    parser.add_argument("--confidence", type=float, default=EarlyStopSettings.confidence)
    parser.add_argument("--checkpoints", type=float, nargs="+",
                        default=list(EarlyStopSettings.checkpoints))
    parser.add_argument("--orders", type=int, default=1, help="average over this many orders of the pairs")
    parser.add_argument("--prior-pairs", type=float, default=PRIOR.pseudo_pairs,
                        help="how many finished pairs the prior's residual is worth")
    parser.add_argument("--cross", action="store_true",
                        help="also replay each half of the seeds with a prior measured on the other")
    parser.add_argument("--synthetic", type=Path, help="write a synthetic pairs file here instead")
    parser.add_argument("--pairs", dest="count", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.synthetic:
        synthetic(args.synthetic, args.count, args.seed)
        print(f"wrote {args.count} synthetic pairs to {args.synthetic}")
        return 0
    if args.pairs is None:
        parser.error("give a pairs file, or --synthetic OUT to make one")
    try:
        pairs = read_pairs(args.pairs)
    except (OSError, FormatError) as error:
        print(error, file=sys.stderr)
        return 2
    settings = EarlyStopSettings(checkpoints=tuple(args.checkpoints), confidence=args.confidence)
    prior = dataclasses.replace(PRIOR, pseudo_pairs=args.prior_pairs)
    kinds = {"comparable": 0}
    for pair in pairs:
        why = why_unpaired(pair.candidate.curve, pair.incumbent.curve, 1.0, settings)
        key = why.split(" (")[0].split(":")[0] if why else "comparable"
        kinds[key] = kinds.get(key, 0) + 1
    print(f"{len(pairs)} pairs: " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
    measured = baseline(pairs, settings)
    for line in curve_prior.describe(curve_prior.fit(pairs, settings, measured), measured, prior):
        print(line)
    ceiling = ceilings(pairs, settings)
    for line in ceiling.lines:
        print(line)
    r = replays(pairs, settings, prior, args.orders)
    print(f"{r['pairs']:.0f} pairs from {args.pairs}; checkpoints {list(settings.checkpoints)}, "
          f"confidence {settings.confidence:g}" + (f"; means over {args.orders} orders" if args.orders > 1 else ""))
    for line in report(r, ceiling.first):
        print(line)
    if args.cross:
        print("each half of the seeds replayed with a prior measured on the other half:")
        halves = curve_prior.split(pairs)
        for mine, other in (halves, halves[::-1]):
            fitted = curve_prior.prior_from(curve_prior.fit(other, settings, baseline(other, settings)), prior)
            residuals = ", ".join(f"{r:g}" for _, r in fitted.residuals)
            print(f"  {len(mine)} pairs, prior from the other {len(other)}: slope {fitted.slope:g}, "
                  f"residuals {residuals}")
            for line in report(replays(mine, settings, fitted, args.orders),
                               ceilings(mine, settings).first):
                print("    " + line)
    return 0


def report(r: dict, ceiling: float) -> list[str]:
    """What a replay saved and lost, against the most a rule could save (`ceiling`)."""
    less = 1 - r["time_per_discard_early"] / r["time_per_discard_today"] \
        if r["time_per_discard_today"] else float("nan")
    lost = r["wins_lost"] / r["passes"] if r["passes"] else float("nan")
    # no comparable discard (every pair another context or schedule): no ceiling to be a share of
    share = f"{less / ceiling:.0%} of the most a rule could save" if ceiling else "no pair could be stopped"
    lines = [f"run time per discarded candidate: {r['time_per_discard_today']:.1f} without early "
             f"stopping, {r['time_per_discard_early']:.1f} with it ({less:.0%} less: {share}; target >= 50%)",
             f"stopped early: {r['stopped']:.3g} of {r['pairs']:g}; run time of all candidates "
             f"{r['time_total_today']:.0f} -> {r['time_total_early']:.0f}",
             f"real wins lost: {r['wins_lost']:g} of {r['passes']:g} candidates that passed the screen "
             f"({lost:.0%}; target 0)",
             f"false keeps (null pairs passing the screen): {r['false_keeps_today']:g} of "
             f"{r['null_pairs']:g} without early stopping, {r['false_keeps_early']:g} with it "
             f"(it can only remove candidates)"]
    if math.isnan(less):
        lines.append("(no discards to compare: too few pairs for the spread of a final difference)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
