"""Scoring pre-registered predictions against what was measured, and calibration over a night.

A prediction is in metric units as candidate − incumbent. The measured delta comes from the
decision: `effect` is the improvement (positive = better), so for a minimised metric the
measured delta is −effect. The *measured direction* is what the decision's interval shows:
"improve" or "worsen" when the interval excludes zero, else "same".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class Score:
    measured_delta: float
    measured_direction: str
    direction_right: bool
    covered: bool             # the prediction's interval held the measured delta
    error: float              # measured − expected delta
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measured_direction(interval: tuple[float, float] | list[float] | None, effect: float) -> str:
    if interval is None:
        return "improve" if effect > 0 else "worsen" if effect < 0 else "same"
    lo, hi = interval
    if lo > 0:
        return "improve"
    if hi < 0:
        return "worsen"
    return "same"


def score_prediction(prediction: dict[str, Any] | None, decision: dict[str, Any],
                     direction: str) -> Score | None:
    """Score one prediction; None when there is nothing to score (no prediction, no effect)."""
    if not prediction or decision.get("effect") is None:
        return None
    effect = float(decision["effect"])
    delta = -effect if direction == "minimize" else effect
    seen = measured_direction(decision.get("interval"), effect)
    lo, hi = prediction["interval"]
    return Score(
        measured_delta=delta,
        measured_direction=seen,
        direction_right=prediction["direction"] == seen,
        covered=float(lo) <= delta <= float(hi),
        error=delta - float(prediction["expected_delta"]),
        confidence=float(prediction.get("confidence", 0.8)),
    )


def calibration(scores: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Running calibration: how often intervals covered vs. the confidence claimed."""
    scores = [s for s in scores if s]
    if not scores:
        return {"n": 0}
    n = len(scores)
    return {
        "n": n,
        "direction_accuracy": sum(s["direction_right"] for s in scores) / n,
        "coverage": sum(s["covered"] for s in scores) / n,
        "claimed_confidence": sum(s["confidence"] for s in scores) / n,
        "mean_abs_error": sum(abs(s["error"]) for s in scores) / n,
    }
