"""The runner protocol: how the harness asks for one experiment run, and what it gets back.

A `Runner` runs one training command over a read-only snapshot of a commit and reports
how it ended. Backends (local process, Docker, later a cluster) implement `Runner.run`.
Runners hold no global state, so several may run side by side.

This module knows nothing of agents, git or researchers: the harness hands it a folder.
"""
from __future__ import annotations

import enum
import threading
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable


class Status(str, enum.Enum):
    """Every way an experiment run (or a whole experiment) can end. Exactly one per run."""

    OK = "ok"                    # exited 0 and reported a finite metric
    CRASH = "crash"              # non-zero exit (or killed by a signal) for another reason
    TIMEOUT = "timeout"          # still running past budget + grace; the whole tree was killed
    OOM = "oom"                  # killed for memory (cgroup OOM, MemoryError, CUDA OOM)
    NO_METRIC = "no_metric"      # exited 0 but reported no value for the metric
    BAD_METRIC = "bad_metric"    # the metric was NaN or infinite (or not a number)
    TAMPERED = "tampered"        # a protected file changed during the run
    INVALID = "invalid"          # the edit broke a rule (forbidden file, syntax error, ...)
    INTERRUPTED = "interrupted"  # the harness was stopped (Ctrl-C) while this ran

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
class RunSpec:
    """Everything a backend needs to run one experiment. Paths are absolute."""

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

    @property
    def deadline_s(self) -> float:
        """Wall-clock seconds after which the run is killed."""
        return self.budget_s + self.grace_s

    def protocol_env(self) -> dict[str, str]:
        """The run protocol's variables, as the training script sees them."""
        return {
            "NIGHTSHIFT_SEED": str(self.seed),
            "NIGHTSHIFT_BUDGET_S": f"{self.budget_s:g}",
            "NIGHTSHIFT_OUT": str(self.out_dir),
            "NIGHTSHIFT_DATA": str(self.data_dir),
            "NIGHTSHIFT_SPLIT": self.split,
            **self.env,
        }


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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["log_path"] = str(self.log_path)
        return data


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
      never the harness's secrets;
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
