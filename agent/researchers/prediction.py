"""A pre-registered prediction from a researcher's raw input, validated.

Models send predictions as loosely typed JSON (numbers as strings, the object itself as a
JSON string); `parse_prediction` accepts those forms and names every problem it finds, so
one reply to the model can say everything that needs fixing.
"""
from __future__ import annotations

import json
import math
from typing import Any

from agent.record.records import Direction
from agent.researchers.base import Prediction


def _number(value: Any) -> float | None:
    """A finite float from a JSON number or numeric string; None when it is not one."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def parse_prediction(raw: Any, metric_direction: Direction) -> tuple[Prediction | None, list[str]]:
    """Validate a raw prediction. Returns (prediction, []) or (None, every problem found).

    Usable means: a known direction; finite expected_delta inside a finite interval lo < hi;
    confidence strictly between 0 and 1; a rationale; and a sign that agrees with the
    direction for this metric (improve is negative when minimising, positive when
    maximising; `same` needs an interval that contains 0).
    """
    if isinstance(raw, str):  # models sometimes send the nested object as a JSON string
        try:
            raw = json.loads(raw)
        except ValueError:
            pass
    if not isinstance(raw, dict):
        return None, ["prediction is missing; it must be an object with direction, "
                      "expected_delta, interval, confidence and rationale"]
    problems: list[str] = []
    direction = raw.get("direction")
    if direction not in ("improve", "worsen", "same"):
        problems.append(f"prediction.direction must be improve, worsen or same, got {direction!r}")
    delta = _number(raw.get("expected_delta"))
    if delta is None:
        problems.append(f"prediction.expected_delta must be a finite number, got {raw.get('expected_delta')!r}")
    interval = raw.get("interval")
    lo = hi = None
    if isinstance(interval, str):
        try:
            interval = json.loads(interval)
        except ValueError:
            pass
    if isinstance(interval, (list, tuple)) and len(interval) == 2:
        lo, hi = _number(interval[0]), _number(interval[1])
    if lo is None or hi is None or not lo < hi:
        problems.append(f"prediction.interval must be [lo, hi] of finite numbers with lo < hi, got {interval!r}")
        lo = hi = None
    confidence = _number(raw.get("confidence"))
    if confidence is None or not 0.0 < confidence < 1.0:
        problems.append(f"prediction.confidence must be a number strictly between 0 and 1, got {raw.get('confidence')!r}")
    rationale = raw.get("rationale")
    if not isinstance(rationale, str) or not rationale.strip():
        problems.append("prediction.rationale must be a non-empty string")
    if delta is not None and lo is not None and not lo <= delta <= hi:
        problems.append(f"prediction.expected_delta {delta} lies outside its interval [{lo}, {hi}]")
    if delta is not None and direction in ("improve", "worsen"):
        metric_direction = Direction(metric_direction)
        better = metric_direction.better(delta, 0.0)
        if (direction == "improve") != better or delta == 0:
            sign = "negative" if (direction == "improve") == metric_direction.lower_is_better else "positive"
            problems.append(
                f"prediction.direction {direction!r} needs a {sign} expected_delta for a metric "
                f"to {metric_direction} (delta = candidate - incumbent), got {delta}"
            )
    if direction == "same" and lo is not None and not lo <= 0.0 <= hi:
        problems.append(f"prediction.direction 'same' needs an interval containing 0, got [{lo}, {hi}]")
    if problems:
        return None, problems
    return Prediction(
        direction=direction, expected_delta=delta, interval=(lo, hi),
        confidence=confidence, rationale=rationale.strip(),
    ), []
