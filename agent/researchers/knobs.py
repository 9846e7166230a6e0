"""Knobs: ALL_CAPS constants in the target, annotated with a search space at the end of the line.

    LR = 3e-3              # peak learning rate  # search: log(1e-4, 3e-2)
    N_LAYER = 4            # transformer blocks  # search: int(2, 8)
    OPTIMIZER = "adamw"    # search: choice("adamw", "muon")

Grammar of the annotation (the last thing in the line's comment):
    search: float(lo, hi)        uniform float in [lo, hi]
    search: log(lo, hi)          log-uniform float, 0 < lo < hi
    search: int(lo, hi)          integer in [lo, hi], both ints
    search: choice(a, b, ...)    one of these literals (numbers, strings, True/False/None)

The assignment is found with `ast` (a module-level, one-line assignment whose value is a
literal), the comment with `tokenize` (so `#` inside strings never counts). `parse_knobs`
raises `KnobError` naming the line and the fix. `set_knobs` rewrites only the value text,
keeping the comment in its column where it can.

A knob's current value may lie outside its search space (someone edited it by hand); that is
not an error here: `Knob.contains` tells, and the researcher decides what to do.
"""
from __future__ import annotations

import ast
import io
import math
import re
import tokenize
from dataclasses import dataclass
from typing import Any, Literal

SpaceKind = Literal["float", "log", "int", "choice"]
SPACE_KINDS: tuple[str, ...] = ("float", "log", "int", "choice")

_ANNOTATION = re.compile(r"#\s*search\s*:\s*(?P<rest>.*)$")
_KIND_CALL = re.compile(r"^(?P<kind>[A-Za-z_]\w*)\s*\((?P<args>.*)\)\s*$")
_KNOB_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


class KnobError(ValueError):
    """A knob annotation or assignment is malformed; the message names the line and the fix."""


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


def parse_knobs(source: str) -> list[Knob]:
    """Every annotated knob in `source`, in line order. Raises KnobError on any malformed one."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise KnobError(f"line {exc.lineno}: the target does not parse as Python: {exc.msg}") from exc
    assignments = _module_assignments(tree)
    knobs: list[Knob] = []
    seen: dict[str, int] = {}
    for line, comment in _comments(source):
        match = _ANNOTATION.search(comment)
        if match is None:
            continue
        kind, low, high, choices = _parse_space(match.group("rest"), line)
        node = assignments.get(line)
        if node is None:
            raise KnobError(
                f"line {line}: a '# search:' annotation must end a one-line module-level "
                f"assignment such as `LR = 3e-3  # search: log(1e-4, 3e-2)`"
            )
        name = _target_name(node, line)
        if name in seen:
            raise KnobError(f"line {line}: duplicate knob {name} (first annotated on line {seen[name]})")
        value = _literal_value(node, name, line)
        _check_value_type(name, kind, value, line)
        seen[name] = line
        doc = comment[: match.start()].strip().lstrip("#").strip()
        knobs.append(Knob(name, value, kind, line, low, high, choices, doc))
    _check_single_assignment(tree, seen)
    return knobs


def knob_values(source: str) -> dict[str, Any]:
    """{name: value} of the knobs in `source`."""
    return {k.name: k.value for k in parse_knobs(source)}


def set_knobs(source: str, values: dict[str, Any]) -> str:
    """`source` with the named knobs' values replaced. Only the value text changes; the comment
    keeps its column when the new text fits (at least two spaces before it otherwise).
    Float/log knobs are written as floats, int knobs as ints (an integral float is accepted)."""
    knobs = {k.name: k for k in parse_knobs(source)}
    unknown = sorted(set(values) - set(knobs))
    if unknown:
        raise KnobError(f"no annotated knob named {', '.join(unknown)}; known: {', '.join(knobs) or 'none'}")
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    assignments = _module_assignments(tree)
    for name, new_value in values.items():
        knob = knobs[name]
        node = assignments[knob.line]
        raw = lines[knob.line - 1].encode("utf-8")   # ast column offsets count UTF-8 bytes
        start, end = node.value.col_offset, node.value.end_col_offset
        old_text = raw[start:end].decode("utf-8")
        new_text = _format_for_knob(knob, new_value, old_text)
        rest = raw[end:].decode("utf-8")
        stripped = rest.lstrip(" \t")
        gap = len(rest) - len(stripped)
        if stripped.startswith("#"):
            gap = max(min(gap, 2), gap + len(old_text) - len(new_text))
        lines[knob.line - 1] = raw[:start].decode("utf-8") + new_text + " " * gap + stripped
    return "".join(lines)


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


_ASSIGN_PART = re.compile(r"^(?:set\s+)?(?P<name>[A-Za-z_]\w*)\s*(?:=|:|\bto\b)\s*(?P<value>.+?)$", re.IGNORECASE)
_LEAD_VERB = re.compile(r"^(?:try|test|use|set)\b\s*", re.IGNORECASE)


def parse_assignments(text: str, knobs: list[Knob]) -> dict[str, Any]:
    """Read a human hypothesis that is nothing but knob assignments, e.g. `LR=1e-3`,
    `set N_LAYER to 4`, `try LR = 1e-3, WARMUP_FRAC = 0.1`. Returns {knob: value} with values
    coerced to the knob's type; raises KnobError saying why when the text is anything else
    (then only a researcher that reads prose can test it)."""
    by_name = {k.name: k for k in knobs}
    body = _LEAD_VERB.sub("", text.strip().rstrip(".").strip())
    parts = [p for p in re.split(r"\s*(?:,|;|\band\b)\s*", body) if p]
    if not parts:
        raise KnobError("empty hypothesis")
    result: dict[str, Any] = {}
    for part in parts:
        match = _ASSIGN_PART.match(part.strip())
        if match is None:
            raise KnobError(f"{part!r} is not a knob assignment like `LR=1e-3`")
        knob = by_name.get(match.group("name")) or by_name.get(match.group("name").upper())
        if knob is None:
            raise KnobError(f"{match.group('name')!r} is not an annotated knob")
        result[knob.name] = _coerce(knob, match.group("value").strip())
    return result


def _coerce(knob: Knob, text: str) -> Any:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        # a bare word names a string option: `set OPTIMIZER to muon`
        words = [c for c in knob.choices if isinstance(c, str) and c == text]
        if not words:
            raise KnobError(f"{knob.name}: {text!r} is not a literal value") from None
        return words[0]
    if knob.kind == "choice":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KnobError(f"{knob.name} takes a number, got {text!r}")
    if knob.kind == "int":
        if value != int(value):
            raise KnobError(f"{knob.name} is an int knob, got {text!r}")
        return int(value)
    return float(value)


# ---- helpers ----------------------------------------------------------------------------

def _comments(source: str) -> list[tuple[int, str]]:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError) as exc:
        raise KnobError(f"the target cannot be tokenized: {exc}") from exc
    return [(tok.start[0], tok.string) for tok in tokens if tok.type == tokenize.COMMENT]


def _module_assignments(tree: ast.Module) -> dict[int, ast.Assign | ast.AnnAssign]:
    """Module-level one-line assignments, keyed by their line."""
    found: dict[int, ast.Assign | ast.AnnAssign] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            if node.lineno == node.end_lineno:
                found[node.lineno] = node
    return found


def _target_name(node: ast.Assign | ast.AnnAssign, line: int) -> str:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if len(targets) != 1 or not isinstance(targets[0], ast.Name):
        raise KnobError(f"line {line}: a knob assigns exactly one name, e.g. `LR = 3e-3`")
    name = targets[0].id
    if not _KNOB_NAME.match(name):
        raise KnobError(f"line {line}: knob names are ALL_CAPS constants; rename {name!r} (e.g. {name.upper()!r})")
    return name


def _literal_value(node: ast.Assign | ast.AnnAssign, name: str, line: int) -> Any:
    try:
        value = ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise KnobError(
            f"line {line}: the value of knob {name} must be a literal (a number, string, "
            f"True/False/None), not an expression; write the computed value instead"
        ) from None
    return value


def _parse_space(rest: str, line: int) -> tuple[SpaceKind, Any, Any, tuple[Any, ...]]:
    match = _KIND_CALL.match(rest.strip())
    if match is None:
        raise KnobError(
            f"line {line}: cannot read the annotation 'search: {rest.strip()}'; write e.g. "
            f"'# search: log(1e-4, 3e-2)' at the very end of the line"
        )
    kind, arg_text = match.group("kind"), match.group("args")
    if kind not in SPACE_KINDS:
        raise KnobError(f"line {line}: unknown search space kind {kind!r}; use one of {', '.join(SPACE_KINDS)}")
    try:
        args = ast.literal_eval(f"({arg_text},)") if arg_text.strip() else ()
    except (ValueError, SyntaxError):
        raise KnobError(f"line {line}: the arguments of {kind}(...) must be Python literals, got ({arg_text})") from None
    if kind == "choice":
        if len(args) < 2:
            raise KnobError(f"line {line}: choice(...) needs at least two options")
        for arg in args:
            if arg is not None and not isinstance(arg, (bool, int, float, str)):
                raise KnobError(f"line {line}: choice options must be numbers, strings, True/False/None; got {arg!r}")
        if len({(type(a), a) for a in args}) != len(args):
            raise KnobError(f"line {line}: choice(...) lists an option twice")
        return "choice", None, None, tuple(args)
    if len(args) != 2:
        raise KnobError(f"line {line}: {kind}(lo, hi) takes exactly two bounds, got {len(args)}")
    low, high = args
    numeric = all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
    if not numeric:
        raise KnobError(f"line {line}: the bounds of {kind}(lo, hi) must be numbers, got ({arg_text})")
    if kind == "int" and not all(isinstance(a, int) for a in args):
        raise KnobError(f"line {line}: int(lo, hi) needs integer bounds, got ({arg_text}); use float(...) for reals")
    if not low < high:
        raise KnobError(f"line {line}: {kind}(lo, hi) needs lo < hi, got lo={low!r} hi={high!r}")
    if kind == "log" and low <= 0:
        raise KnobError(f"line {line}: log(lo, hi) needs lo > 0, got lo={low!r}; use float(...) to include 0")
    if kind in ("float", "log"):
        low, high = float(low), float(high)
    return kind, low, high, ()


def _check_value_type(name: str, kind: str, value: Any, line: int) -> None:
    if kind == "choice":
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KnobError(f"line {line}: knob {name} has a {kind}(...) space but its value {value!r} is not a number")
    if kind == "int" and not isinstance(value, int):
        raise KnobError(f"line {line}: knob {name} has an int(...) space but its value {value!r} is not an int")


def _check_single_assignment(tree: ast.Module, knob_lines: dict[str, int]) -> None:
    """A knob assigned again at module level would silently override the annotated value."""
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Name) and sub.id in knob_lines and node.lineno != knob_lines[sub.id]:
                    raise KnobError(
                        f"line {node.lineno}: knob {sub.id} (annotated on line {knob_lines[sub.id]}) is "
                        f"assigned again; a knob is set once, on its annotated line"
                    )


def _format_for_knob(knob: Knob, value: Any, old_text: str) -> str:
    if knob.kind in ("float", "log"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise KnobError(f"knob {knob.name} (line {knob.line}) takes a number, got {value!r}")
        return format_float(float(value))
    if knob.kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise KnobError(f"knob {knob.name} (line {knob.line}) takes an int, got {value!r}")
        value = int(value)
        return f"{value:_}" if "_" in old_text else str(value)
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise KnobError(f"knob {knob.name} (line {knob.line}) takes a number, string, True/False/None; got {value!r}")
    if isinstance(value, str) and old_text.startswith('"') and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return format_value(value)
