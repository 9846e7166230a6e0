"""The search-space grammar of a knob, shared by both ways of naming knobs.

    float(lo, hi)        uniform float in [lo, hi]
    log(lo, hi)          log-uniform float, 0 < lo < hi
    int(lo, hi)          integer in [lo, hi], both ints
    choice(a, b, ...)    one of these literals (numbers, strings, True/False/None)

`Knob` is one searchable value with its space and where its text lies in the target;
`parse_space` reads a space; the format helpers write values compactly (3e-3, 0.05).
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

SpaceKind = Literal["float", "log", "int", "choice"]
SPACE_KINDS: tuple[str, ...] = ("float", "log", "int", "choice")

SPACE_CALL = re.compile(r"^(?P<kind>[A-Za-z_]\w*)\s*\((?P<args>.*)\)\s*$")


class KnobError(ValueError):
    """A knob annotation or assignment is malformed; the message names the line and the fix."""


class DeclaredKnobError(KnobError):
    """A knob of program.md's `knobs:` is wrong; `knob` is its name there."""

    def __init__(self, knob: str, message: str) -> None:
        super().__init__(message)
        self.knob = knob


@dataclass(frozen=True)
class Knob:
    """One searchable constant. `low`/`high` for float/log/int, `choices` for choice."""

    name: str
    value: Any
    kind: SpaceKind
    line: int                        # 1-based line of the assignment
    low: float | int | None = None
    high: float | int | None = None
    choices: tuple[Any, ...] = ()
    doc: str = ""                    # the comment text before the annotation, if any
    start: int = -1                  # the value's text is source[start:end] (characters)
    end: int = -1
    syntax: str = "python"           # "python" | "yaml": how a new value is written

    def contains(self, value: Any) -> bool:
        """Whether `value` lies in the search space (type-strict: True is not 1)."""
        if self.kind == "choice":
            return any(same_value(value, c) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "int" and not isinstance(value, int):
            return False
        return self.low <= value <= self.high

    def normalize(self, value: Any) -> float:
        """Position of a numeric value in the space as a fraction of its range (0 at lo, 1 at hi,
        on a log scale for `log`); values outside the range map outside [0, 1]. Not defined for
        choice knobs (compare those by equality)."""
        if self.kind == "choice":
            raise ValueError(f"{self.name} is a choice knob; compare choices by equality")
        if self.kind == "log":
            if value <= 0:
                return -1.0   # below any positive value: far from the whole space
            return (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (value - self.low) / (self.high - self.low)

    def describe_space(self) -> str:
        if self.kind == "choice":
            return f"choice({', '.join(format_value(c) for c in self.choices)})"
        return f"{self.kind}({format_value(self.low)}, {format_value(self.high)})"


def parse_space(text: str) -> tuple[SpaceKind, Any, Any, tuple[Any, ...]]:
    """`float(lo, hi)`, `log(lo, hi)`, `int(lo, hi)` or `choice(a, b, ...)` -> (kind, low,
    high, choices). Raises KnobError saying what is wrong (without a location)."""
    match = SPACE_CALL.match(str(text).strip())
    if match is None:
        raise KnobError(f"cannot read the search space {str(text).strip()!r}; write e.g. "
                        f"log(1e-4, 3e-2), float(0.0, 0.3), int(2, 8) or choice(64, 128)")
    kind, arg_text = match.group("kind"), match.group("args")
    if kind not in SPACE_KINDS:
        raise KnobError(f"unknown search space kind {kind!r}; use one of {', '.join(SPACE_KINDS)}")
    try:
        args = ast.literal_eval(f"({arg_text},)") if arg_text.strip() else ()
    except (ValueError, SyntaxError):
        raise KnobError(f"the arguments of {kind}(...) must be Python literals, got ({arg_text})") from None
    if kind == "choice":
        if len(args) < 2:
            raise KnobError("choice(...) needs at least two options")
        for arg in args:
            if arg is not None and not isinstance(arg, (bool, int, float, str)):
                raise KnobError(f"choice options must be numbers, strings, True/False/None; got {arg!r}")
        if len({(type(a), a) for a in args}) != len(args):
            raise KnobError("choice(...) lists an option twice")
        return "choice", None, None, tuple(args)
    if len(args) != 2:
        raise KnobError(f"{kind}(lo, hi) takes exactly two bounds, got {len(args)}")
    low, high = args
    numeric = all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
    if not numeric:
        raise KnobError(f"the bounds of {kind}(lo, hi) must be numbers, got ({arg_text})")
    if kind == "int" and not all(isinstance(a, int) for a in args):
        raise KnobError(f"int(lo, hi) needs integer bounds, got ({arg_text}); use float(...) for reals")
    if not low < high:
        raise KnobError(f"{kind}(lo, hi) needs lo < hi, got lo={low!r} hi={high!r}")
    if kind == "log" and low <= 0:
        raise KnobError(f"log(lo, hi) needs lo > 0, got lo={low!r}; use float(...) to include 0")
    if kind in ("float", "log"):
        low, high = float(low), float(high)
    return kind, low, high, ()


def format_value(value: Any) -> str:
    """Compact literal text for a value: floats in the shortest form that round-trips,
    scientific (`3e-3`) when small or large, plain (`0.05`, `1.5`) otherwise."""
    if isinstance(value, float):
        return format_float(value)
    return repr(value)


def format_float(value: float) -> str:
    if not math.isfinite(value):
        raise KnobError(f"cannot write non-finite float {value!r} as a knob value")
    if value == 0.0:
        return "0.0"
    plain = repr(value)
    if 1e-2 <= abs(value) < 1e5 and "e" not in plain:
        return plain
    for digits in range(0, 17):
        text = f"{value:.{digits}e}"
        if float(text) == value:
            break
    mantissa, exponent = text.split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def same_value(a: Any, b: Any) -> bool:
    """Equal as knob values: same type, except that ints and floats compare by value
    (True is not 1, "1" is not 1)."""
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, float)) and isinstance(b, (int, float))
        and not isinstance(a, bool) and not isinstance(b, bool) and a == b
    )


def round_sig(value: float, digits: int = 3) -> float:
    """`value` rounded to `digits` significant digits (knob values a person can read)."""
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits - 1}e}")


def format_sig(value: float, digits: int = 3) -> str:
    """`value` signed, to `digits` significant digits, in plain decimals while that stays
    short (+0.0031, -12.3, +1230), else scientific (+3.1e-7): a delta a person reads, which
    `:+.3g` can leave as "+0" beside a sentence's full stop."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}".replace("-0", "0")
    rounded = round_sig(value, digits)
    exponent = math.floor(math.log10(abs(rounded)))
    if not -5 <= exponent < 6:
        return ("+" if rounded > 0 else "") + format_float(rounded)
    text = f"{rounded:+.{max(digits - 1 - exponent, 0)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
