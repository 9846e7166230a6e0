"""Scoring a pre-registered prediction against what was measured.

A prediction is in metric units as candidate − incumbent. The measured delta comes from the
decision: `effect` is the improvement (positive = better), so for a minimised metric the
measured delta is −effect. The *measured direction* is what the decision's interval shows:
"improve" or "worsen" when the interval excludes zero, else "same". How the scores of a
night add up (calibration) is a view of the record: `agent.record.state.calibration`.
"""
from __future__ import annotations

from agent.record.events import Decision, Direction, Prediction, Score


def measured_direction(interval: tuple[float, float] | None, effect: float) -> str:
    if interval is None:
        return "improve" if effect > 0 else "worsen" if effect < 0 else "same"
    lo, hi = interval
    if lo > 0:
        return "improve"
    if hi < 0:
        return "worsen"
    return "same"


def score_prediction(prediction: Prediction | None, decision: Decision | None,
                     direction: Direction) -> Score | None:
    """Score one prediction; None when there is nothing to score (no prediction, no effect)."""
    if prediction is None or decision is None or decision.effect is None:
        return None
    effect = float(decision.effect)
    delta = Direction(direction).sign * effect
    lo, hi = prediction.interval
    seen = measured_direction(decision.interval, effect)
    return Score(
        measured_delta=delta,
        measured_direction=seen,
        direction_right=prediction.direction == seen,
        covered=float(lo) <= delta <= float(hi),
        error=delta - float(prediction.expected_delta),
        confidence=float(prediction.confidence),
    )
