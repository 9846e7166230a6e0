"""The research program: `program.md`, YAML front matter for the harness, prose for the researcher.

Contract:
- every field has a default, so a file without front matter is valid (all prose);
- values come from the file, then from overrides (CLI flags, `Program.with_overrides`),
  and both pass through the same parsers in `_FIELDS`;
- anything wrong raises `ProgramError` naming the file, the field, the line and the fix,
  e.g. ``program.md:7: field 'budget': expected a duration like 60s, 10m or 1.5h, got 'soon'``.
Paths (`target`, `protected`, `data`) are relative to `Program.root`, the repository holding
program.md. What can be checked without running anything is checked here, before any run: the
command's placeholders, the metric patterns, the `env:` names, and the knobs (program.md's
`knobs:`, or the target's `# search:` annotations for the optuna researcher) against the
target file.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable

import yaml

from agent.decide import fdr, rules
from agent.decide.decision import RuleSettings, SeedPlan
from agent.researchers import settings as llm
from agent.researchers.knobs import DeclaredKnobError, KnobError, find_knobs, parse_space
from agent.researchers.registry import RESEARCHER_NAMES, resolve_researcher_name
from cluster.select import CLUSTERS
from sandbox.protocol import PLACEHOLDERS, unknown_placeholders
from sandbox.select import BACKENDS


class ProgramError(ValueError):
    """program.md or an override is invalid; the message says where and how to fix it."""


@dataclass(frozen=True)
class FullScale:
    budget_s: float = 600.0  # per-run budget when replaying kept commits
    seeds: int = 5


@dataclass(frozen=True)
class ResourceLimits:
    memory_mb: int | None = 8192
    pids: int = 512
    cpus: float | None = None


@dataclass(frozen=True)
class Program:
    path: Path                    # the program.md file (absolute)
    root: Path                    # git toplevel containing program.md, else its folder
    prose: str                    # everything after the front matter: the researcher's brief
    target: str = "train/train.py"
    protected: tuple[str, ...] = ("train/prepare.py",)
    command: str = "python train/train.py"   # may use {seed} {budget_s} {out} {data} {split}
    prepare: str | None = "python train/prepare.py"  # run once on the host; None = no data
    metric: str = "val_bpb"
    result_file: str = "result.json"    # the JSON file in $NIGHTSHIFT_OUT holding the metric
    metric_pattern: str | None = None   # regex with one group: the metric from the log's last match
    metrics_pattern: str | None = None  # regex with named groups: more figures from the log
    env: dict[str, str] = field(default_factory=dict)   # extra, non-secret variables of every run
    knobs: dict[str, str] = field(default_factory=dict)  # name in the target -> search space
    data: str | None = None             # a folder of the repository, mounted read-only there in runs
    keep: tuple[str, ...] | None = None  # globs of run outputs to keep; None: result.json + small files
    direction: str = "minimize"
    budget_s: float = 60.0        # YAML `budget`
    grace_s: float = 60.0         # YAML `grace`: startup + final evaluation past the budget
    seeds: SeedPlan = field(default_factory=SeedPlan)
    alpha: float = RuleSettings.alpha
    min_effect: float = RuleSettings.min_effect   # smallest improvement worth keeping, metric units
    decision: str = rules.RULES[0]
    fdr: str = RuleSettings.fdr
    full_scale: FullScale = field(default_factory=FullScale)
    sandbox: str = "auto"
    researcher: str = "auto"
    workers: int | None = None    # runs in flight at once; None (`auto`): one per GPU, else 1
    overlap: bool = True          # the researcher prepares proposals while runs train
    control: float = 0.0          # share of experiments proposed by the LLM-free control arm
    cluster: str = CLUSTERS[0]    # where runs execute: this machine, or a Ray cluster
    cluster_address: str | None = None   # a Ray cluster's address (default: $RAY_ADDRESS)
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    image: str = "nightshift:latest"
    claude: llm.ClaudeSettings = field(default_factory=llm.ClaudeSettings)
    openai: llm.OpenAISettings = field(default_factory=llm.OpenAISettings)
    # YAML key -> where its value came from ("program.md:7", "program.md (override budget)"),
    # so checks made later (agent/night/preflight.py) name the line as parse errors do
    locations: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, attribute names as keys (budget_s, not budget), for the ledger."""
        data = dataclasses.asdict(self)
        data.pop("locations")
        data.update(path=str(self.path), root=str(self.root), protected=list(self.protected),
                    keep=None if self.keep is None else list(self.keep))
        return data

    def locate(self, key: str) -> str:
        """Where field `key` was set, as error messages start: `program.md:7: field 'target'`,
        or `program.md: field 'target' (default train/train.py)` for a default."""
        if key in self.locations:
            return f"{self.locations[key]}: field {key!r}"
        value = getattr(self, _FIELDS[key][0]) if key in _FIELDS else None
        return f"{self.locations.get('', self.path.name)}: field {key!r} (default {_unparse(key, value)})"

    @property
    def rule_settings(self) -> RuleSettings:
        """What the keep rule is told (agent.decide.rules.make_rule)."""
        return RuleSettings(alpha=self.alpha, min_effect=self.min_effect, fdr=self.fdr, seeds=self.seeds)

    def with_overrides(self, **fields: Any) -> "Program":
        """A copy with `fields` (YAML keys, attribute names or dotted `seeds.max`) validated
        exactly like file values."""
        raw = {key: _unparse(key, getattr(self, attr)) for key, (attr, _) in _FIELDS.items()}
        shown = Path(self.locations.get("", self.path))    # errors name the file as given
        program = _build(shown, self.root, self.prose, raw, {}, fields)
        given = {key: where for key, where in program.locations.items() if "(override" in where}
        return dataclasses.replace(program, path=self.path, locations={**self.locations, **given})


# ---- Parsers: value -> parsed value, or _Invalid with a message saying what is expected ----

class _Invalid(Exception):
    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key  # nested key (seeds.max) for the line lookup and the field name


Parser = Callable[[Any], Any]
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_NONE = {"none", "null", "~", ""}


def _did_you_mean(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _quantity(units: dict[str, float], example: str, least: float) -> Callable[[Any], float]:
    """A parser for a number with an optional unit suffix (`1.5h`, `8g`), in base units."""
    pattern = re.compile(rf"({_NUMBER})\s*({'|'.join(units)})?", re.IGNORECASE)

    def parse(value: Any) -> float:
        match = pattern.fullmatch(value.strip()) if isinstance(value, str) else None
        if not (_is_number(value) or match):
            raise _Invalid(f"expected {example}, got {value!r}")
        amount = float(value) if match is None else float(match[1]) * units.get((match[2] or "").lower(), 1)
        if not math.isfinite(amount) or amount < least:
            raise _Invalid(f"expected {example}, at least {least:g}, got {value!r}")
        return amount
    return parse


parse_duration = _quantity({"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600},
                           "a duration like 60s, 10m or 1.5h", 0.0)
"""`60`, `60s`, `10m`, `1.5h`, `90.5s` -> seconds (float)."""
_megabytes = _quantity({"mb": 1, "mib": 1, "m": 1, "gb": 1024, "gib": 1024, "g": 1024,
                        "tb": 1024 ** 2, "tib": 1024 ** 2, "t": 1024 ** 2},
                       "a memory size like 8g, 512m or 8192 (MB), or null for no limit", 1.0)


def parse_memory(value: Any) -> int | None:
    """`8g`, `512m`, `8192` (MB) -> MB; null/none -> None (no limit)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _NONE):
        return None
    return int(_megabytes(value))


def _int(value: Any) -> int:
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Invalid(f"expected a whole number, got {value!r}")
    return value


def _float(value: Any) -> float:
    if isinstance(value, str) and re.fullmatch(_NUMBER, value.strip()):
        value = float(value)
    if not _is_number(value) or not math.isfinite(value):
        raise _Invalid(f"expected a number, got {value!r}")
    return float(value)


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(f"expected a non-empty string, got {value!r}")
    return value.strip()


def _path(value: Any) -> str:
    text = _text(value).replace("\\", "/")
    pure = PurePosixPath(text)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise _Invalid(f"expected a file path relative to the repository root, without '..' "
                       f"(like train/train.py), got {value!r}")
    return pure.as_posix()


def _paths(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise _Invalid(f"expected a list of paths like [train/prepare.py], got {value!r}")
    return tuple(dict.fromkeys(_path(item) for item in items if item != ""))


def _choice(*options: str) -> Parser:
    def parse(value: Any) -> str:
        if value not in options:
            hint = _did_you_mean(str(value), list(options))
            raise _Invalid(f"expected one of {', '.join(options)}, got {value!r}{hint}")
        return value
    return parse


def _optional(parser: Parser) -> Parser:
    def parse(value: Any) -> Any:
        none = value is None or (isinstance(value, str) and value.strip().lower() in _NONE)
        return None if none else parser(value)
    return parse


def _check(parser: Parser, ok: Callable[[Any], bool], what: str) -> Parser:
    def parse(value: Any) -> Any:
        parsed = parser(value)
        if not ok(parsed):
            raise _Invalid(f"expected {what}, got {value!r}")
        return parsed
    return parse


def _command(value: Any) -> str:
    text = _text(value)
    for name in unknown_placeholders(text):
        close = difflib.get_close_matches(name, PLACEHOLDERS, n=1)
        hint = f" (did you mean {{{close[0]}}}?)" if close else ""
        raise _Invalid(f"unknown placeholder {{{name}}}{hint}; the placeholders are "
                       f"{' '.join('{' + p + '}' for p in PLACEHOLDERS)} "
                       f"(write ${{VAR}} for an environment variable)")
    return text


def _regex(groups: str) -> Parser:
    """A regular expression searched in the run's log: `one` group, or `named` groups."""
    def parse(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _Invalid(f"expected a regular expression in single quotes, like 'val loss ([0-9.]+)', "
                           f"got {value!r}")
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise _Invalid(f"{value!r} is not a valid regular expression ({exc.msg} at position "
                           f"{exc.pos}); write it in single quotes, like 'val loss ([0-9.]+)'") from None
        if groups == "one" and compiled.groups != 1:
            raise _Invalid(f"{value!r} has {compiled.groups} groups; it needs exactly one, around the "
                           f"number (like 'val loss ([0-9.]+)'): make the others non-capturing, (?:...)")
        if groups == "named" and not compiled.groupindex:
            raise _Invalid(f"{value!r} has no named group; name each figure, like "
                           f"'iter (?P<iter>\\d+): loss (?P<train_loss>[0-9.]+)'")
        return value
    return parse


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A word of the name (split at _) that says "secret": HF_TOKEN, WANDB_API_KEY, not TOKENIZERS_*.
_SECRET_WORDS = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD",
                 "CREDENTIAL", "CREDENTIALS", "AUTH", "PRIVATE", "COOKIE", "SESSION"}
_SANDBOX_OWNED = ("PATH", "HOME", "TMPDIR", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "NIGHTSHIFT_RUN_ID")


def _env(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Invalid(f"expected a mapping like {{OMP_NUM_THREADS: 1}}, got {value!r}")
    env: dict[str, str] = {}
    for name, item in value.items():
        name = str(name)
        if not _ENV_NAME.fullmatch(name):
            raise _Invalid(f"{name!r} is not an environment variable name (letters, digits, _)", key=name)
        if name.upper().startswith("NIGHTSHIFT_"):
            raise _Invalid(f"{name} would shadow the run protocol's NIGHTSHIFT_* variables; pass "
                           f"the seed, budget and folders with {{seed}}, {{budget_s}}, {{out}}, "
                           f"{{data}} in command instead", key=name)
        if name.upper() in _SANDBOX_OWNED:
            raise _Invalid(f"{name} is set by the sandbox for every run (python in command is "
                           f"Nightshift's interpreter, one GPU is chosen per run); remove it", key=name)
        if _SECRET_WORDS & set(name.upper().split("_")):
            raise _Invalid(f"{name} looks like a secret; secrets never enter a sandbox, a log or "
                           f"the ledger, and runs have no network (for an online logger, set its "
                           f"offline mode, e.g. WANDB_MODE: disabled)", key=name)
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise _Invalid(f"{name}: expected a string or a number, got {item!r} (quote it: '1')", key=name)
        env[name] = str(item)
    return env


def _knob_spaces(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Invalid(f"expected a mapping of assignment names in the target to search spaces, "
                       f"like {{learning_rate: 'log(1e-4, 1e-2)'}}, got {value!r}")
    spaces: dict[str, str] = {}
    for name, space in value.items():
        name = str(name)
        if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w-]*)*", name):
            raise _Invalid(f"{name!r} is not an assignment name (like learning_rate, "
                           f"TrainConfig.lr or optimizer.lr for a YAML key)", key=name)
        try:
            parse_space(str(space))
        except KnobError as exc:
            raise _Invalid(str(exc), key=name) from None
        spaces[name] = str(space).strip()
    return spaces


def _globs(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise _Invalid(f"expected a list of file patterns like ['*.json', 'samples/*.txt'], got {value!r}")
    return tuple(i.strip() for i in items)


_count = _check(_int, lambda n: n >= 1, "a whole number >= 1")
MAX_SEEDS = 100     # seeds per plan: beyond it a night is all measurement (and the rule's seed
                    # blocks of 1000 per incumbent would overlap), so it is a typo, not a plan


def _seed_count(least: int, why: str) -> Parser:
    def parse(value: Any) -> int:
        count = _int(value)
        if count < least:
            raise _Invalid(f"expected at least {least} ({why}), got {value!r}")
        if count > MAX_SEEDS:
            raise _Invalid(f"expected at most {MAX_SEEDS} seeds, got {value!r}; a few seeds per "
                           f"look are what the keep rule is built for")
        return count
    return parse


# A metric is a key of result.json or of a `key: value` summary line: no spaces, no colon.
_METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.@/+-]{0,63}")


def _metric(value: Any) -> str:
    name = _text(value)
    if not _METRIC_NAME.fullmatch(name):
        raise _Invalid(f"expected a metric name of letters, digits and _ . - / @ + (the key the "
                       f"script writes to result.json or prints as `name: value`), got {value!r}")
    return name


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise _Invalid(f"expected true or false, got {value!r}")


def _workers(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    try:
        return _check(_int, lambda n: 1 <= n <= 1024, "a whole number from 1 to 1024")(value)
    except _Invalid:
        raise _Invalid(f"expected auto (one per visible GPU, else 1) or a number of workers "
                       f"from 1 to 1024, got {value!r}") from None
_budget = _check(parse_duration, lambda s: s > 0, "a positive duration like 60s")


def _record(cls: type, table: dict[str, tuple[str, Parser]],
            check: Callable[[Any], None] | None = None) -> Parser:
    """A nested mapping (seeds, full_scale, limits) parsed key by key into `cls`."""
    def parse(value: Any) -> Any:
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise _Invalid(f"expected a mapping with keys {', '.join(table)}, got {value!r}")
        kwargs = {}
        for key, item in value.items():
            if key not in table:
                raise _Invalid(f"unknown key {key!r}{_did_you_mean(str(key), list(table))}; "
                               f"known keys: {', '.join(table)}", key=str(key))
            attr, parser = table[key]
            try:
                kwargs[attr] = parser(item)
            except _Invalid as bad:   # a nested record's key stays in the name: prices.input
                raise _Invalid(str(bad), key=f"{key}.{bad.key}" if bad.key else key) from None
        record = cls(**kwargs)
        if check:
            check(record)
        return record
    return parse


def _field(spec: llm.Field) -> Parser:
    """The parser of one researcher setting, from its declaration in researchers/settings.py."""
    if spec.kind == "prices":
        parser = _record(llm.Prices, _table(llm.PRICE_FIELDS))
    elif spec.kind == "choice":
        parser = _choice(*spec.choices)
    else:
        parser = {"text": _text, "int": _int, "number": _float}[spec.kind]
        if spec.minimum is not None:
            what = f"a{' whole' if spec.kind == 'int' else ''} number >= {spec.minimum:g}"
            parser = _check(parser, lambda v, least=spec.minimum: v >= least, what)
    return _optional(parser) if spec.optional else parser


def _table(fields: dict[str, llm.Field]) -> dict[str, tuple[str, Parser]]:
    return {key: (key, _field(spec)) for key, spec in fields.items()}


def _cross_check(check: Callable[[Any], list[tuple[str, str]]]) -> Callable[[Any], None]:
    def run(record: Any) -> None:
        for key, message in check(record):
            raise _Invalid(message, key=key)
    return run


def _seed_check(plan: SeedPlan) -> None:
    if plan.screen > plan.max:
        raise _Invalid(f"screen ({plan.screen}) exceeds max ({plan.max}); "
                       f"raise max or lower screen", key="screen")


_RECORDS: dict[str, dict[str, tuple[str, Parser]]] = {
    "seeds": {"baseline": ("baseline", _seed_count(2, "two runs are the least that measure spread")),
              "screen": ("screen", _seed_count(1, "a candidate runs once before the first look")),
              "max": ("max", _seed_count(2, "a keep needs two paired seeds"))},
    "full_scale": {"budget": ("budget_s", _budget),
                   "seeds": ("seeds", _seed_count(1, "a replay runs each commit once at least"))},
    "limits": {"memory": ("memory_mb", parse_memory), "pids": ("pids", _count),
               "cpus": ("cpus", _optional(_check(_float, lambda c: c > 0, "a positive number")))},
    "claude": _table(llm.CLAUDE_FIELDS),
    "openai": _table(llm.OPENAI_FIELDS),
}
_seed_plan = _record(SeedPlan, _RECORDS["seeds"], _seed_check)

# The validation table: YAML key -> (Program attribute, parser).
_FIELDS: dict[str, tuple[str, Parser]] = {
    "target": ("target", _path),
    "protected": ("protected", _paths),
    "command": ("command", _command),
    "prepare": ("prepare", _optional(_text)),
    "metric": ("metric", _metric),
    "result_file": ("result_file", _path),
    "metric_pattern": ("metric_pattern", _optional(_regex("one"))),
    "metrics_pattern": ("metrics_pattern", _optional(_regex("named"))),
    "env": ("env", _env),
    "knobs": ("knobs", _knob_spaces),
    "data": ("data", _optional(_path)),
    "keep": ("keep", _globs),
    "direction": ("direction", _choice("minimize", "maximize")),
    "budget": ("budget_s", _budget),
    "grace": ("grace_s", parse_duration),
    "seeds": ("seeds", lambda v: _seed_plan(v if isinstance(v, dict) or v is None else {"max": v})),
    "alpha": ("alpha", _check(_float, lambda a: 0 < a <= 0.5, "a number in (0, 0.5]")),
    "min_effect": ("min_effect", _check(_float, lambda x: x >= 0, "a number >= 0")),
    "decision": ("decision", _choice(*rules.RULES)),
    "fdr": ("fdr", _choice(*fdr.METHODS)),
    "full_scale": ("full_scale", _record(FullScale, _RECORDS["full_scale"])),
    "sandbox": ("sandbox", _choice(*BACKENDS)),
    "researcher": ("researcher", _choice(*RESEARCHER_NAMES)),
    "limits": ("limits", _record(ResourceLimits, _RECORDS["limits"])),
    "image": ("image", _text),
    "workers": ("workers", _workers),
    "overlap": ("overlap", _bool),
    "control": ("control", _check(_float, lambda c: 0 <= c <= 0.9, "a share in [0, 0.9], like 0.25")),
    "cluster": ("cluster", _choice(*CLUSTERS)),
    "cluster_address": ("cluster_address", _optional(_text)),
    "claude": ("claude", _record(llm.ClaudeSettings, _RECORDS["claude"], _cross_check(llm.check_claude))),
    "openai": ("openai", _record(llm.OpenAISettings, _RECORDS["openai"], _cross_check(llm.check_llm))),
}
_BY_ATTR = {attr: key for key, (attr, _) in _FIELDS.items()}


def _unparse(key: str, value: Any) -> Any:
    """A parsed value back in a form its parser accepts (for with_overrides)."""
    if key not in _RECORDS:
        return list(value) if isinstance(value, tuple) else value
    return {sub: dataclasses.asdict(item) if dataclasses.is_dataclass(item) else item
            for sub, (attr, _) in _RECORDS[key].items() for item in [getattr(value, attr)]}


# ---- The file: split, compose (for line numbers), validate ----

def _split(text: str, name: str) -> tuple[str, str, int]:
    """(front matter, prose, file line of the front matter's first line)."""
    lines = text.lstrip("\ufeff").splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    if start == len(lines) or lines[start].strip() != "---":
        return "", text.strip(), 1
    for end in range(start + 1, len(lines)):
        if lines[end].rstrip() == "---":
            return "\n".join(lines[start + 1:end]), "\n".join(lines[end + 1:]).strip(), start + 2
    raise ProgramError(f"{name}:{start + 1}: the front matter opened with '---' is never closed; "
                       f"add a line containing only '---' after the last field")


def _compose(front: str, name: str, first: int) -> tuple[dict[str, Any], dict[str, int]]:
    """The front matter as data, and the file line of every key (nested as 'seeds.max')."""
    try:
        node = yaml.compose(front, Loader=yaml.SafeLoader)
        data = yaml.safe_load(front)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        if "flow" in (getattr(err, "context", None) or "") and getattr(err, "context_mark", None):
            mark = err.context_mark     # an unclosed [ or {: where it opened, not the next line
        line = first + mark.line if mark else first
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        owner = _owning_key(front.splitlines()[:line - first + 1])
        near = f" in field {owner!r}" if owner else ""
        raise ProgramError(f"{name}:{line}: the front matter is not valid YAML{near} ({problem}); "
                           f"check the indentation and quote values containing ': ' or ' #'") from None
    if node is None:
        return {}, {}
    if not isinstance(node, yaml.MappingNode):
        raise ProgramError(f"{name}:{first + node.start_mark.line}: the front matter must be "
                           f"'field: value' lines, got a {type(data).__name__}")
    lines: dict[str, int] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if key in lines:
            raise ProgramError(f"{name}:{first + key_node.start_mark.line}: field {key!r} is given "
                               f"twice (first on line {lines[key]}); keep one")
        lines[key] = first + key_node.start_mark.line
        if isinstance(value_node, yaml.MappingNode):
            for sub_node, _ in value_node.value:
                lines[f"{key}.{sub_node.value}"] = first + sub_node.start_mark.line
    return {str(key): value for key, value in data.items()}, lines


def _line_of(lines: dict[str, int], dotted: str) -> int | str:
    """The line of `a.b.c`, else of `a.b`, else of `a` (only two levels are indexed)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in lines:
            return lines[".".join(parts[:n])]
    return "?"


def _build(path: Path, root: Path, prose: str, raw: dict[str, Any], lines: dict[str, int],
           overrides: dict[str, Any]) -> Program:
    name, values, where = str(path), {}, {}
    known = list(_FIELDS)

    def parse(key: str, value: Any, locate: Callable[[str], str]) -> None:
        attr, parser = _FIELDS[key]
        try:
            values[attr] = parser(value)
        except _Invalid as bad:
            field_name = f"{key}.{bad.key}" if bad.key else key
            raise ProgramError(f"{locate(field_name)}: field {field_name!r}: {bad}") from None
        where[key] = locate(key)

    for key, value in raw.items():
        if key not in _FIELDS:
            raise ProgramError(f"{name}:{lines.get(key, '?')}: unknown field {key!r}"
                               f"{_did_you_mean(key, known)}; known fields: {', '.join(known)}")
        parse(key, value, lambda dotted: f"{name}:{_line_of(lines, dotted)}")
    for given, value in overrides.items():
        top, _, sub = given.partition(".")
        top = _BY_ATTR.get(top, top)
        if top not in _FIELDS or (sub and top not in _RECORDS):
            raise ProgramError(f"{name} (override): unknown field {given!r}"
                               f"{_did_you_mean(top, known)}; known fields: {', '.join(known)}")
        if sub:
            base = raw.get(top)
            base = {"max": base} if top == "seeds" and not isinstance(base, (dict, type(None))) else base
            value = {**(base or {}), sub: value}
        raw[top] = value
        parse(top, value, lambda dotted: f"{name} (override {dotted})")

    program = Program(path=path, root=root, prose=prose, **values, locations={"": name, **where})
    if program.target in program.protected:
        blamed = "protected" if "protected" in where else "target"
        raise ProgramError(f"{where.get(blamed, name)}: field {blamed!r}: "
                           f"the target {program.target!r} is also protected; the researcher must be "
                           f"able to edit it, so remove it from protected or choose another target")
    _check_knobs(program, lambda dotted: f"{name}:{lines.get(dotted, lines.get(dotted.split('.')[0], '?'))}")
    return program


def _check_knobs(program: Program, locate: Callable[[str], str]) -> None:
    """The knobs against the target file, before any run: program.md's `knobs:` always, the
    `# search:` annotations when the optuna researcher will read them."""
    declared = program.knobs
    if not declared:
        try:
            optuna = resolve_researcher_name(program.researcher)[0] == "optuna"
        except Exception:
            optuna = False
        if not optuna:
            return
    path = program.root / program.target
    if not path.is_file():
        if declared:
            raise ProgramError(f"{locate('knobs')}: field 'knobs': the target {program.target} does "
                               f"not exist in {program.root}; set target to the file that assigns them")
        return   # nothing to read yet; `nightshift check` says so
    try:
        find_knobs(path.read_text(encoding="utf-8", errors="replace"), path=program.target,
                   declared=declared)
    except DeclaredKnobError as exc:
        raise ProgramError(f"{locate('knobs.' + exc.knob)}: field 'knobs.{exc.knob}': {exc}") from None
    except (KnobError, SyntaxError) as exc:
        raise ProgramError(f"{locate('target')}: field 'target': {program.target}: {exc}; fix that "
                           f"`# search:` annotation, or name the knobs in program.md's knobs: "
                           f"(which replaces the annotations)") from None


def _repo_root(path: Path) -> Path:
    return next((folder for folder in path.parents if (folder / ".git").exists()), path.parent)


def parse_program(text: str, path: Path | str, overrides: dict[str, Any] | None = None) -> Program:
    """Parse program.md's text; `path` names it in errors and locates the repository root."""
    shown = Path(path)
    front, prose, first = _split(text, str(shown))
    raw, lines = _compose(front, str(shown), first)
    absolute = shown.resolve()
    program = _build(shown, _repo_root(absolute), prose, raw, lines, dict(overrides or {}))
    return dataclasses.replace(program, path=absolute)


def load_program(path: Path | str, overrides: dict[str, Any] | None = None) -> Program:
    """Read and validate program.md. `overrides` maps YAML keys (or attribute names, or dotted
    `seeds.max`) to values, strings from the command line included; None values are skipped,
    so a CLI may pass every option it has."""
    path = Path(path)
    if not path.is_file():
        raise ProgramError(f"{path}: no such program file; pass the path of your program.md "
                           f"(the bundled one is at the root of the nightshift repository)")
    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    return parse_program(_decode(path.read_bytes(), path), path, given)


def _decode(data: bytes, path: Path) -> str:
    """The file's text, or a ProgramError naming the line (and the field) of the first byte
    that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as bad:
        before = data[:bad.start].decode("utf-8", errors="replace")
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        text = data.decode("utf-8", errors="replace")
        try:
            front, _, first = _split(text, str(path))
        except ProgramError:
            front, first = "", 1
        inside = front and first <= line < first + len(front.splitlines())
        owner = _owning_key(front.splitlines()[:line - first + 1]) if inside else None
        where = f"field {owner!r}" if owner else "the front matter" if inside else "the prose"
        raise ProgramError(f"{path}:{line}: {where}: not UTF-8 (byte 0x{data[bad.start]:02x} at "
                           f"column {column}); save the file as UTF-8") from None


def _owning_key(lines: list[str]) -> str | None:
    """The top-level key whose value holds the last of these front-matter lines."""
    for line in reversed(lines):
        match = re.match(r"([A-Za-z_][\w.-]*)\s*:", line)
        if match:
            return match[1]
    return None
