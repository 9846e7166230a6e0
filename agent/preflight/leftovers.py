"""Runs an earlier harness of a tag left running, found and ended before a resume runs.

A run's processes die with their harness (a parent-death signal, sandbox/local.py), but a
harness killed in the wrong instant, or one from an older version, can leave a run going;
the resume must not start a second copy beside it. Every process of a local run carries
the run marker (NIGHTSHIFT_RUN_ID) and its NIGHTSHIFT_OUT, a folder under
results/<tag>/runs/, in its environment, so they are found by reading /proc. The caller
holds the tag's lock: no live harness of the tag owns them. (Docker runs carry labels and
their own deadline instead: sandbox/docker.py.)

A Slurm job does not die with the harness that submitted it: `end_jobs` cancels the tag's
jobs still queued or running, found from the ledger (the job ids of its runs in flight) and
from their names (a job whose id a killed harness never wrote down), and waits until Slurm
says they are gone, so a resume never runs beside them.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from agent.record.state import LoopState
from sandbox.local import MARKER
from sandbox.pids import pid_alive

WAIT_S = 5.0
JOBS_WAIT_S = 60.0      # a cancelled job's processes get Slurm's KillWait to go


def run_processes(runs_dir: Path) -> dict[int, str]:
    """pid -> run folder name of every process of a run under `runs_dir` (this user's, and
    everyone's when root)."""
    prefix = f"NIGHTSHIFT_OUT={os.path.abspath(runs_dir)}{os.sep}".encode()
    marker = f"{MARKER}=".encode()
    found: dict[int, str] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found     # no /proc (not Linux): nothing can be found this way
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                variables = handle.read().split(b"\0")
        except OSError:
            continue
        if not any(v.startswith(marker) for v in variables):
            continue
        for variable in variables:
            if variable.startswith(prefix):
                run = variable[len(prefix):].decode(errors="replace").split(os.sep, 1)[0]
                found[int(name)] = run
    return found


def end_leftovers(runs_dir: Path) -> list[str]:
    """SIGKILL every process of a run under `runs_dir` and wait for them to go; returns
    "pid (run <id>)" for each ended."""
    found = run_processes(runs_dir)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in found):
        time.sleep(0.05)
    return [f"{pid} (run {run})" for pid, run in sorted(found.items())]


def end_jobs(state: LoopState | None, prefix: str, *, required: bool) -> list[str]:
    """scancel the tag's Slurm jobs still queued or running: the ledger's for its runs in
    flight, and every job named `<prefix>-...`; wait until none is active. Returns
    "job (run, state)" for each. Slurm is asked only when the ledger names jobs or `required`
    (the night runs on Slurm); a Slurm that cannot be asked then raises SlurmError."""
    from cluster import slurm_queue

    named = {news.job_id for news in state.dispatched.values()} if state is not None else set()
    if not named and not required:
        return []
    try:
        jobs = slurm_queue.jobs()
    except slurm_queue.SlurmError:
        if required:
            raise
        return []     # the tag's jobs ran on a cluster this machine cannot reach now
    mine = {job_id: job for job_id, job in jobs.items()
            if job.active and (job_id in named or job.name.startswith(f"{prefix}-"))}
    if not mine:
        return []
    slurm_queue.cancel(sorted(mine))
    deadline = time.monotonic() + JOBS_WAIT_S
    while time.monotonic() < deadline:
        still = slurm_queue.jobs()
        if not any(still[j].active for j in mine if j in still):
            break
        time.sleep(0.5)
    return [f"{job_id} ({job.name.removeprefix(prefix + '-')}, {job.state.lower()})"
            for job_id, job in sorted(mine.items())]
