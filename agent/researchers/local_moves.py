"""Local moves: a step from the incumbent, inside a trust region that follows the verdicts.

The LLM-free researcher starts a night near the incumbent, where a newcomer's first
experiments should be (the defaults of a training script are usually good; a random draw over
a whole search space usually is not). A move changes one knob by a step of `radius` of its
range (on a log scale for `log` knobs), up or down; an int knob moves by at least 1; a choice
knob moves to a neighbouring option (further, when the radius is large). The radius is a
trust region: it grows on a keep (the neighbourhood pays, look further) and shrinks on
anything else (discards, failures: look closer), within [RADIUS_MIN, RADIUS_MAX]. It is a
pure function of the verdicts so far, so a resumed night continues with the same radius.
"""
from __future__ import annotations

import math
import random
from typing import Any, Iterable

from agent.target.knobs import Knob, round_sig, same_value

RADIUS_START, RADIUS_MIN, RADIUS_MAX = 0.15, 0.03, 0.5
GROW, SHRINK = 1.6, 0.75
DIGITS = 3


def trust_radius(verdicts: Iterable[str]) -> float:
    """The radius after these verdicts of earlier local moves, oldest first."""
    radius = RADIUS_START
    for verdict in verdicts:
        radius = min(RADIUS_MAX, radius * GROW) if verdict == "keep" else max(RADIUS_MIN, radius * SHRINK)
    return radius


def local_move(knob: Knob, value: Any, radius: float, rng: random.Random,
               up: bool | None = None) -> Any:
    """A value of `knob` about `radius` of its range away from `value` (upwards when `up`,
    downwards when not, either when None), inside its space and different from `value`: the
    other way at a bound; None when the space has no other value."""
    up = rng.random() < 0.5 if up is None else up
    if knob.kind == "choice":
        options = list(knob.choices)
        if len(options) < 2:
            return None
        here = next((i for i, c in enumerate(options) if same_value(c, value)), 0)
        step = max(1, round(radius * (len(options) - 1)))
        for index in ((here + step, here - step) if up else (here - step, here + step)):
            if 0 <= index < len(options):
                return options[index]
        return options[min(max(here + (1 if up else -1), 0), len(options) - 1)]
    if knob.kind == "int":
        step = max(1, round(radius * (knob.high - knob.low)))
        for moved in ((value + step, value - step) if up else (value - step, value + step)):
            if knob.low <= moved <= knob.high:
                return int(moved)
        return None
    position = _position(knob, value)
    for target in ((position + radius, position - radius) if up else (position - radius, position + radius)):
        target = min(max(target, 0.0), 1.0)
        moved = min(max(round_sig(_value_at(knob, target), DIGITS), knob.low), knob.high)
        if not same_value(moved, value):
            return moved
    return None


def _position(knob: Knob, value: Any) -> float:
    try:
        return min(max(float(knob.normalize(value)), 0.0), 1.0)
    except (TypeError, ValueError):
        return 0.5


def _value_at(knob: Knob, position: float) -> float:
    if knob.kind == "log":
        return math.exp(math.log(knob.low) + position * (math.log(knob.high) - math.log(knob.low)))
    return knob.low + position * (knob.high - knob.low)
