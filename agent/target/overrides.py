"""What the command sets that the target also sets: flags that override config lines, and
how many steps a run will take.

A script that reads a config file usually lets command-line flags win over it (nanoGPT's
configurator, argparse and HfArgumentParser defaults, LightningCLI's `--trainer.max_time`).
An assignment of the target that a flag of the command overrides is a dead line: editing it
changes nothing that runs. `overridden(source, path, command)` lists them, so that `check`
can say so, a declared knob there is an error, and an LLM researcher is told they are fixed.

A flag is `--name=value`, `--name value` or a bare `--name`, with `-` and `_` the same; it
matches an assignment of the same name: a module-level name or a class field (Python), a
dotted key of a scalar (YAML/JSON: `--trainer.max_time` sets `trainer.max_time`), or the
default of an argparse argument or click option with that long flag (named `--n-layer`).

`step_count(source, path, command)` is the number of steps a step-budgeted run takes, when
the command or the target says it under one of the usual names (`max_iters`, `max_steps`,
...): the flag wins over the config line, as it does in the script.
"""
from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass

import yaml

from agent.target.cli_knobs import cli_options
from agent.target.knob_targets import is_yaml

# Names under which scripts give their number of optimizer steps (nanoGPT, HF, Lightning, ...).
STEP_COUNT_NAMES = ("max_iters", "max_steps", "num_steps", "total_steps", "train_steps",
                    "num_train_steps", "training_steps", "max_iterations", "num_iterations",
                    "iterations", "iters", "steps", "n_steps", "trainer.max_steps")
_FLAG = re.compile(r"^--([A-Za-z_][\w.-]*)(?:=(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class Flag:
    """One `--name[=value]` word of a command."""

    name: str              # normalised: `-` as `_`, e.g. "max_iters", "trainer.max_time"
    value: str | None      # the text after `=` or the next word; None for a bare switch
    text: str              # as written, e.g. "--max_iters=2000", "--seed {seed}"


@dataclass(frozen=True)
class Override:
    """An assignment of the target that a flag of the command overrides."""

    name: str              # as assigned in the target: "batch_size", "trainer.max_time"
    line: int              # its line in the target
    value: str             # its value as written there
    flag: Flag

    def describe(self) -> str:
        return f"{self.what()} (line {self.line}) by {self.flag.text}"

    def what(self) -> str:
        return f"the default of {self.name}" if self.name.startswith("-") else self.name

    def hits(self, knob_name: str, knob_line: int) -> bool:
        """Whether this is the line of a knob: by name, a flag's default by its line (the
        knob may be named by its dest, `n_layer`, or by another of its flags)."""
        if self.name.startswith("-"):
            return self.line == knob_line
        return self.name == knob_name or self.name.endswith("." + knob_name)


@dataclass(frozen=True)
class StepCount:
    """How many steps a run takes, and who says so."""

    steps: int
    name: str              # the setting: "max_iters"
    flag: Flag | None      # the command's flag that sets it, if it is one
    line: int | None       # else its line in the target

    def origin(self, target: str) -> str:
        return f"{self.flag.text} in command" if self.flag else f"{self.name} = {self.steps} in {target}:{self.line}"


def normalise(name: str) -> str:
    return name.replace("-", "_")


def command_flags(command: str) -> list[Flag]:
    """The `--name` words of `command` (a shell command line; unparsable quoting falls back
    to splitting on white space)."""
    try:
        words = shlex.split(command, comments=False)
    except ValueError:
        words = command.split()
    flags = []
    for i, word in enumerate(words):
        match = _FLAG.match(word)
        if match is None:
            continue
        name, value = normalise(match.group(1)), match.group(2)
        text = word
        if value is None and i + 1 < len(words) and not words[i + 1].startswith("-") \
                and words[i + 1] not in ("&&", "||", ";", "|"):
            value = words[i + 1]
            text = f"{word} {value}"
        flags.append(Flag(name, value, text))
    return flags


def assignments(source: str, path: str) -> dict[str, tuple[int, str]]:
    """Every name the target assigns a value to -> (line, value as written): Python
    module-level names, class fields and argparse/click defaults (under each long flag,
    `--n-layer`), or YAML/JSON dotted keys of scalars. Empty when the file does not parse
    (program.md's checks say why elsewhere)."""
    return _yaml_assignments(source) if is_yaml(path) else _python_assignments(source)


def overridden(source: str, path: str, command: str) -> list[Override]:
    """The target's assignments that a flag of `command` overrides, in the target's order."""
    flags = {flag.name: flag for flag in command_flags(command)}
    found = []
    for name, (line, value) in assignments(source, path).items():
        if name.startswith("--"):
            key = name[2:]
        else:
            key = name.rsplit(".", 1)[-1] if not is_yaml(path) else name
        flag = flags.get(normalise(key))
        if flag is not None:
            found.append(Override(name, line, value, flag))
    return sorted(found, key=lambda o: o.line)


def step_count(source: str, path: str, command: str) -> StepCount | None:
    """The run's number of steps from the command's flag, else the target's assignment."""
    flags = {flag.name: flag for flag in command_flags(command)}
    assigned = assignments(source, path)
    for name in STEP_COUNT_NAMES:
        flag = flags.get(name)
        if flag is not None and _integer(flag.value) is not None:
            return StepCount(_integer(flag.value), name, flag, None)
    for name in STEP_COUNT_NAMES:
        hit = assigned.get(name) or next((v for k, v in assigned.items() if k.endswith("." + name)), None)
        if hit is not None and _integer(hit[1]) is not None:
            return StepCount(_integer(hit[1]), name, None, hit[0])
    return None


def _integer(text: str | None) -> int | None:
    try:
        value = int(str(text).replace("_", ""))
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _python_assignments(source: str) -> dict[str, tuple[int, str]]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found: dict[str, tuple[int, str]] = {}

    def add(node: ast.stmt, owner: str = "") -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name) or node.value is None:
            return
        value = node.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) == "field":
            value = next((k.value for k in value.keywords if k.arg == "default"), value)
        name = f"{owner}.{targets[0].id}" if owner else targets[0].id
        found[name] = (node.lineno, ast.get_source_segment(source, value) or "")

    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            add(node)
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.Assign, ast.AnnAssign)):
                    add(sub, node.name)
    for option in cli_options(tree):   # an argparse/click default, under each long flag
        default = option.keyword("default")
        where = default if default is not None else option.call
        for flag in option.flags:
            if flag.startswith("--"):
                found[flag] = (where.lineno, ast.get_source_segment(source, default) if default else "")
    return found


def _yaml_assignments(source: str) -> dict[str, tuple[int, str]]:
    try:
        root = yaml.compose(source, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    found: dict[str, tuple[int, str]] = {}

    def walk(node: yaml.Node, trail: list[str]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    walk(value, trail + [key.value])
        elif isinstance(node, yaml.ScalarNode) and trail:
            found[".".join(trail)] = (node.start_mark.line + 1, node.value)

    if root is not None:
        walk(root, [])
    return found
