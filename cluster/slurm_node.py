"""What runs on a Slurm node: one job's run, in the local sandbox there.

submitit starts `run_on_node` in the job (cluster/slurm.py submits it). The job's paths are
already those of the shared directory (cluster/staging.py moved them there on the harness's
side): the snapshot and the data are read from it in place; the run's own folder is made in the
node's scratch space (`$TMPDIR`: an overlay's upper layer or a copy of the snapshot is better
on a local disk than on NFS), run there with `cluster.execute.execute` exactly as on the
harness's machine, and moved into the shared run folder when it ends, for the harness to
bring back. The answer (an `JobOutcome`, its paths those of the shared folder) goes back through
submitit's result file.

Slurm ends a job with SIGTERM (scancel, preemption, the time limit): the handler stops the run
the way the harness stops a local one (the sandbox kills its tree, the run is INTERRUPTED)
and says which signal came, so the harness can ask Slurm what it meant. A file
`.nightshift-began.json` in the shared run folder, written first, tells the harness that the
job left the queue, where, and when; `.nightshift-output` gets each line the run prints as it
prints it, which the harness follows for its live view (what a local worker's `on_output` gets).
And a job never outlives its harness for long: when the harness's heartbeat stops (a kill -9),
the run is stopped within `HARNESS_LOST_S` (the next `run --tag` cancels such jobs at once).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from cluster.execute import execute
from cluster.protocol import Job, JobOutcome, Slot
from cluster.staging import Relocation, bring_back, relocate, remove_tree, run_folder

BEGAN = ".nightshift-began.json"
HARNESS_LOST_S = 120.0              # a heartbeat unchanged this long: its harness is gone
OUTPUT = ".nightshift-output"       # the run's lines as it prints them, for the harness to follow
PRIVATE = (BEGAN, OUTPUT)           # the harness's files in the shared run folder, not the run's


def node_name() -> str:
    """Slurm's name of this node (two nodes may share a host, as on the CI cluster)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def visible_gpu() -> int | None:
    """The GPU Slurm gave this job (`--gres=gpu:1` sets CUDA_VISIBLE_DEVICES), else None."""
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",")[0].strip()
    return int(first) if first.isdigit() else None


def run_on_node(job: Job, sandbox: str, image: str,
                facts: Callable[[], dict[str, Any]] | None = None,
                heartbeat: str | None = None, lost_s: float = HARNESS_LOST_S) -> dict[str, Any]:
    """The job: run `job` in the `sandbox` backend of this node. Returns {"outcome", "began",
    "signal"} (`signal`: the name of the signal that stopped it, or None). `heartbeat` is the
    harness's file in the shared folder (see `watch_harness`)."""
    from sandbox.select import make_runner

    began = time.time()
    shared_run = run_folder(job)
    (shared_run / BEGAN).write_text(json.dumps({
        "node": node_name(), "host": socket.gethostname(), "time": began,
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "restarts": int(os.environ.get("SLURM_RESTART_COUNT") or 0)}))
    stop, caught = threading.Event(), []

    def stopping(signum: int, _frame: Any) -> None:
        caught.append(signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2):
        signal.signal(signum, stopping)
    if heartbeat is not None:
        watch_harness(Path(heartbeat), lost_s, stop, caught)
    scratch_root = os.environ.get("SLURM_TMPDIR") or os.environ.get("TMPDIR") or tempfile.gettempdir()
    scratch = Path(tempfile.mkdtemp(prefix=f"nightshift-{job.run_id}-", dir=scratch_root))
    try:
        _skeleton(shared_run, scratch / "run")
        here = Relocation.of({shared_run: scratch / "run"}, keep=(Path("/"),))
        gpu = visible_gpu()
        slot = Slot(0, f"cuda:{gpu}" if gpu is not None else "cpu", gpu=gpu)
        try:
            runner, _ = make_runner(sandbox, image=image)
            with open(shared_run / OUTPUT, "a", encoding="utf-8", buffering=1) as lines:
                outcome = execute(runner, relocate(job, here), slot, stop,
                                  lambda line: lines.write(line.rstrip("\n") + "\n"))
        except Exception as error:   # the backend could not even be made here: this run's failure
            outcome = JobOutcome(job.run_id, 0, None, started=began, ended=time.time(),
                              error=f"{type(error).__name__}: {error}")
        if outcome.harness_error is not None:
            # The node's disk, not the harness's: it fails this run only, never the night.
            outcome.error = f"on node {node_name()}: {outcome.error}"
            outcome.harness_error = None
        bring_back(scratch / "run", shared_run)
        outcome = relocate(outcome, here.inverse())
    finally:
        remove_tree(scratch)
    outcome.node = node_name()
    outcome.environment = facts() if facts else None
    return {"outcome": outcome, "began": began, "signal": caught[0] if caught else None}


def watch_harness(heartbeat: Path, lost_s: float, stop: threading.Event, caught: list[str]) -> None:
    """Stop the run once the harness's heartbeat (a counter it rewrites every few seconds)
    has not changed for `lost_s` by this node's own clock (no clock is compared with the
    harness's): a harness killed with -9 leaves no job running past that, even if no one runs
    the tag again. A job that starts after its harness died stops at once the same way."""
    def read() -> str | None:
        try:
            return heartbeat.read_text()
        except OSError:
            return None

    def watch() -> None:
        seen, since = read(), time.monotonic()
        while not stop.wait(min(5.0, lost_s / 4)):
            now = read()
            if now != seen:
                seen, since = now, time.monotonic()
            elif time.monotonic() - since > lost_s:
                caught.append("HARNESS_LOST")
                stop.set()

    threading.Thread(target=watch, name="nightshift-harness-watch", daemon=True).start()


def _skeleton(source: Path, dest: Path) -> None:
    """The folders the harness made for the run (out/, ...), empty, in scratch."""
    for current, dirs, _ in os.walk(source):
        rel = Path(current).relative_to(source)
        (dest / rel).mkdir(parents=True, exist_ok=True)


def probe(token: str, expected: str) -> dict[str, Any]:
    """A job that reads the file the harness wrote in the shared directory: whether this node
    sees the folder, at the same path, with what the harness put there."""
    path = Path(token)
    seen = path.read_text() if path.exists() else None
    return {"node": node_name(), "seen": seen == expected, "exists": path.parent.is_dir()}
