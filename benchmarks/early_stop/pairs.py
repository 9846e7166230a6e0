"""Paired curves of real runs (the files collect_curves.py and collect_nanogpt_curves.py write,
one JSON pair a line): a candidate's run and the incumbent's on the same seed, each its curve
and final value. Read by the replay (early_stop_replay.py) and the prior's fit (curve_prior.py).
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from agent.decide.curve_forecast import CurveNoise
from agent.decide.early_stop import EarlyStopSettings, curve_noise
from agent.record.curves import Curve, CurvePoint
from agent.record.records import Direction


class FormatError(ValueError):
    """A line of the pairs file that is not a pair; says which line and what is missing."""


@dataclass(frozen=True)
class Run:
    curve: Curve
    final: float
    run_s: float | None
    train_s: float | None = None      # its training loop, export and evaluation step, when known
    export_s: float | None = None
    eval_s: float | None = None


@dataclass(frozen=True)
class Pair:
    candidate: Run
    incumbent: Run
    improvement: float        # the candidate's final improvement, in the metric's direction
    null: bool
    change: str
    seed: int | None = None


@dataclass(frozen=True)
class Baseline:
    """What a night measures before its first candidate, from the incumbent's runs: here the
    file's incumbent runs, one a seed (benchmarks/early_stop/collect_curves.py runs one incumbent on every
    seed), as the reference runs of one commit."""

    scale: float              # the sd of a final same-seed difference: √2 × the finals' sd
    noise: CurveNoise         # the spread of their curves at each checkpoint


def baseline(pairs: list[Pair], settings: EarlyStopSettings) -> Baseline:
    runs = list({pair.seed if pair.seed is not None else i: pair.incumbent
                 for i, pair in enumerate(pairs)}.values())
    finals = [run.final for run in runs]
    scale = math.sqrt(2.0) * statistics.stdev(finals) if len(finals) >= 2 else 0.0
    return Baseline(scale, curve_noise([[run.curve for run in runs]], settings.checkpoints))


def read_pairs(path: Path) -> list[Pair]:
    pairs = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            sign = Direction(data.get("direction", Direction.MINIMIZE)).sign
            cand, inc = _run(data["candidate"]), _run(data["incumbent"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise FormatError(f"{path}:{number}: not a pair ({error!r}); each line needs "
                              f"candidate and incumbent with final and points (see --help)") from None
        pairs.append(Pair(cand, inc, sign * (cand.final - inc.final), bool(data.get("null")),
                          str(data.get("change", "")), data.get("seed")))
    return pairs


def _run(data: dict) -> Run:
    points = tuple(CurvePoint(fraction=float(p[0]), step=None if p[1] is None else int(p[1]),
                              loss=float(p[2]), lr=None if len(p) < 4 or p[3] is None else float(p[3]))
                   for p in data["points"])
    return Run(Curve(points, data.get("batch_shape"), data.get("total_steps")),
               float(data["final"]), data.get("run_s"), data.get("train_s"), data.get("export_s"),
               data.get("eval_s"))
