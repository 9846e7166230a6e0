"""Knobs: assignments in the target that the Optuna researcher may change, with a search space.

Two ways to name them. In the target itself, a constant annotated at the end of its line:

    LR = 3e-3              # peak learning rate  # search: log(1e-4, 3e-2)
    N_LAYER = 4            # transformer blocks  # search: int(2, 8)
    OPTIMIZER = "adamw"    # search: choice("adamw", "muon")

Or, without touching the user's files, program.md's `knobs:` (`find_knobs(declared=...)`):
a name -> space mapping over assignments where the user keeps them, in any case:

    knobs:
      learning_rate: log(1e-4, 1e-2)    # `learning_rate = 6e-4` at module level
      TrainConfig.lr: log(1e-5, 1e-3)   # a dataclass field default (`lr` alone when unique)
      optimizer.beta2: float(0.9, 0.999)  # a key of a YAML target (dotted for nesting)

Grammar of the annotation (the last thing in the line's comment):
    search: float(lo, hi)        uniform float in [lo, hi]
    search: log(lo, hi)          log-uniform float, 0 < lo < hi
    search: int(lo, hi)          integer in [lo, hi], both ints
    search: choice(a, b, ...)    one of these literals (numbers, strings, True/False/None)

The assignment is found with `ast` (a module-level, one-line assignment whose value is a
literal, or a class-level one for a field default), the comment with `tokenize` (so `#`
inside strings never counts), a YAML key with the YAML composer (its scalar's position).
`parse_knobs` / `find_knobs` raise `KnobError` naming the line and a fix that keeps the
script working (a declared knob's error is a `DeclaredKnobError` naming the knob, so
program.md can point at its line). `set_knobs` rewrites only the value text, keeping the
comment in its column where it can, and every other byte of the file.

A knob's current value may lie outside its search space (someone edited it by hand); that is
not an error here: `Knob.contains` tells, and the researcher decides what to do.
"""
from __future__ import annotations

import ast
import difflib
import io
import json
import math
import re
import tokenize
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping

import yaml

SpaceKind = Literal["float", "log", "int", "choice"]
SPACE_KINDS: tuple[str, ...] = ("float", "log", "int", "choice")

_ANNOTATION = re.compile(r"#\s*search\s*:\s*(?P<rest>.*)$")
_KIND_CALL = re.compile(r"^(?P<kind>[A-Za-z_]\w*)\s*\((?P<args>.*)\)\s*$")
_YAML_SUFFIXES = (".yaml", ".yml", ".json")   # JSON is YAML: same finder, same editor


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
        start, end = _value_span(source, node.value)
        knobs.append(Knob(name, value, kind, line, low, high, choices, doc, start, end))
    _check_single_assignment(tree, seen)
    return knobs


def is_yaml(path: str) -> bool:
    return path.lower().endswith(_YAML_SUFFIXES)


def find_knobs(source: str, *, path: str = "", declared: Mapping[str, str] | None = None) -> list[Knob]:
    """Every knob of the target `path` (its text is `source`), in line order: program.md's
    `declared` (name -> space, e.g. {"learning_rate": "log(1e-4, 1e-2)"}) when given, which
    replace the annotations; else, in a Python target, its `# search:` annotations. Raises DeclaredKnobError for a declared knob that cannot be edited (not
    found, not a literal, assigned twice), KnobError for a malformed annotation."""
    declared = dict(declared or {})
    if is_yaml(path):
        found = [_yaml_knob(source, path, name, space) for name, space in declared.items()]
    elif declared and path and not path.endswith(".py"):
        name = next(iter(declared))
        raise DeclaredKnobError(name, f"knobs can be edited in a Python (.py), YAML (.yaml, .yml) "
                                      f"or JSON (.json) target, not {path}; point target at the "
                                      f"config file that assigns them")
    else:
        if not declared:
            return parse_knobs(source)
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            raise DeclaredKnobError(next(iter(declared)), f"{path or 'the target'} does not parse "
                                    f"as Python (line {exc.lineno}: {exc.msg})") from None
        found = [_python_knob(source, tree, path, name, space) for name, space in declared.items()]
    return sorted(found, key=lambda k: (k.line, k.start))


def knob_values(source: str, *, path: str = "", declared: Mapping[str, str] | None = None) -> dict[str, Any]:
    """{name: value} of the knobs in `source`."""
    return {k.name: k.value for k in find_knobs(source, path=path, declared=declared)}


def set_knobs(source: str, values: dict[str, Any], *, path: str = "",
              declared: Mapping[str, str] | None = None) -> str:
    """`source` with the named knobs' values replaced. Only the value text changes; a comment
    after it keeps its column when the new text fits (at least two spaces before it
    otherwise); every other byte of the file stays. Float/log knobs are written as floats,
    int knobs as ints (an integral float is accepted), in the target's syntax."""
    knobs = {k.name: k for k in find_knobs(source, path=path, declared=declared)}
    unknown = sorted(set(values) - set(knobs))
    if unknown:
        raise KnobError(f"no annotated knob named {', '.join(unknown)}; known: {', '.join(knobs) or 'none'}")
    for name in sorted(values, key=lambda n: -knobs[n].start):   # from the end: offsets hold
        knob = knobs[name]
        old_text = source[knob.start:knob.end]
        new_text = _format_for_knob(knob, values[name], old_text)
        line_end = source.find("\n", knob.end)
        line_end = len(source) if line_end < 0 else line_end
        rest = source[knob.end:line_end]
        stripped = rest.lstrip(" \t")
        gap = len(rest) - len(stripped)
        if stripped.startswith("#"):
            gap = max(min(gap, 2), gap + len(old_text) - len(new_text))
        source = source[:knob.start] + new_text + " " * gap + stripped + source[line_end:]
    return source


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


# ---- declared knobs: program.md's `knobs:` over assignments and YAML keys -------------------

def _declared_space(name: str, space: Any) -> tuple[SpaceKind, Any, Any, tuple[Any, ...]]:
    try:
        return parse_space(str(space))
    except KnobError as exc:
        raise DeclaredKnobError(name, str(exc)) from None


def _python_knob(source: str, tree: ast.Module, path: str, name: str, space: Any) -> Knob:
    kind, low, high, choices = _declared_space(name, space)
    where = path or "the target"
    owner, _, field = name.rpartition(".")
    module, fields = _named_assignments(tree)
    if owner:
        found = [node for cls, node in fields if cls == owner and _assigned_name(node) == field]
    else:
        found = [node for node in module if _assigned_name(node) == field] or \
                [node for _, node in fields if _assigned_name(node) == field]
    if not found:
        known = sorted({_assigned_name(n) for n in module} | {f"{c}.{_assigned_name(n)}" for c, n in fields}
                       - {None})
        close = difflib.get_close_matches(name, known, n=1) or difflib.get_close_matches(
            name.lower(), [k.lower() for k in known], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise DeclaredKnobError(name, (
            f"{where} has no assignment `{field} = ...` at module level"
            f"{f' in class {owner}' if owner else ' or as a class field default'}{hint} "
            f"(names assigned there: {', '.join(known[:20]) or 'none'}{' ...' if len(known) > 20 else ''}); "
            f"a knob's name is the name in the file, in its own case"))
    if len(found) > 1:
        lines = ", ".join(str(n.lineno) for n in found)
        raise DeclaredKnobError(name, (
            f"{where} assigns {field} on lines {lines}; the researcher can change only one "
            f"assignment and the last one wins: name a file where it is set once (such as the "
            f"config file) as the target, or write Class.{field} for a class field"))
    node = found[0]
    value_node = node.value
    if isinstance(value_node, ast.Call) and _is_field_call(value_node):   # field(default=5e-5, ...)
        value_node = next((k.value for k in value_node.keywords if k.arg == "default"), None)
        if value_node is None:
            raise DeclaredKnobError(name, (
                f"{where}:{node.lineno}: {field} = field(...) has no default=...; the researcher "
                f"rewrites a literal default: drop the knob, or name a field with default=<value>"))
    if value_node.lineno != value_node.end_lineno:
        raise DeclaredKnobError(name, (
            f"{where}:{node.lineno}: the value of {field} spans several lines; the researcher "
            f"rewrites one-line literal values: drop the knob, or put the value on one line"))
    try:
        value = ast.literal_eval(value_node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        text = ast.get_source_segment(source, value_node) or "..."
        raise DeclaredKnobError(name, (
            f"{where}:{value_node.lineno}: {field} = {text} is an expression, not a literal; the "
            f"researcher can only rewrite a literal value: drop the knob, or (if you may edit "
            f"the file) write the value it computes there")) from None
    _check_declared_type(name, kind, value, f"{where}:{value_node.lineno}")
    start, end = _value_span(source, value_node)
    return Knob(name, value, kind, value_node.lineno, low, high, choices, "", start, end)


def _is_field_call(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Name) and func.id == "field") or (
        isinstance(func, ast.Attribute) and func.attr == "field")


def _named_assignments(tree: ast.Module) -> tuple[list[ast.stmt], list[tuple[str, ast.stmt]]]:
    """(module-level assignments, (class name, class-level assignment) of top-level classes)."""
    def assigns(body: list[ast.stmt]) -> list[ast.stmt]:
        return [n for n in body if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
                and _assigned_name(n) is not None]
    fields = [(node.name, sub) for node in tree.body if isinstance(node, ast.ClassDef)
              for sub in assigns(node.body)]
    return assigns(tree.body), fields


def _assigned_name(node: ast.stmt) -> str | None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
        return targets[0].id
    return None


def _yaml_knob(source: str, path: str, name: str, space: Any) -> Knob:
    kind, low, high, choices = _declared_space(name, space)
    try:
        node = yaml.compose(source, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise DeclaredKnobError(name, f"{path} is not valid YAML ({exc}); the knobs of a YAML "
                                      f"target are its keys") from None
    trail: list[str] = []
    for part in name.split("."):
        if not isinstance(node, yaml.MappingNode):
            raise DeclaredKnobError(name, f"{path}: {'.'.join(trail) or 'the file'} is not a "
                                          f"mapping, so it has no key {part!r}")
        matches = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part]
        if not matches:
            known = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)]
            close = difflib.get_close_matches(part, known, n=1)
            hint = f"; did you mean {'.'.join(trail + [close[0]])!r}?" if close else ""
            raise DeclaredKnobError(name, (
                f"{path} has no key {'.'.join(trail + [part])!r}{hint} (keys "
                f"{'under ' + '.'.join(trail) if trail else 'at the top'}: {', '.join(known) or 'none'}); "
                f"nested keys are written with dots, like optimizer.lr"))
        if len(matches) > 1:
            raise DeclaredKnobError(name, f"{path} gives the key {'.'.join(trail + [part])!r} "
                                          f"twice; keep one")
        trail.append(part)
        node = matches[0][1]
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.ScalarNode) or node.style in ("|", ">"):
        raise DeclaredKnobError(name, (
            f"{path}:{line}: {name} holds a {'list or mapping' if not isinstance(node, yaml.ScalarNode) else 'block text'}, "
            f"not one value; name the key of a number or word inside it (like {name}.lr)"))
    start, end = node.start_mark.index, node.end_mark.index
    value = yaml.safe_load(source[start:end])
    if kind != "choice" and isinstance(value, str) and node.style is None:
        try:   # YAML 1.1 reads 3e-4 (no dot) as text; the user's loader may read a number
            value = int(value) if kind == "int" else float(value)
        except ValueError:
            pass
    _check_declared_type(name, kind, value, f"{path}:{line}")
    return Knob(name, value, kind, line, low, high, choices, "", start, end, "yaml")


def _check_declared_type(name: str, kind: str, value: Any, where: str) -> None:
    if kind == "choice":
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DeclaredKnobError(name, f"{where}: {name} is {value!r}, not a number, but its space "
                                      f"is {kind}(...); use choice(...) for words")
    if kind == "int" and not isinstance(value, int):
        raise DeclaredKnobError(name, f"{where}: {name} is {value!r}, not a whole number, but its "
                                      f"space is int(...); use float(...) or log(...)")


def _value_span(source: str, node: ast.expr) -> tuple[int, int]:
    """Character offsets of an expression (an assignment's value) in `source` (ast counts
    UTF-8 bytes)."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:
        return starts[lineno - 1] + len(lines[lineno - 1].encode("utf-8")[:col].decode("utf-8"))
    return offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)


def _format_yaml(knob: Knob, value: Any, old_text: str) -> str:
    old = old_text.strip()
    if knob.kind in ("float", "log") or (isinstance(value, float) and knob.kind == "choice"):
        text = format_float(float(value))
        if "e" in text and not re.fullmatch(r"[-+]?\d+e[-+]?\d+", old):
            mantissa, exponent = text.split("e")   # YAML 1.1 floats need a dot and a signed exponent
            text = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent if exponent.startswith('-') else '+' + exponent}"
        return text
    if knob.kind == "int" or (isinstance(value, int) and not isinstance(value, bool)):
        return str(int(value))
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    text = str(value)
    if old.startswith("'"):
        return "'" + text.replace("'", "''") + "'"
    if old.startswith('"') or yaml.safe_load(text) != text or not text or text != text.strip():
        return json.dumps(text)
    return text


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
    return targets[0].id


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
    if _KIND_CALL.match(rest.strip()) is None:
        raise KnobError(
            f"line {line}: cannot read the annotation 'search: {rest.strip()}'; write e.g. "
            f"'# search: log(1e-4, 3e-2)' at the very end of the line"
        )
    try:
        return parse_space(rest)
    except KnobError as exc:
        raise KnobError(f"line {line}: {exc}") from None


def parse_space(text: str) -> tuple[SpaceKind, Any, Any, tuple[Any, ...]]:
    """`float(lo, hi)`, `log(lo, hi)`, `int(lo, hi)` or `choice(a, b, ...)` -> (kind, low,
    high, choices). Raises KnobError saying what is wrong (without a location)."""
    match = _KIND_CALL.match(str(text).strip())
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
            raise KnobError(f"choice(...) needs at least two options")
        for arg in args:
            if arg is not None and not isinstance(arg, (bool, int, float, str)):
                raise KnobError(f"choice options must be numbers, strings, True/False/None; got {arg!r}")
        if len({(type(a), a) for a in args}) != len(args):
            raise KnobError(f"choice(...) lists an option twice")
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
    if knob.syntax == "yaml":
        _format_for_knob(replace(knob, syntax="python"), value, old_text)   # the same type checks
        return _format_yaml(knob, value, old_text)
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
