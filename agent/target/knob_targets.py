"""Knobs named in program.md (`knobs:`) over the user's own files, found and written.

A declared knob is a name assigned in the target, in the user's own case:

- Python: a module-level assignment (`learning_rate = 6e-4`), else a class-level field
  default (`lr: float = 3e-4`, or `field(default=5e-5, ...)`), `Class.field` when several
  classes have it; or the `default=` of an argparse argument or click option, by its dest
  (`n_layer`) or its flag (`--n-layer`), found by `agent.target.cli_knobs`; the value must
  be a one-line literal;
- YAML or JSON: a key, dotted for nesting (`optimizer.lr`), holding one scalar.

Each finder returns a `Knob` whose `start`/`end` give the value's text in the source, so
`agent.target.knobs.set_knobs` replaces exactly that text and nothing else. A knob
that cannot be edited raises `DeclaredKnobError` naming it, with advice that keeps the
script working.
"""
from __future__ import annotations

import ast
import difflib
import json
import re
from typing import Any

import yaml

from agent.target.cli_knobs import CliOption, cli_options, flag_wins, set_defaults_line, type_conflict
from agent.target.knob_space import (DeclaredKnobError, Knob, KnobError, SpaceKind, format_float,
                                          parse_space)

_YAML_SUFFIXES = (".yaml", ".yml", ".json")   # JSON is YAML: same finder, same editor


def is_yaml(path: str) -> bool:
    return path.lower().endswith(_YAML_SUFFIXES)


def _declared_space(name: str, space: Any) -> tuple[SpaceKind, Any, Any, tuple[Any, ...]]:
    try:
        return parse_space(str(space))
    except KnobError as exc:
        raise DeclaredKnobError(name, str(exc)) from None


def python_knob(source: str, tree: ast.Module, path: str, name: str, space: Any) -> Knob:
    kind, low, high, choices = _declared_space(name, space)
    where = path or "the target"
    options = [o for o in cli_options(tree) if o.named(name)]
    owner, _, field = name.rpartition(".")
    module, fields = _named_assignments(tree)
    if name.startswith("-"):
        found: list[tuple[str, ast.stmt]] = []
    elif owner:
        found = [(cls, node) for cls, node in fields if cls == owner and _assigned_name(node) == field]
    else:
        found = [("", node) for node in module if _assigned_name(node) == field] or \
                [(cls, node) for cls, node in fields if _assigned_name(node) == field]
    if options and found:
        if flag_wins(tree, where, name, options, found):
            found = []
        else:
            options = []
    if options:
        return _option_knob(source, tree, where, name, options, kind, low, high, choices)
    if not found:
        _not_found(tree, where, name, owner, field, module, fields)
    if len(found) > 1:
        lines = ", ".join(str(n.lineno) for _, n in found)
        raise DeclaredKnobError(name, (
            f"{where} assigns {field} on lines {lines}; the researcher can change only one "
            f"assignment and the last one wins: name a file where it is set once (such as the "
            f"config file) as the target, or write Class.{field} for a class field"))
    node = found[0][1]
    value_node = node.value
    if isinstance(value_node, ast.Call) and _is_field_call(value_node):   # field(default=5e-5, ...)
        value_node = next((k.value for k in value_node.keywords if k.arg == "default"), None)
        if value_node is None:
            raise DeclaredKnobError(name, (
                f"{where}:{node.lineno}: {field} = field(...) has no default=...; the researcher "
                f"rewrites a literal default: drop the knob, or name a field with default=<value>"))
    return _literal_knob(source, name, value_node, where, f"{field} = ", (kind, low, high, choices))


def _literal_knob(source: str, name: str, value_node: ast.expr, where: str, written: str,
                  space: tuple[SpaceKind, Any, Any, tuple[Any, ...]]) -> Knob:
    """The knob of a one-line literal `value_node`; `written` is what precedes it (`lr = `)."""
    kind, low, high, choices = space
    if value_node.lineno != value_node.end_lineno:
        raise DeclaredKnobError(name, (
            f"{where}:{value_node.lineno}: the value of {written.strip(' =')} spans several lines; "
            f"the researcher rewrites one-line literal values: drop the knob, or put the value on one line"))
    try:
        value = ast.literal_eval(value_node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        text = ast.get_source_segment(source, value_node) or "..."
        raise DeclaredKnobError(name, (
            f"{where}:{value_node.lineno}: {written}{text} is an expression, not a literal; the "
            f"researcher can only rewrite a literal value: drop the knob, or (if you may edit "
            f"the file) write the value it computes there")) from None
    _check_declared_type(name, kind, value, f"{where}:{value_node.lineno}")
    start, end = value_span(source, value_node)
    return Knob(name, value, kind, value_node.lineno, low, high, choices, "", start, end)


def _option_knob(source: str, tree: ast.Module, where: str, name: str, options: list[CliOption],
                 kind: SpaceKind, low: Any, high: Any, choices: tuple[Any, ...]) -> Knob:
    """The knob of an argparse argument's or click option's literal `default=`."""
    option = options[0]
    line = option.call.lineno
    if len(options) > 1:
        raise DeclaredKnobError(name, (
            f"{where} declares {name} on lines {', '.join(str(o.call.lineno) for o in options)}; the "
            f"researcher edits one default and the script may read the other: drop the knob, or "
            f"name a flag declared once"))
    value_node = option.keyword("default")
    if value_node is None:
        raise DeclaredKnobError(name, (
            f"{where}:{line}: {option.shown} has no default=...; the researcher rewrites a literal "
            f"default: drop the knob, or (if you may edit the file) give it default=<value>"))
    dead = set_defaults_line(tree, option.dest)
    if dead is not None:
        raise DeclaredKnobError(name, (
            f"{where}:{dead}: set_defaults({option.dest}=...) replaces the default of {option.shown} "
            f"(line {line}), so editing it would change nothing: drop the knob"))
    conflict = type_conflict(option, kind, choices)
    if conflict:
        raise DeclaredKnobError(name, f"{where}:{value_node.lineno}: {conflict}")
    return _literal_knob(source, name, value_node, where, f"{option.shown} default=",
                         (kind, low, high, choices))


def _not_found(tree: ast.Module, where: str, name: str, owner: str, field: str,
               module: list[ast.stmt], fields: list[tuple[str, ast.stmt]]) -> None:
    options = cli_options(tree)
    if name.startswith("-"):
        known = sorted({f for o in options for f in o.flags if f.startswith("-")})
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise DeclaredKnobError(name, (
            f"{where} has no argparse argument or click option with the flag {name}{hint} "
            f"(flags there: {', '.join(known[:20]) or 'none'}); a flag is named as written, "
            f"like --n-layer, or by the attribute the script reads, like n_layer"))
    known = sorted({_assigned_name(n) for n in module} | {f"{c}.{_assigned_name(n)}" for c, n in fields}
                   - {None})
    dests = sorted({o.dest for o in options}) if not owner else []
    close = difflib.get_close_matches(name, known + dests, n=1) or difflib.get_close_matches(
        name.lower(), [k.lower() for k in known + dests], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    flags = f"; argparse/click options there: {', '.join(dests[:20])}" if dests else ""
    raise DeclaredKnobError(name, (
        f"{where} has no assignment `{field} = ...` at module level"
        f"{f' in class {owner}' if owner else ', as a class field default or as a flag'}{hint} "
        f"(names assigned there: {', '.join(known[:20]) or 'none'}{' ...' if len(known) > 20 else ''}"
        f"{flags}); a knob's name is the name in the file, in its own case"))


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


def yaml_knob(source: str, path: str, name: str, space: Any) -> Knob:
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


def value_span(source: str, node: ast.expr) -> tuple[int, int]:
    """Character offsets of an expression (an assignment's value) in `source` (ast counts
    UTF-8 bytes)."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:
        return starts[lineno - 1] + len(lines[lineno - 1].encode("utf-8")[:col].decode("utf-8"))
    return offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)


def format_yaml(knob: Knob, value: Any, old_text: str) -> str:
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
