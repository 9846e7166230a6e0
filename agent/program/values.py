"""The parsers of program.md's values: each takes what YAML (or a command-line override) gave
and returns the parsed value, or raises `Invalid` with what was expected, e.g. "expected a
duration like 60s, 10m or 1.5h, got 'soon'". `agent.program` adds the file, line and field.
"""
from __future__ import annotations

import difflib
import math
import os
import re
from pathlib import PurePosixPath
from typing import Any, Callable

from agent.target.knobs import KnobError, parse_space
from sandbox.protocol import PLACEHOLDERS, unknown_placeholders


class Invalid(Exception):
    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key  # nested key (seeds.max) for the line lookup and the field name


Parser = Callable[[Any], Any]
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_NONE = {"none", "null", "~", ""}


def did_you_mean(key: str, known: list[str]) -> str:
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
            raise Invalid(f"expected {example}, got {value!r}")
        amount = float(value) if match is None else float(match[1]) * units.get((match[2] or "").lower(), 1)
        if not math.isfinite(amount) or amount < least:
            raise Invalid(f"expected {example}, at least {least:g}, got {value!r}")
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


def whole(value: Any) -> int:
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise Invalid(f"expected a whole number, got {value!r}")
    return value


def number(value: Any) -> float:
    if isinstance(value, str) and re.fullmatch(_NUMBER, value.strip()):
        value = float(value)
    if not _is_number(value) or not math.isfinite(value):
        raise Invalid(f"expected a number, got {value!r}")
    return float(value)


def nonempty(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"expected a non-empty string, got {value!r}")
    return value.strip()


def relative_path(value: Any) -> str:
    text = nonempty(value).replace("\\", "/")
    pure = PurePosixPath(text)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise Invalid(f"expected a file path relative to the repository root, without '..' "
                       f"(like train/train.py), got {value!r}")
    return pure.as_posix()


def absolute_path(value: Any) -> str:
    text = nonempty(value)
    if "\n" in text or not PurePosixPath(text).is_absolute() and not text.startswith("~"):
        raise Invalid(f"expected an absolute folder path (like /checkpoint/$USER/nightshift or "
                       f"~/nightshift), got {value!r}")
    return text


def absolute_paths(value: Any) -> tuple[str, ...]:
    """A list of absolute paths (files or folders; `~` is the user's home), or one."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise Invalid(f"expected a list of absolute paths like [/opt/tools/bin/sox], got {value!r}")
    found = []
    for item in items:
        text = nonempty(item)
        if "\n" in text or not (PurePosixPath(text).is_absolute() or text.startswith("~")):
            raise Invalid(f"expected an absolute path (like /opt/tools/bin/sox or ~/datasets/x), got {item!r}")
        found.append(os.path.expanduser(text))
    return tuple(dict.fromkeys(found))


def lines(value: Any) -> tuple[str, ...]:
    """A list of one-line strings (shell lines), or one string."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) and i.strip() and "\n" not in i
                                              for i in items):
        raise Invalid(f"expected a list of shell lines like ['module load cuda/12.4'], got {value!r}")
    return tuple(i.strip() for i in items)


def name_word(value: Any) -> str:
    """A name as a scheduler spells one (a partition, an account): no spaces."""
    text = nonempty(value) if not isinstance(value, (int, float)) or isinstance(value, bool) else str(value)
    if not re.fullmatch(r"[\w.,:+@-]+", text):
        raise Invalid(f"expected a name without spaces (like gpu or lab-ml), got {value!r}")
    return text


def relative_paths(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise Invalid(f"expected a list of paths like [train/prepare.py], got {value!r}")
    return tuple(dict.fromkeys(relative_path(item) for item in items if item != ""))


def choice(*options: str) -> Parser:
    def parse(value: Any) -> str:
        if value not in options:
            hint = did_you_mean(str(value), list(options))
            raise Invalid(f"expected one of {', '.join(options)}, got {value!r}{hint}")
        return value
    return parse


def optional(parser: Parser) -> Parser:
    def parse(value: Any) -> Any:
        none = value is None or (isinstance(value, str) and value.strip().lower() in _NONE)
        return None if none else parser(value)
    return parse


def check(parser: Parser, ok: Callable[[Any], bool], what: str) -> Parser:
    def parse(value: Any) -> Any:
        parsed = parser(value)
        if not ok(parsed):
            raise Invalid(f"expected {what}, got {value!r}")
        return parsed
    return parse


def command(value: Any) -> str:
    """The training command: every placeholder but {train_out} (the evaluation step's)."""
    text = _placeholders_checked(value, tuple(p for p in PLACEHOLDERS if p != "train_out"))
    if "{train_out}" in text:
        raise Invalid("{train_out} is the evaluation step's (the training step's out folder); "
                      "the training command writes to {out}")
    return text


def evaluate_command(value: Any) -> str:
    """The evaluation command: {train_out} is the training step's out folder, read-only."""
    return _placeholders_checked(value, PLACEHOLDERS)


def _placeholders_checked(value: Any, allowed: tuple[str, ...]) -> str:
    text = nonempty(value)
    for name in unknown_placeholders(text):
        close = difflib.get_close_matches(name, PLACEHOLDERS, n=1)
        hint = f" (did you mean {{{close[0]}}}?)" if close else ""
        raise Invalid(f"unknown placeholder {{{name}}}{hint}; the placeholders are "
                       f"{' '.join('{' + p + '}' for p in allowed)} "
                       f"(write ${{VAR}} for an environment variable)")
    return text


def regex(groups: str) -> Parser:
    """A regular expression searched in the run's log: `one` group, or `named` groups."""
    def parse(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise Invalid(f"expected a regular expression in single quotes, like 'val loss ([0-9.]+)', "
                           f"got {value!r}")
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise Invalid(f"{value!r} is not a valid regular expression ({exc.msg} at position "
                           f"{exc.pos}); write it in single quotes, like 'val loss ([0-9.]+)'") from None
        if groups == "one" and compiled.groups != 1:
            raise Invalid(f"{value!r} has {compiled.groups} groups; it needs exactly one, around the "
                           f"number (like 'val loss ([0-9.]+)'): make the others non-capturing, (?:...)")
        if groups == "named" and not compiled.groupindex:
            raise Invalid(f"{value!r} has no named group; name each figure, like "
                           f"'iter (?P<iter>\\d+): loss (?P<train_loss>[0-9.]+)'")
        return value
    return parse


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A word of the name (split at _) that says "secret": HF_TOKEN, WANDB_API_KEY, not TOKENIZERS_*.
_SECRET_WORDS = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD",
                 "CREDENTIAL", "CREDENTIALS", "AUTH", "PRIVATE", "COOKIE", "SESSION"}
_SANDBOX_OWNED = ("PATH", "HOME", "TMPDIR", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "NIGHTSHIFT_RUN_ID")


def env_vars(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Invalid(f"expected a mapping like {{OMP_NUM_THREADS: 1}}, got {value!r}")
    env: dict[str, str] = {}
    for name, item in value.items():
        name = str(name)
        if not _ENV_NAME.fullmatch(name):
            raise Invalid(f"{name!r} is not an environment variable name (letters, digits, _)", key=name)
        if name.upper().startswith("NIGHTSHIFT_"):
            raise Invalid(f"{name} would shadow the run protocol's NIGHTSHIFT_* variables; pass "
                           f"the seed, budget and folders with {{seed}}, {{budget_s}}, {{out}}, "
                           f"{{data}} in command instead", key=name)
        if name.upper() in _SANDBOX_OWNED:
            raise Invalid(f"{name} is set by the sandbox for every run (python in command is "
                           f"Nightshift's interpreter, one GPU is chosen per run); remove it", key=name)
        if _SECRET_WORDS & set(name.upper().split("_")):
            raise Invalid(f"{name} looks like a secret; secrets never enter a sandbox, a log or "
                           f"the ledger, and runs have no network (for an online logger, set its "
                           f"offline mode, e.g. WANDB_MODE: disabled)", key=name)
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise Invalid(f"{name}: expected a string or a number, got {item!r} (quote it: '1')", key=name)
        env[name] = str(item)
    return env


def env_names(value: Any) -> tuple[str, ...]:
    """Names of this machine's environment variables a hook is given (`hook_env:`): a hook
    runs on the host, not in a sandbox, so a webhook's secret may be named here on purpose."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise Invalid(f"expected a list of variable names like [SLACK_WEBHOOK_URL], got {value!r}")
    for name in items:
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise Invalid(f"{name!r} is not an environment variable name (letters, digits, _)")
    return tuple(dict.fromkeys(items))


def tracking_uri(value: Any) -> str:
    """An MLflow tracking URI without credentials in it: the URI is written to the ledger with
    the rest of the program, and secrets never are."""
    from urllib.parse import urlsplit

    uri = nonempty(value).strip()
    try:
        parts = urlsplit(uri)
        has_credentials = bool(parts.username or parts.password)
    except ValueError:
        raise Invalid(f"expected a tracking URI like http://127.0.0.1:5000, got {uri!r}") from None
    if has_credentials:
        raise Invalid("the URI holds credentials, and program.md's values are written to the ledger; "
                      "give them as MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
                      "MLFLOW_TRACKING_TOKEN) in the environment instead")
    return uri


def knob_spaces(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Invalid(f"expected a mapping of assignment names in the target to search spaces, "
                       f"like {{learning_rate: 'log(1e-4, 1e-2)'}}, got {value!r}")
    spaces: dict[str, str] = {}
    for name, space in value.items():
        name = str(name)
        if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w-]*)*|--?[A-Za-z_][\w.-]*", name):
            raise Invalid(f"{name!r} is not an assignment name (like learning_rate, "
                           f"TrainConfig.lr, optimizer.lr for a YAML key or --n-layer for a flag)", key=name)
        try:
            parse_space(str(space))
        except KnobError as exc:
            raise Invalid(str(exc), key=name) from None
        spaces[name] = str(space).strip()
    return spaces


def globs(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise Invalid(f"expected a list of file patterns like ['*.json', 'samples/*.txt'], got {value!r}")
    return tuple(i.strip() for i in items)


count = check(whole, lambda n: n >= 1, "a whole number >= 1")
MAX_SEEDS = 100     # seeds per plan: beyond it a night is all measurement (and the rule's seed
                    # blocks of 1000 per incumbent would overlap), so it is a typo, not a plan


def seed_count(least: int, why: str) -> Parser:
    def parse(value: Any) -> int:
        count = whole(value)
        if count < least:
            raise Invalid(f"expected at least {least} ({why}), got {value!r}")
        if count > MAX_SEEDS:
            raise Invalid(f"expected at most {MAX_SEEDS} seeds, got {value!r}; a few seeds per "
                           f"look are what the keep rule is built for")
        return count
    return parse


# A metric is a key of result.json or of a `key: value` summary line: no spaces, no colon.
_METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.@/+-]{0,63}")


def metric_name(value: Any) -> str:
    name = nonempty(value)
    if not _METRIC_NAME.fullmatch(name):
        raise Invalid(f"expected a metric name of letters, digits and _ . - / @ + (the key the "
                       f"script writes to result.json or prints as `name: value`), got {value!r}")
    return name


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise Invalid(f"expected true or false, got {value!r}")


def on_off(on: str, off: str) -> Parser:
    """One of two words, YAML's booleans included (`off` and `no` arrive as False)."""
    def parse(value: Any) -> str:
        if isinstance(value, bool):
            return on if value else off
        text = str(value).strip().lower()
        if text in (on, off):
            return text
        raise Invalid(f"expected {on} or {off}, got {value!r}")
    return parse


def budget_fractions(value: Any) -> tuple[float, ...]:
    """Increasing shares of a run's budget, each in (0, 1): `[0.25, 0.5, 0.75]`."""
    items = value if isinstance(value, (list, tuple)) else None
    example = "increasing shares of the budget in (0, 1), like [0.25, 0.5, 0.75]"
    if not items:
        raise Invalid(f"expected {example}, got {value!r}")
    try:
        shares = tuple(number(item) for item in items)
    except Invalid:
        raise Invalid(f"expected {example}, got {value!r}") from None
    if not all(0 < share < 1 for share in shares) or list(shares) != sorted(set(shares)):
        raise Invalid(f"expected {example}, got {value!r}")
    return shares


def workers(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    try:
        return check(whole, lambda n: 1 <= n <= 1024, "a whole number from 1 to 1024")(value)
    except Invalid:
        raise Invalid(f"expected auto (one per visible GPU, else 1) or a number of workers "
                       f"from 1 to 1024, got {value!r}") from None
budget = check(parse_duration, lambda s: s > 0, "a positive duration like 60s")


def record(cls: type, table: dict[str, tuple[str, Parser]],
            check: Callable[[Any], None] | None = None) -> Parser:
    """A nested mapping (seeds, full_scale, limits) parsed key by key into `cls`."""
    def parse(value: Any) -> Any:
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise Invalid(f"expected a mapping with keys {', '.join(table)}, got {value!r}")
        kwargs = {}
        for key, item in value.items():
            if key not in table:
                raise Invalid(f"unknown key {key!r}{did_you_mean(str(key), list(table))}; "
                               f"known keys: {', '.join(table)}", key=str(key))
            attr, parser = table[key]
            try:
                kwargs[attr] = parser(item)
            except Invalid as bad:   # a nested record's key stays in the name: prices.input
                raise Invalid(str(bad), key=f"{key}.{bad.key}" if bad.key else key) from None
        record = cls(**kwargs)
        if check:
            check(record)
        return record
    return parse
