"""What the harness asks Slurm's own commands: the partitions (`sinfo`), this user's jobs and
their states (`squeue`), and cancelling them (`scancel`).

Only `squeue` is used for states, not `sacct`: accounting needs slurmdbd, which many small
clusters (and the CI one) do not run. A finished job stays in squeue for `MinJobAge` (300 s by
default), long enough for the harness, which looks every few seconds, to read how it ended.

What a job's state means for its run is `ending`: Slurm's vocabulary mapped onto the run
statuses, in one table.
"""
from __future__ import annotations

import os
import pwd
import re
import subprocess
from dataclasses import dataclass

from sandbox import Status

COMMAND_TIMEOUT_S = 60.0
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED",
                    "RESIZING", "SIGNALING", "STAGE_OUT", "REQUEUED", "REQUEUE_FED",
                    "REQUEUE_HOLD", "RESV_DEL_HOLD", "SPECIAL_EXIT"})
"""States in which a job still holds (or waits for) a place on the cluster."""


class SlurmError(RuntimeError):
    """A Slurm command failed or is missing; the message says which and its output."""


@dataclass(frozen=True)
class JobState:
    job_id: str
    name: str
    state: str            # Slurm's word: PENDING, RUNNING, COMPLETED, CANCELLED, PREEMPTED...
    node: str = ""
    reason: str = ""      # why it waits (Priority, Resources) or how it ended

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: int
    cpus: int             # per node (the smallest node, when they differ)
    gpus: int             # per node
    memory_mb: int        # per node
    default: bool
    up: bool
    max_time_min: int | None = None   # the partition's MaxTime; None: unlimited


def run(argv: list[str], env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                              env=env)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found: run on a host of the Slurm cluster (a login "
                         f"node), where Slurm's commands are installed") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(argv)}` did not answer within {COMMAND_TIMEOUT_S:.0f} s; "
                         f"is slurmctld up?") from None
    if done.returncode != 0:
        raise SlurmError(f"`{' '.join(argv)}` failed ({done.returncode}): "
                         f"{(done.stderr or done.stdout).strip()[-500:]}")
    return done.stdout


def user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def jobs() -> dict[str, JobState]:
    """This user's jobs that Slurm still knows (queued, running, or finished within MinJobAge)."""
    out = run(["squeue", "-h", "--states=all", "-u", user(), "-o", "%i|%j|%T|%N|%r"])
    found = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) >= 5:
            job_id, name, state, node, reason = (p.strip() for p in parts[:5])
            found[job_id] = JobState(job_id, name, state.split()[0], node, reason)
    return found


def cancel(job_ids: list[str]) -> None:
    """scancel the given jobs (ids Slurm no longer knows are ignored)."""
    if job_ids:
        try:
            run(["scancel", *job_ids])
        except SlurmError as error:
            if "Invalid job id" not in str(error):
                raise


_GPUS = re.compile(r"\bgpu(?::[\w.-]+)?:(\d+)")


def partitions() -> dict[str, Partition]:
    out = run(["sinfo", "-h", "-o", "%P|%D|%c|%G|%m|%a|%l"])
    found: dict[str, Partition] = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) < 7:
            continue
        raw, nodes, cpus, gres, memory, avail, limit = parts[:7]
        name = raw.rstrip("*")
        gpus = sum(int(n) for n in _GPUS.findall(gres))
        row = Partition(name, int(nodes), _number(cpus), gpus, _number(memory),
                        default=raw.endswith("*"), up=avail.strip() == "up",
                        max_time_min=minutes(limit))
        if name in found:   # nodes of several shapes: their sum, and the smallest shape
            old = found[name]
            row = Partition(name, old.nodes + row.nodes, min(old.cpus, row.cpus),
                            min(old.gpus, row.gpus), min(old.memory_mb, row.memory_mb),
                            old.default, old.up or row.up, old.max_time_min)
        found[name] = row
    return found


def minutes(text: str) -> int | None:
    """Slurm's time format (`60`, `1:00:00`, `2-00:00:00`, `infinite`) in whole minutes."""
    text = text.strip()
    if not text or text.lower() in ("infinite", "unlimited", "n/a"):
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:        # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    else:           # minutes, minutes:seconds, hours:minutes:seconds
        seconds = {1: lambda: parts[0] * 60, 2: lambda: parts[0] * 60 + parts[1],
                   3: lambda: parts[0] * 3600 + parts[1] * 60 + parts[2]}[len(parts)]()
    return (int(days or 0) * 86400 + seconds) // 60


def _number(text: str) -> int:
    match = re.match(r"\d+", text.strip())
    return int(match.group()) if match else 0


@dataclass(frozen=True)
class Ending:
    """What a job that ended without the run's own result means for the run."""

    status: Status
    reason: str
    again: bool           # the seed runs again (not a result, not a failure of the run)


def ending(state: JobState, *, cancelled_by_us: bool, time_limit_min: int) -> Ending:
    """How a run ended whose job Slurm reports in `state` with no result from the node."""
    job, where = state.job_id, f" on {state.node}" if state.node else ""
    word = state.state
    if word == "CANCELLED" and cancelled_by_us:
        return Ending(Status.INTERRUPTED, f"cancelled by the harness (Slurm job {job})", False)
    if word == "CANCELLED":
        return Ending(Status.INTERRUPTED, f"Slurm job {job} was cancelled outside Nightshift "
                      f"(scancel){where}: not a result; its seed runs again", True)
    if word in ("PREEMPTED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"):
        return Ending(Status.INTERRUPTED, f"Slurm {'preempted' if word == 'PREEMPTED' else 'requeued'} "
                      f"job {job}{where}: not a result; its seed runs again", True)
    if word in ("TIMEOUT", "DEADLINE"):
        return Ending(Status.TIMEOUT, f"Slurm ended job {job}{where} at its time limit "
                      f"({time_limit_min} min)", False)
    if word == "OUT_OF_MEMORY":
        return Ending(Status.OOM, f"Slurm killed job {job}{where} for memory (its --mem)", False)
    if word in ("NODE_FAIL", "BOOT_FAIL"):
        return Ending(Status.CRASH, f"the node{where or ''} failed under Slurm job {job} "
                      f"({word}): only this run is lost", False)
    return Ending(Status.CRASH, f"Slurm job {job}{where} ended {word} without the run's result"
                  + (f" ({state.reason})" if state.reason and state.reason != "None" else ""), False)
