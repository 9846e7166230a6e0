"""What a candidate's runs cost against the incumbent's, and whether a keep may buy it.

A keep that is only more compute is not progress: a model six times larger that trains six
times longer wins on any metric. Compute is measured by the harness for every script, as a
run's training wall clock (`RunFinished.duration_s`): on one machine that is what a run spent,
whether the script stops at the deadline (the bundled train.py, equal by construction) or
after a step count it keeps in a flag (makemore's --max-steps, where a bigger model simply
takes longer). The script's own parameter count and steps, where both sides print them, are
shown beside: they say why the time differs, never decide.

program.md's `compute:` says what a keep may spend (`ComputePolicy`):
    equal    the default: within the noise of run times (the allowance below)
    +25%     up to that share more, plus the same allowance
    free     anything: a keep may buy compute (the report says so)

The allowance is what honest pairs differ by on a shared machine: NOISE_SHARE of the
incumbent's time, NOISE_FLOOR_S for startup, or NOISE_SPREADS times the incumbent's own
robust spread, whichever is largest.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from agent.record.events import RunFinished
from agent.record.records import ComputeCost

NOISE_SHARE = 0.15      # run times of one script on shared cores differ by this much (median pairs)
NOISE_FLOOR_S = 2.0     # interpreter and library start-up jitter, seconds
NOISE_SPREADS = 3.0     # robust sds of the incumbent's own run times
CLEAR_MARGIN = 2.0      # a candidate this many times past its allowance is refused at once

PARAM_METRICS = ("params", "n_params", "num_params", "parameters", "model_params", "param_count")
STEP_METRICS = ("steps", "step", "iter", "iters", "iterations", "global_step", "train_steps")


@dataclass(frozen=True)
class ComputePolicy:
    """program.md's `compute:`: how much more than the incumbent a keep may spend, as a share
    (0.0 for `equal`), or None for `free`."""

    extra: float | None = 0.0

    def __str__(self) -> str:
        if self.extra is None:
            return "free"
        return "equal" if self.extra == 0 else f"+{self.extra:.0%}"


def parse_policy(value: Any) -> ComputePolicy:
    """`equal`, `free`, or a share more (`+25%`, `25%`, `0.25`). Raises ValueError with the
    accepted forms."""
    text = str(value).strip().lower()
    if text == "equal":
        return ComputePolicy(0.0)
    if text == "free":
        return ComputePolicy(None)
    match = re.fullmatch(r"\+?\s*([0-9]*\.?[0-9]+)\s*(%?)", text)
    if match and not isinstance(value, bool):
        share = float(match.group(1)) / (100 if match.group(2) else 1)
        if math.isfinite(share) and 0 <= share <= 10:
            return ComputePolicy(share)
    raise ValueError(f"expected equal, free, or a share more a keep may spend like +25%, got {value!r}")


def cost(candidate: Iterable[RunFinished], incumbent: Iterable[RunFinished],
         policy: ComputePolicy) -> ComputeCost | None:
    """The candidate's finished runs against the incumbent's, or None while a side has no run
    with a duration (an early-stopped run is left out by the caller: it was cut short)."""
    cand = [r for r in candidate if r.ok and r.duration_s]
    inc = [r for r in incumbent if r.ok and r.duration_s]
    if not cand or not inc:
        return None
    cand_s = statistics.median(r.duration_s for r in cand)
    inc_s = statistics.median(r.duration_s for r in inc)
    allowed = None if policy.extra is None else 1 + policy.extra + allowance(
        [r.duration_s for r in inc]) / inc_s
    return ComputeCost(
        candidate_s=round(cand_s, 2), incumbent_s=round(inc_s, 2), ratio=round(cand_s / inc_s, 3),
        allowed=None if allowed is None else round(allowed, 3),
        candidate_runs=len(cand), incumbent_runs=len(inc),
        candidate_params=_figure(cand, PARAM_METRICS), incumbent_params=_figure(inc, PARAM_METRICS),
        candidate_steps=_figure(cand, STEP_METRICS), incumbent_steps=_figure(inc, STEP_METRICS))


def allowance(durations: list[float]) -> float:
    """Seconds past the incumbent's median run time that honest noise explains."""
    center = statistics.median(durations)
    spread = 1.4826 * statistics.median(abs(d - center) for d in durations) if len(durations) >= 3 else 0.0
    return max(NOISE_SHARE * center, NOISE_FLOOR_S, NOISE_SPREADS * spread)


def clearly_over(computed: ComputeCost | None) -> bool:
    """Past its allowance by so much that more seeds cannot change the answer: refused before
    the keep rule spends another run on it."""
    return (computed is not None and computed.allowed is not None
            and computed.ratio > 1 + CLEAR_MARGIN * (computed.allowed - 1) and computed.ratio > 1.5)


def refusal(computed: ComputeCost, policy: ComputePolicy, *, won: bool = True) -> str:
    """The reason a candidate is not kept for its compute: a win bought with it (`won`), or
    one refused before the keep rule spent more seeds on it (the figures are on the decision)."""
    what = "a win bought with compute" if won else "not run further: no result could be kept at its compute"
    return (f"not kept: {what}, {computed.ratio:.2f}x the incumbent's run time where program.md's "
            f"compute: {policy} allows {computed.allowed:.2f}x (run-time noise included). Set "
            f"compute: +{max(0.0, computed.ratio - 1):.0%} or free to let keeps spend more")


def _figure(runs: list[RunFinished], names: tuple[str, ...]) -> float | None:
    """The median of a figure the runs print (the first of `names` each has), or None."""
    values = [v for r in runs for v in [_first(r.metrics, names)] if v is not None]
    return statistics.median(values) if values else None


def _first(metrics: Mapping[str, Any], names: tuple[str, ...]) -> float | None:
    for name in names:
        value = metrics.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None
