"""The opening: learning rate first.

The first rule of tuning in the seeds (the learning rate is the most impactful setting: tune it
before anything else), as the LLM-free researcher's first moves of a night. Each learning-rate
knob of the target, in the order the target lists them (list the main one first), is
line-searched from the incumbent by factors of two: doubled while doubling is kept, else halved
while halving is kept; then the next knob. A script's defaults were tuned for some budget and
machine; the best learning rate moves with the number of steps a run gets, so it is the first
setting a new budget or a new machine changes.

A knob is a learning rate when its name says so: an `lr` word (`LR`, `MUON_LR`, `lr_head`,
`--lr`) or `learning_rate` (`learningRate`), searched as a float or on a log scale.

The search is a pure function of the opening's earlier steps and their verdicts, so a resumed
night goes on where it stopped. A step still in flight (the researcher prepares the next
proposal while runs train) moves the opening on to the next knob instead of waiting for its
verdict.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from agent.target.knobs import Knob, round_sig

FACTOR = 2.0
DIGITS = 3


@dataclass(frozen=True)
class Step:
    """One move of the opening: which knob, which way, and its verdict (None: in flight)."""

    knob: str
    up: bool
    verdict: str | None


@dataclass(frozen=True)
class Move:
    """The opening's next proposal: `knob` to `value`, one factor `up` or down."""

    knob: Knob
    up: bool
    value: Any


def is_learning_rate(knob: Knob) -> bool:
    """Whether the knob's name says it is a learning rate (and it is searched as a number)."""
    if knob.kind not in ("float", "log"):
        return False
    name = knob.name.lstrip("-")
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    words = re.split(r"[^a-z0-9]+", snake)
    return "lr" in words or "learning_rate" in snake.replace("-", "_")


def next_move(knobs: Iterable[Knob], incumbent: dict[str, Any], steps: list[Step]) -> Move | None:
    """The opening's next move from the incumbent, given its steps so far (oldest first); None
    when every learning rate is searched or in flight."""
    for knob in knobs:
        if not is_learning_rate(knob):
            continue
        mine = [s for s in steps if s.knob == knob.name]
        if any(s.verdict is None for s in mine):
            continue
        for up in _directions(mine):
            value = _moved(knob, incumbent[knob.name], up)
            if value is not None:
                return Move(knob, up, value)
    return None


def _directions(steps: list[Step]) -> tuple[bool, ...]:
    """The ways left to try for one knob, in order: up first; on along a way while it keeps;
    down after an up that never kept; nothing once a way has kept and then stopped keeping."""
    if not steps:
        return (True, False)
    last = steps[-1]
    if last.verdict == "keep":
        return (last.up,)
    if any(s.up == last.up and s.verdict == "keep" for s in steps):
        return ()   # the way kept, then stopped: the line search found its turn
    if any(not s.up for s in steps):
        return ()
    return (False,)


def _moved(knob: Knob, value: Any, up: bool) -> Any:
    """`value` times or over the factor, inside the knob's space; None where it cannot move."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    moved = round_sig(value * FACTOR if up else value / FACTOR, DIGITS)
    moved = min(max(moved, knob.low), knob.high)
    return moved if (moved > value if up else moved < value) else None
