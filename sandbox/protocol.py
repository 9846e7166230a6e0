"""The runner protocol: how the harness asks for one experiment run, and what it gets back.

A `Runner` runs one training command over a read-only snapshot of a commit and reports
how it ended. Backends (local process, Docker, later a cluster) implement `Runner.run`.
Runners hold no global state, so several may run side by side.

This module knows nothing of agents, git or researchers: the harness hands it a folder.
"""
from __future__ import annotations

import enum
import re
import shlex
import threading
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

PLACEHOLDERS = ("seed", "budget_s", "out", "data", "split", "train_out")
"""What `{name}` in a command stands for: the run protocol's values, as the run sees them
(`{train_out}`: in an evaluation step, the training step's out folder, read-only)."""
_PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_]\w*)\}")   # `${VAR}` is the shell's, not ours
# `python` / `python3` as a word of its own (not a path, not part of a name like python3.11).
_PYTHON_WORD = re.compile(r"(?<![\w./-])python3?(?![\w./-])")


def unknown_placeholders(command: str) -> list[str]:
    """The `{name}` words of `command` that are not placeholders (likely misspelled)."""
    return [name for name in _PLACEHOLDER.findall(command) if name not in PLACEHOLDERS]


def expand_command(command: str, values: dict[str, str], python: str | None = None) -> str:
    """`command` with `{seed}`, `{budget_s}`, ... replaced by `values` (shell-quoted where
    needed) and, when `python` is given, every word `python`/`python3` replaced by it.
    Other braces are left alone (`${VAR}`, JSON)."""
    def value(match: re.Match) -> str:
        name = match.group(1)
        return shlex.quote(values[name]) if name in values else match.group(0)

    expanded = _PLACEHOLDER.sub(value, command)
    if python:
        expanded = _PYTHON_WORD.sub(lambda _: shlex.quote(python), expanded)
    return expanded


class Status(str, enum.Enum):
    """Every way an experiment run (or a whole experiment) can end. Exactly one per run."""

    OK = "ok"                    # exited 0 and reported a finite metric
    CRASH = "crash"              # non-zero exit (or killed by a signal) for another reason
    TIMEOUT = "timeout"          # still running past budget + grace; the whole tree was killed
    OOM = "oom"                  # killed for memory (cgroup OOM, MemoryError, CUDA OOM)
    NO_METRIC = "no_metric"      # exited 0 but reported no value for the metric
    BAD_METRIC = "bad_metric"    # the metric was NaN or infinite (or not a number)
    # The harness's verdicts on a run's integrity (agent/decide/integrity.py gives them; no
    # backend does): the number the run produced cannot be trusted, so it is never kept.
    TAMPERED = "tampered"        # a protected file (or the data folder) changed during the run
    LEAK = "leak"                # the training step opened a split hidden from it (val, test)
    LOOKAHEAD = "lookahead"      # the model's predictions depend on the bytes they predict
    MISREPORTED = "misreported"  # the value the script reported differs from the measured one
    BAD_ARTIFACT = "bad_artifact"  # no model to evaluate, or one that cannot be evaluated
    INVALID = "invalid"          # the edit broke a rule (forbidden file, syntax error, ...)
    INTERRUPTED = "interrupted"  # the harness was stopped (Ctrl-C) while this ran

    def __str__(self) -> str:
        return self.value


class WorkdirMode(str, enum.Enum):
    """How a run's working directory is made (recorded as `sandbox["workdir"]`)."""

    READ_ONLY = "read-only"   # the snapshot itself
    OVERLAY = "overlay"       # a private overlayfs in the run's mount namespace
    COPY = "copy"             # a private copy of the snapshot

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run. None means "no limit from us"."""

    memory_mb: int | None = None
    pids: int | None = 512
    cpus: float | None = None
    open_files: int | None = 4096
    gpu: int | None = None          # device index chosen by the harness; None = CPU only
    cpuset: tuple[int, ...] | None = None   # the cores the run may use (a worker's share); None = all
    network: bool = False           # the run gets no network unless explicitly allowed


@dataclass(frozen=True)
class DataMount:
    """A host folder mounted read-only inside the run's working directory at `path`
    (relative), so a script finds `data/shakespeare_char/train.bin` where it expects it."""

    path: str                       # relative to the working directory, e.g. "data/shakespeare_char"
    source: Path                    # absolute host folder


@dataclass(frozen=True)
class HiddenFile:
    """A file of the data folder this run must not read (another split). The backend lays an
    empty tripwire file over it and watches it: the run sees an empty file, and opening it is
    reported in `RunResult.hidden_read` by `label` ("val", "test")."""

    path: str                       # relative to the data folder, e.g. "val.bin"
    label: str                      # what it is, for the reason: the split's name


@dataclass(frozen=True)
class HeldOut:
    """Where else the held-out splits' bytes lie (the data's `held_out_sources`): hidden from
    the run like the split files, in every place this machine keeps them (sandbox.held_out)."""

    units: tuple[str, ...] = ()     # files and folders of the standard library, relative
    paths: tuple[str, ...] = ()     # absolute files
    siblings: bool = False          # the data folder's neighbours under its parent too


@dataclass(frozen=True)
class RunSpec:
    """Everything a backend needs to run one experiment. Paths are absolute.

    The command may use the placeholders of `PLACEHOLDERS` (`{seed}`, `{out}`, ...); each
    backend expands them with `shell_command`, paths as the run sees them (`/out` in a
    container), as it sets the `NIGHTSHIFT_*` variables with `protocol_env`.
    """

    command: str                    # shell command, run with the snapshot as working dir
    snapshot_dir: Path              # read-only copy of the commit under test
    data_dir: Path                  # read-only prepared data (NIGHTSHIFT_DATA)
    out_dir: Path                   # writable, empty; result.json lands here
    seed: int
    budget_s: float                 # training budget the script should respect
    metric: str                     # name of the metric in result.json, e.g. "val_bpb"
    split: str = "val"              # "val" during research, "test" only in replay
    grace_s: float = 30.0           # startup + evaluation allowance past the budget
    limits: Limits = field(default_factory=Limits)
    log_cap_bytes: int = 5_000_000  # the run log keeps head and tail beyond this
    env: dict[str, str] = field(default_factory=dict)  # extra, non-secret variables
    result_file: str = "result.json"    # the JSON object in out_dir holding the metric
    metric_pattern: str | None = None   # regex, one group: the metric from the log's last match
    metrics_pattern: str | None = None  # regex with named groups: more figures from the log
    python: str | None = None       # what the word `python` in command runs; None: PATH's
    writable_workdir: bool = False  # the working dir is a private writable layer over the snapshot
    mounts: tuple[DataMount, ...] = ()  # read-only folders inside the working dir (needs writable_workdir)
    metric_required: bool = True    # False: a training step that an evaluation step scores (what
                                    # it reports of the metric is only its claim)
    hidden: tuple[HiddenFile, ...] = ()  # files of data_dir the run must not read (tripwires)
    held_out: HeldOut = field(default_factory=HeldOut)   # their sources elsewhere (tripwires too)
    train_out_dir: Path | None = None   # an evaluation step: the training step's out folder,
                                        # read-only ({train_out}, NIGHTSHIFT_TRAIN_OUT)
    private_root: Path | None = None    # the harness's results folder: hidden from the run but
                                        # for this run's own folders (other runs' models stay unseen)
    view_add: tuple[str, ...] = ()      # host paths the run may read besides its view (program.md
                                        # `view: {add: [...]}`; sandbox.view)

    @property
    def deadline_s(self) -> float:
        """Wall-clock seconds after which the run is killed."""
        return self.budget_s + self.grace_s

    def protocol_values(self, out: str | None = None, data: str | None = None,
                        train_out: str | None = None) -> dict[str, str]:
        """The run protocol's values by placeholder name; `out`/`data`/`train_out` are the
        folders as the run sees them when they differ from the host's (a container's /out)."""
        values = {"seed": str(self.seed), "budget_s": f"{self.budget_s:g}",
                  "out": out or str(self.out_dir), "data": data or str(self.data_dir),
                  "split": self.split}
        if self.train_out_dir is not None:
            values["train_out"] = train_out or str(self.train_out_dir)
        return values

    def protocol_env(self, out: str | None = None, data: str | None = None,
                     train_out: str | None = None) -> dict[str, str]:
        """The run protocol's variables, as the training script sees them: the one place
        that names them."""
        values = self.protocol_values(out, data, train_out)
        env = {
            "NIGHTSHIFT_SEED": values["seed"],
            "NIGHTSHIFT_BUDGET_S": values["budget_s"],
            "NIGHTSHIFT_OUT": values["out"],
            "NIGHTSHIFT_DATA": values["data"],
            "NIGHTSHIFT_SPLIT": values["split"],
        }
        if "train_out" in values:
            env["NIGHTSHIFT_TRAIN_OUT"] = values["train_out"]
        return {**env, **self.env}

    def shell_command(self, out: str | None = None, data: str | None = None,
                      python: str | None = None, train_out: str | None = None) -> str:
        """The command with its placeholders expanded (same values as `protocol_env`) and
        `python` replaced by `python` when given (a backend passes `self.python` where that
        interpreter exists inside the run)."""
        return expand_command(self.command, self.protocol_values(out, data, train_out), python)


@dataclass
class RunResult:
    """How one run ended. `metric` is set only when status is OK."""

    status: Status
    exit_code: int | None
    metric: float | None
    metrics: dict[str, Any]          # everything result.json (or the summary) reported
    duration_s: float                # wall clock of the sandboxed process
    peak_memory_mb: float | None
    log_path: Path
    log_tail: str                    # last lines of the log, for the ledger and the researcher
    backend: str                     # "local", "docker", ...
    started_at: str                  # ISO 8601, UTC
    ended_at: str
    reason: str = ""                 # one line a person can act on, for non-OK statuses
    sandbox: dict[str, Any] = field(default_factory=dict)  # backend facts: isolation, image id, ...
    # With spec.writable_workdir: what the run created or changed in its working directory
    # (relative path -> bytes, None for a deletion), copied as plain files into `work_dir`.
    written: dict[str, int | None] = field(default_factory=dict)
    work_dir: Path | None = None
    # `spec.hidden`: the labels of the hidden files the run opened (a tripwire was touched),
    # and whether hiding was enforced here ("tripwires" | "not enforced: why" | "none hidden").
    hidden_read: list[str] = field(default_factory=list)
    hidden_enforced: str = "none hidden"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["log_path"] = str(self.log_path)
        data["work_dir"] = str(self.work_dir) if self.work_dir else None
        return data


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: a runner raises it once the run is killed and cleaned up, carrying
    the run's INTERRUPTED `RunResult` for the caller to record (it is still a
    KeyboardInterrupt to everyone else)."""

    def __init__(self, result: RunResult) -> None:
        super().__init__("interrupted while a run went")
        self.result = result


OnOutput = Callable[[str], None]
"""Called with each line the run prints (decoded leniently), for progress displays."""


class Runner(ABC):
    """Runs one experiment in a sandbox.

    Contract:
    - `run` blocks until the command ends or is killed, and always returns a RunResult
      (it raises only for harness bugs or a backend that cannot start at all, as
      `SandboxUnavailable`);
    - past `spec.deadline_s` the whole process tree / container is killed: TIMEOUT;
    - the command sees only `spec.protocol_env()` plus a minimal PATH/HOME/locale,
      never the harness's secrets; it runs as `spec.shell_command(...)` (placeholders
      expanded with the same values);
    - with `spec.writable_workdir`, the run may write anywhere in its working directory;
      the writes land in a private layer (`RunResult.work_dir`), never in the snapshot,
      and `spec.mounts` appear read-only inside it;
    - nothing is left behind (processes, containers) when `run` returns, including when
      it is interrupted by KeyboardInterrupt, which it re-raises after cleaning up;
    - when `stop` is set (from another thread: the harness is stopping, or the run is no
      longer wanted) the run is killed within about a second and `run` returns its
      INTERRUPTED result instead of raising;
    - nothing outlives the harness: if the harness process is killed, the run's whole tree
      dies with it (local: a parent-death signal through the namespace; Docker: the
      container's own deadline and the leftover sweep).
    Runners hold no global state: several `run` calls may proceed side by side in threads.
    """

    name: str = "abstract"

    @abstractmethod
    def run(self, spec: RunSpec, on_output: OnOutput | None = None,
            stop: threading.Event | None = None) -> RunResult:
        ...

    def describe(self) -> dict[str, Any]:
        """Facts about this backend for provenance (isolation available, image, ...)."""
        return {"backend": self.name}


class SandboxUnavailable(RuntimeError):
    """The backend cannot run here (no engine, no image, ...). The message says the fix."""
