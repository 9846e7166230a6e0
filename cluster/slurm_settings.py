"""program.md's `slurm:` table, typed, and what the settings mean for one job's request.

    cluster: slurm
    slurm:
      shared_dir: /checkpoint/alice/nightshift   # every node sees it at this path (required)
      partition: gpu          # default: the cluster's default partition
      account: lab-ml         # sbatch --account
      qos: normal             # sbatch --qos
      time: 20m               # default: budget + grace + 3 min of start-up, in whole minutes
      gpus: auto              # 1 per run where the partition has GPUs (auto), or 0 / 1
      setup: [module load cuda/12.4]   # shell lines run on the node before the run
      sbatch: {constraint: a100, mem: 64G}   # further #SBATCH options, as sbatch spells them

agent/program validates every key (file, line and field in the error) and the cross-checks
that need the rest of the program (`time` against budget + grace); cluster/slurm.py receives
the record.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

STARTUP_S = 180.0     # the node's side beyond budget + grace: Python, submitit, the sandbox,
                      # copying the run's folder back; Slurm's limit must not cut a run the
                      # sandbox would let finish

# sbatch options Nightshift sets itself, and the field that sets each instead.
OWNED = {
    "job-name": "the harness names each job nightshift-<tag>-... to find it again",
    "output": "the harness keeps each job's log", "error": "the harness keeps each job's log",
    "open-mode": "the harness keeps each job's log",
    "partition": "use slurm.partition", "account": "use slurm.account", "qos": "use slurm.qos",
    "time": "use slurm.time", "gres": "use slurm.gpus", "gpus": "use slurm.gpus",
    "gpus-per-node": "use slurm.gpus", "gpus-per-task": "use slurm.gpus",
    "cpus-per-task": "use program.md's limits.cpus", "ntasks": "one run is one task",
    "ntasks-per-node": "one run is one task", "nodes": "one run is one node",
    "array": "each run is its own job", "requeue": "a preempted run is run again by the harness",
    "no-requeue": "set by the harness", "signal": "the sandbox enforces the budget",
    "export": "the harness passes a scrubbed environment (no secrets reach a node)",
    "wrap": "the harness writes the job script", "parsable": "the harness reads sbatch's answer",
}
_OPTION = re.compile(r"[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class SlurmSettings:
    """`slurm:` in program.md. None means Slurm's (or the cluster's) default."""

    shared_dir: str | None = None     # an absolute folder every node sees at the same path
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_s: float | None = None       # YAML `time`; None: derived from budget + grace
    gpus: int | None = None           # YAML `gpus`: None = auto (1 where the partition has GPUs)
    setup: tuple[str, ...] = ()       # shell lines before the run (module load, source venv)
    sbatch: dict[str, str | bool] = field(default_factory=dict)   # further #SBATCH options


def time_limit_min(deadline_s: float, settings: SlurmSettings) -> int:
    """The job's `--time` in minutes: slurm.time, else the run's deadline (budget + grace)
    plus the node's start-up, rounded up to whole minutes."""
    seconds = settings.time_s if settings.time_s is not None else deadline_s + STARTUP_S
    return max(1, math.ceil(seconds / 60))


def sbatch_problem(option: str, value: object) -> str | None:
    """Why `option: value` cannot go into `slurm.sbatch` (None: it can)."""
    if not _OPTION.fullmatch(option):
        return (f"{option!r} is not an sbatch long option (lower case, like constraint or "
                f"mail-type, without the leading --)")
    if option in OWNED:
        return f"--{option} is Nightshift's to set: {OWNED[option]}"
    if isinstance(value, bool):
        return None if value else f"--{option}: false is not an sbatch value; leave the option out"
    if not isinstance(value, (str, int, float)) or str(value).strip() == "" or "\n" in str(value):
        return f"--{option}: expected a single-line value (a string or a number), got {value!r}"
    return None


def check_shared_dir(shared_dir: str | None, where: str) -> Path:
    """The shared directory, or a ValueError starting with `where` (program.md's file, line
    and field) and saying the fix: it must be given, absolute, an existing folder, and
    writable from here. (Whether the nodes see it is the probe job's question.)"""
    fix = ("a folder every node of the cluster sees at the same path (often under $HOME, "
           "/checkpoint/$USER or /scratch/$USER)")
    if not shared_dir:
        raise ValueError(f"{where}: --cluster slurm needs it: {fix}")
    path = Path(os.path.expanduser(shared_dir))
    if not path.is_absolute():
        raise ValueError(f"{where}: {shared_dir!r} is not an absolute path; "
                         f"give {fix}")
    if not path.is_dir():
        raise ValueError(f"{where}: {path} does not exist (or is not a folder); "
                         f"create it, or give {fix}")
    token = path / f".nightshift-write-check-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        token.write_text("ok")
        ok = token.read_text() == "ok"
        token.unlink()
    except OSError as error:
        raise ValueError(f"{where}: {path} is not writable from here "
                         f"({error.strerror}); give {fix}") from None
    if not ok:
        raise ValueError(f"{where}: {path} did not read back what was written to it")
    return path


def job_prefix(tag: str, results_dir: Path) -> str:
    """`nightshift-<tag>-<6 hex of the results folder>`: the tag's jobs, and only this
    repository's (another checkout may use the same tag on the same cluster)."""
    key = hashlib.sha1(str(Path(results_dir).resolve()).encode()).hexdigest()[:6]
    return f"nightshift-{tag}-{key}"
