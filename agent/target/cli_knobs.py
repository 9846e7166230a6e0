"""Settings a script takes on its command line, for program.md's `knobs:`: finds the
`parser.add_argument(...)` and `@click.option(...)` calls of a Python target, and tells
whether a declared name means such a flag or an assignment of the same name.

An option is named by the attribute the script reads (its dest: `--n-layer` -> `n_layer`,
an explicit `dest=` or click name wins) or by a flag as written (`--n-layer`). Its knob
is the text of its literal `default=`; `agent.target.knob_targets` turns it into a `Knob`.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from agent.target.knob_space import DeclaredKnobError


@dataclass(frozen=True)
class CliOption:
    """One argparse argument or click option."""

    flags: tuple[str, ...]   # as written: ("--batch-size", "-b"); a positional: ("lr",)
    dest: str                # what the script reads: args.batch_size
    call: ast.Call

    @property
    def shown(self) -> str:
        """The flag a person would type (the first long one)."""
        return next((f for f in self.flags if f.startswith("--")), self.flags[0] if self.flags else self.dest)

    def keyword(self, arg: str) -> ast.expr | None:
        return next((k.value for k in self.call.keywords if k.arg == arg), None)

    def named(self, name: str) -> bool:
        return name in self.flags if name.startswith("-") else name == self.dest

    @property
    def kind(self) -> str:
        return "argparse" if isinstance(self.call.func, ast.Attribute) and self.call.func.attr == "add_argument" else "click"

    def type_name(self) -> str | None:
        """`int`, `float` or `str` from `type=`; `bool` for a store_true/false switch."""
        kind = self.keyword("type")
        if isinstance(kind, ast.Name) and kind.id in ("int", "float", "str", "bool"):
            return kind.id
        action = self.keyword("action")
        if isinstance(action, ast.Constant) and action.value in ("store_true", "store_false"):
            return "bool"
        return None


def cli_options(tree: ast.Module) -> list[CliOption]:
    """Every `<anything>.add_argument(...)` and click option in the file, in source order.
    Parsers are usually built inside `if __name__ == "__main__":` or a function, so the
    whole tree is searched, not only the module level."""
    click_option_names = {alias.asname or alias.name for node in ast.walk(tree)
                          if isinstance(node, ast.ImportFrom) and node.module == "click"
                          for alias in node.names if alias.name == "option"}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        decls = tuple(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
        if not decls:
            continue
        if isinstance(func, ast.Attribute) and func.attr == "add_argument":
            found.append(CliOption(decls, _argparse_dest(node, decls), node))
        elif (isinstance(func, ast.Attribute) and func.attr == "option"
              and isinstance(func.value, ast.Name) and func.value.id == "click") or \
                (isinstance(func, ast.Name) and func.id in click_option_names):
            flags = tuple(part for d in decls for part in d.split("/") if part.startswith("-"))
            found.append(CliOption(flags, _click_name(decls), node))
    return sorted(found, key=lambda o: (o.call.lineno, o.call.col_offset))


def _argparse_dest(call: ast.Call, decls: tuple[str, ...]) -> str:
    """argparse's rule: `dest=`, else the first long flag, else the first short one, with the
    leading dashes dropped and `-` read as `_`; a positional argument is its own dest."""
    dest = next((k.value for k in call.keywords if k.arg == "dest"), None)
    if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
        return dest.value
    flag = next((d for d in decls if d.startswith("--")), decls[0])
    return flag.lstrip("-").replace("-", "_")


def _click_name(decls: tuple[str, ...]) -> str:
    """click's rule: a declaration without dashes is the name, else the first `--` flag,
    else the first `-` one; `-` read as `_`, lower case."""
    plain = next((d for d in decls if d.isidentifier()), None)
    if plain is not None:
        return plain
    flags = [part for d in decls for part in d.split("/") if part.startswith("-")]
    flag = next((f for f in flags if f.startswith("--")), flags[0] if flags else decls[0])
    return flag.lstrip("-").replace("-", "_").lower()


def set_defaults_line(tree: ast.Module, dest: str) -> int | None:
    """The line of a `parser.set_defaults(dest=...)`, which replaces the argument's default."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "set_defaults" and any(k.arg == dest for k in node.keywords):
            return node.lineno
    return None


def field_overwrite_gap(tree: ast.Module, cls: str, field: str, dest: str, where: str) -> str | None:
    """None when the script provably never runs on the default of `cls.field`: every call
    `cls(...)` in the file passes `field=<something>.dest` (the flag's value), at least one
    call exists, and `cls` is used nowhere else but in annotations. Else a sentence saying
    which value the script reads, for the error that asks the user to choose."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _names(n.func, cls)]
    if not calls:
        return f"nothing in {where} calls {cls}(...), so which one the script reads cannot be told from here"
    for call in calls:
        value = next((k.value for k in call.keywords if k.arg == field), None)
        if not (isinstance(value, ast.Attribute) and value.attr == dest):
            return (f"{cls}(...) on line {call.lineno} does not pass {field}=args.{dest}, so the script "
                    f"reads the field's default there")
    used = {id(c.func) for c in calls} | {id(sub) for node in ast.walk(tree)
                                         for annotation in _annotations(node) for sub in ast.walk(annotation)}
    other = next((n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == cls
                  and isinstance(n.ctx, ast.Load) and id(n) not in used), None)
    if other is not None:
        return f"{cls} is also used on line {other.lineno}, where the field's default may be read"
    return None


def reads(tree: ast.Module, name: str, dest: str) -> str:
    """Where the script reads a module-level `name` and where the flag's value (`.dest`)."""
    plain = sorted({n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
                    and isinstance(n.ctx, ast.Load)})
    flag = sorted({n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == dest
                   and isinstance(n.ctx, ast.Load)})

    def lines(found: list[int]) -> str:
        return f"on line{'s' if len(found) > 1 else ''} {', '.join(map(str, found[:8]))}" if found else "nowhere"
    return f"the script reads {name} {lines(plain)} and the flag's value (.{dest}) {lines(flag)}"


def flag_wins(tree: ast.Module, where: str, name: str, options: list[CliOption],
              found: list[tuple[str, ast.stmt]]) -> bool:
    """A bare name that is both a flag's dest and assignments `found` ((class or "", node)):
    True when the flag is the knob, False when the assignment is; else DeclaredKnobError.

    The flag wins only when every such assignment is a dataclass field the script provably
    fills from the flag (makemore's `ModelConfig(n_layer=args.n_layer)`): then the field's
    default never reaches a run. A module-level name may be read anywhere, which a small
    check cannot rule out, so it is never proven dead, unless it is the flag's own default
    (`add_argument('--lr', default=lr)`): then the assignment is the value to edit. In doubt
    the user says which one they mean rather than us guessing."""
    option = options[0]
    default = option.keyword("default")
    if len(options) == 1 and isinstance(default, ast.Name) and default.id == name \
            and any(not cls for cls, _ in found):
        return False
    for cls, node in found:
        gap = (field_overwrite_gap(tree, cls, name, option.dest, where) if cls
               else reads(tree, name, option.dest))
        if gap is None:
            continue
        other = (f"the field {cls}.{name} (line {node.lineno}; name it `{cls}.{name}`)" if cls else
                 f"the module-level {name} = ... (line {node.lineno}), which cannot be a knob while a "
                 f"flag shares its name")
        raise DeclaredKnobError(name, (
            f"{where}: {name} names two settings: the {option.kind} flag {option.shown} "
            f"(line {option.call.lineno}; name it `{option.shown}`) and {other}; {gap}. In "
            f"knobs:, name the one the researcher should search"))
    return True


def _names(func: ast.expr, cls: str) -> bool:
    return (isinstance(func, ast.Name) and func.id == cls) or (isinstance(func, ast.Attribute) and func.attr == cls)


def _annotations(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.arg) and node.annotation is not None:
        return [node.annotation]
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
        return [node.returns]
    return []


def type_conflict(option: CliOption, kind: str, choices: tuple) -> str | None:
    """Why the option's `type=` cannot take the values of a `kind` space, or None."""
    type_name = option.type_name()
    if type_name is None:
        return None   # no type=: the default's own value is checked, as for an assignment
    accepts = {"int": lambda v: isinstance(v, int) and not isinstance(v, bool),
               "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
               "str": lambda v: isinstance(v, str),
               "bool": lambda v: isinstance(v, bool)}[type_name]
    takes = {"int": "whole numbers", "float": "numbers", "str": "text", "bool": "True or False"}[type_name]
    declared = f"type={type_name}" if option.keyword("type") is not None else "a store_true/false action"
    start = f"{option.shown} has {declared}, which takes {takes}, but "
    if kind == "choice":
        bad = next((c for c in choices if c is not None and not accepts(c)), None)
        return None if bad is None else start + f"choice(...) lists {bad!r}; list {takes} only"
    if type_name == "float" or (type_name == "int" and kind == "int"):
        return None
    return start + f"a {kind}(...) space draws {'whole numbers' if kind == 'int' else 'floats'}: use " + (
        "int(lo, hi) or choice(...)" if type_name == "int" else "choice(...)")
