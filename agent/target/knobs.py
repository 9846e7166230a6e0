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
      n_layer: int(2, 8)                # `parser.add_argument('--n-layer', default=4)`
      --n-embd: choice(32, 64, 128)     # the same, by its flag (click options too)

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

Where things are: the space grammar, `Knob` and value formatting in `knob_space`; finding
program.md's declared knobs in Python, YAML and JSON targets in `knob_targets`; here the
annotations, `find_knobs` / `set_knobs` over both, and hypotheses that are assignments.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import replace
from typing import Any, Mapping

from agent.target.knob_space import (  # re-exported: the public surface of knobs
    SPACE_CALL, SPACE_KINDS, DeclaredKnobError, Knob, KnobError, SpaceKind, format_float, format_sig,
    format_value, parse_space, round_sig, same_value,
)
from agent.target.knob_targets import format_yaml, is_yaml, python_knob, value_span, yaml_knob

__all__ = ["SPACE_KINDS", "DeclaredKnobError", "Knob", "KnobError", "SpaceKind", "find_knobs",
           "format_float", "format_sig", "format_value", "is_yaml", "knob_edit", "knob_values",
           "parse_assignments", "parse_knobs", "parse_space", "round_sig", "same_value", "set_knobs"]

_ANNOTATION = re.compile(r"#\s*search\s*:\s*(?P<rest>.*)$")


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
        start, end = value_span(source, node.value)
        knobs.append(Knob(name, value, kind, line, low, high, choices, doc, start, end))
    _check_single_assignment(tree, seen)
    return knobs


def find_knobs(source: str, *, path: str = "", declared: Mapping[str, str] | None = None) -> list[Knob]:
    """Every knob of the target `path` (its text is `source`), in line order: program.md's
    `declared` (name -> space, e.g. {"learning_rate": "log(1e-4, 1e-2)"}) when given, which
    replace the annotations; else, in a Python target, its `# search:` annotations. Raises DeclaredKnobError for a declared knob that cannot be edited (not
    found, not a literal, assigned twice), KnobError for a malformed annotation."""
    declared = dict(declared or {})
    if is_yaml(path):
        found = [yaml_knob(source, path, name, space) for name, space in declared.items()]
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
        found = [python_knob(source, tree, path, name, space) for name, space in declared.items()]
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


def knob_edit(old: str, new: str, *, path: str = "", declared: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The knobs `new` changes relative to `old`, {name: new value}, when that is all it
    changes (`edits: knobs`): every byte outside the knobs' values is the same (the spaces
    between a value and its line's comment excepted, which `set_knobs` realigns), and every
    new value lies in its knob's search space. Raises KnobError naming what else changed."""
    before = find_knobs(old, path=path, declared=declared)
    try:
        after = {k.name: k for k in find_knobs(new, path=path, declared=declared)}
    except KnobError as error:
        raise KnobError(f"the edit breaks a knob: {error}") from None
    if _outside_values(old, before) != _outside_values(new, list(after.values())):
        line = _first_changed_line(_outside_values(old, before), _outside_values(new, list(after.values())))
        raise KnobError(f"edits are limited to the knobs' values (edits: knobs), but the edit also "
                        f"changes {line}; propose new values for {', '.join(k.name for k in before)} only")
    changed = {k.name: after[k.name].value for k in before if not same_value(after[k.name].value, k.value)}
    outside = [f"{name} = {value!r} (space {_space_text(after[name])})" for name, value in changed.items()
               if not after[name].contains(value)]
    if outside:
        raise KnobError(f"new knob values outside their search space: {'; '.join(outside)}")
    return changed


def _outside_values(source: str, knobs: list[Knob]) -> str:
    """`source` with each knob's value, and the blanks after it, replaced by a marker."""
    pieces, last = [], 0
    for knob in sorted(knobs, key=lambda k: k.start):
        end = knob.end
        while end < len(source) and source[end] in " \t":
            end += 1
        pieces += [source[last:knob.start], f"\0{knob.name}\0"]
        last = end
    return "".join(pieces) + source[last:]


def _first_changed_line(a: str, b: str) -> str:
    for number, (x, y) in enumerate(zip(a.splitlines(), b.splitlines()), 1):
        if x != y:
            return f"line {number}: {y.replace(chr(0), '').strip()[:80]!r}"
    longer = b.splitlines() if len(b.splitlines()) > len(a.splitlines()) else a.splitlines()
    number = min(len(a.splitlines()), len(b.splitlines())) + 1
    extra = longer[number - 1].replace(chr(0), "").strip()[:80] if number <= len(longer) else ""
    return f"line {number}: {extra!r} (lines added or removed)"


def _space_text(knob: Knob) -> str:
    if knob.kind == "choice":
        return f"choice({', '.join(map(repr, knob.choices))})"
    return f"{knob.kind}({knob.low}, {knob.high})"


_ASSIGN_PART = re.compile(r"^(?:set\s+)?(?:(?P<flag>--?[A-Za-z_][\w-]*)(?:\s*[=:]\s*|\s+to\s+|\s+)"
                          r"|(?P<name>[A-Za-z_]\w*)\s*(?:=|:|\bto\b)\s*)(?P<value>.+?)$", re.IGNORECASE)
_LEAD_VERB = re.compile(r"^(?:try|test|use|set)\b\s*", re.IGNORECASE)


def parse_assignments(text: str, knobs: list[Knob]) -> dict[str, Any]:
    """Read a human hypothesis that is nothing but knob assignments, e.g. `LR=1e-3`,
    `set N_LAYER to 4`, `try LR = 1e-3, WARMUP_FRAC = 0.1`, `--n-layer 6` (a flag knob).
    Returns {knob: value} with values coerced to the knob's type; raises KnobError saying
    why when the text is anything else (then only a researcher that reads prose can test it)."""
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
        name = match.group("flag") or match.group("name")
        knob = by_name.get(name) or by_name.get(name.upper()) or _flag_knob(knobs, name)
        if knob is None:
            raise KnobError(f"{name!r} is not an annotated knob")
        result[knob.name] = _coerce(knob, match.group("value").strip())
    return result


def _flag_knob(knobs: list[Knob], name: str) -> Knob | None:
    """A flag knob named either way: `--n-embd=128` for the knob `n_embd`, `n_embd=128` for
    the knob `--n-embd` (a flag reads `-` as `_`)."""
    key = name.lstrip("-").replace("-", "_")
    return next((k for k in knobs if k.name.startswith("-") or name.startswith("-")
                 if k.name.lstrip("-").replace("-", "_") == key), None)


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
    if SPACE_CALL.match(rest.strip()) is None:
        raise KnobError(
            f"line {line}: cannot read the annotation 'search: {rest.strip()}'; write e.g. "
            f"'# search: log(1e-4, 3e-2)' at the very end of the line"
        )
    try:
        return parse_space(rest)
    except KnobError as exc:
        raise KnobError(f"line {line}: {exc}") from None


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
        return format_yaml(knob, value, old_text)
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
