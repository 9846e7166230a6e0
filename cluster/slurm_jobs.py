"""One Slurm job as the harness asks for it: what each run requests (`Request`: partition,
GPU or CPUs, memory, time), submitit's executor with a scrubbed environment, the files
submitit leaves behind, and the start's probe that the nodes see the shared directory.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster import slurm_queue as queue
from cluster.protocol import ClusterUnavailable, Job
from cluster.slurm_node import probe
from cluster.slurm_settings import SlurmSettings
from sandbox import RunSpec

NODE_MEMORY_MB = 512  # what the node's side (Python, submitit) needs beside the sandbox's limit
AUTO_MAX = 16         # `workers: auto` on Slurm: what the partition runs at once, at most this
SIGNAL_DELAY_S = 60   # submitit's warning signal before the time limit (the sandbox's deadline
                      # comes first: the limit is budget + grace + start-up)
PASSED_ENV = ("PATH", "PYTHONPATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "SHELL",
              "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "LD_LIBRARY_PATH", "SLURM_CONF",
              "MODULEPATH", "MODULESHOME", "LMOD_CMD", "CUDA_HOME")
"""What of the harness's environment reaches a job (LC_* too): never a key or a token."""


def job_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = dict(os.environ if environ is None else environ)
    return {k: v for k, v in environ.items() if k in PASSED_ENV or k.startswith("LC_")}


@dataclass(frozen=True)
class Request:
    """What every run of the night asks of Slurm."""

    settings: SlurmSettings
    partition: queue.Partition
    slots: int                 # jobs queued or running at once (--workers)
    gpus: int                  # 1: --gres=gpu:1; 0: CPUs only
    cpus: int                  # --cpus-per-task
    memory_mb: int | None      # --mem; None: the cluster's default (or slurm.sbatch's mem)

    @classmethod
    def plan(cls, settings: SlurmSettings, partitions: dict[str, queue.Partition],
             workers: int | None, cpus_per_run: float | None, memory_mb: int | None) -> "Request":
        """One GPU per run where the partition has GPUs (or slurm.gpus says), else the CPUs a
        worker's share of a node would be: a node's CPUs over its GPUs, or over the workers
        that would share a node if the jobs spread evenly (limits.cpus overrides either)."""
        part = _partition(partitions, settings.partition)
        gpus = settings.gpus if settings.gpus is not None else int(part.gpus > 0)
        if gpus and not part.gpus:
            raise ClusterUnavailable(f"slurm.gpus: 1, but partition {part.name} has no GPUs (sinfo "
                                     f"shows no gpu gres); choose a GPU partition or set gpus: 0")
        slots = workers or max(1, min(AUTO_MAX, part.nodes * (part.gpus if gpus else 1)))
        per_node = part.gpus if gpus else math.ceil(slots / max(1, part.nodes))
        cpus = math.ceil(cpus_per_run) if cpus_per_run else max(1, part.cpus // max(1, per_node))
        own_memory = not any(k in settings.sbatch for k in ("mem", "mem-per-cpu", "mem-per-gpu"))
        memory = memory_mb + NODE_MEMORY_MB if memory_mb and own_memory else None
        if memory and 1 < part.memory_mb < memory:
            raise ClusterUnavailable(
                f"each run asks Slurm for {memory} MB (limits.memory + {NODE_MEMORY_MB} MB for the "
                f"node's side), but the nodes of partition {part.name} have {part.memory_mb} MB; "
                f"lower limits.memory or set slurm.sbatch.mem")
        return cls(settings, part, slots, gpus, cpus, memory)

    def parameters(self, name: str, time_min: int, *, run: bool = True) -> dict[str, Any]:
        """submitit's parameters for one job (`run` False: the probe's one CPU)."""
        extra: dict[str, Any] = {"no-requeue": True, **self.settings.sbatch}
        if run and self.gpus:
            extra["gres"] = "gpu:1"
        if run and self.memory_mb:
            extra["mem"] = f"{self.memory_mb}M"
        return dict(job_name=name, time=time_min, nodes=1, cpus_per_task=self.cpus if run else 1,
                    partition=self.partition.name, account=self.settings.account,
                    qos=self.settings.qos, setup=list(self.settings.setup), use_srun=False,
                    signal_delay_s=SIGNAL_DELAY_S, stderr_to_stdout=True, additional_parameters=extra)

    def describe(self) -> dict[str, Any]:
        return {"partition": self.partition.name, "account": self.settings.account,
                "qos": self.settings.qos, "gpus_per_run": self.gpus, "cpus_per_run": self.cpus,
                "memory_mb_per_run": self.memory_mb}

    def summary(self) -> str:
        each = "1 GPU" if self.gpus else f"{self.cpus} CPU{'s' if self.cpus > 1 else ''}"
        return f"partition {self.partition.name}, up to {self.slots} jobs queued or running, {each} each"


def _partition(partitions: dict[str, queue.Partition], name: str | None) -> queue.Partition:
    if name is None:
        default = next((p for p in partitions.values() if p.default), None)
        if default is None:
            raise ClusterUnavailable(f"this cluster has no default partition; set slurm.partition "
                                     f"(one of {', '.join(partitions) or 'none'})")
        return default
    if name not in partitions:
        raise ClusterUnavailable(f"slurm.partition {name!r} is not a partition of this cluster "
                                 f"(sinfo shows {', '.join(partitions) or 'none'})")
    return partitions[name]


def make_executor(folder: Path) -> Any:
    """submitit's Slurm executor over `folder`, whose sbatch gets only `job_environment()`:
    sbatch exports its own environment to the job, and a key must never reach a node."""
    from submitit.slurm.slurm import SlurmExecutor   # `pip install -e '.[slurm]'`

    environment = job_environment()

    class Executor(SlurmExecutor):
        def _make_submission_command(self, path: Path) -> list[str]:
            return ["env", "-i", *(f"{k}={v}" for k, v in environment.items()), "sbatch", str(path)]

    return Executor(folder=folder, max_num_timeout=0)


def job_deadline_s(job: Job) -> float:
    """The sandbox's deadlines of every RunSpec the job holds (a run may be several steps)."""
    found: list[float] = []

    def walk(value: Any) -> None:
        if isinstance(value, RunSpec):
            found.append(value.deadline_s)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for item in dataclasses.fields(value):
                walk(getattr(value, item.name))
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)

    walk(job)
    return sum(found)


def remove_job_files(paths: Any) -> None:
    """submitit's files of one job: its pickled call and answer, its script (and the link
    submitit leaves to it), Slurm's log."""
    for path in (paths.result_pickle, paths.submitted_pickle, paths.stdout, paths.stderr,
                 paths.submission_file):
        try:
            os.unlink(path)
        except OSError:
            pass
    for link in Path(paths.folder).glob(".submission_file_*.sh"):
        if link.is_symlink() and not link.exists():
            link.unlink(missing_ok=True)


def probe_nodes(executor: Any, request: Request, area: Path, shared: Path, name: str,
                wait_s: float) -> str:
    """A one-CPU job that reads a file written here, so a node that does not see the shared
    directory is a clear error at start (ClusterUnavailable) rather than a night of crashed
    runs. A probe still queued after `wait_s` is cancelled and the night goes on: each run
    then meets the folder on its own node. Returns a line for the start's notes."""
    from submitit.core.utils import pickle_load

    token = area / f"probe-{uuid.uuid4().hex[:8]}"
    expected = uuid.uuid4().hex
    token.write_text(expected)
    try:
        executor.update_parameters(**request.parameters(name, 2, run=False))
        job = executor.submit(probe, str(token), expected)
    except Exception as error:
        token.unlink(missing_ok=True)
        raise ClusterUnavailable(f"sbatch refused the start's probe job: {error}") from None
    deadline, state = time.monotonic() + wait_s, None
    try:
        while time.monotonic() < deadline:
            if job.paths.result_pickle.exists():
                kind, answer = pickle_load(job.paths.result_pickle)
                if kind != "success" or not answer["seen"]:
                    node = answer["node"] if kind == "success" else "a node"
                    raise ClusterUnavailable(
                        f"{node} does not see slurm.shared_dir {shared} as this machine does "
                        f"(the probe job {job.job_id} found no {token.name} there); give a folder "
                        f"every node mounts at the same path")
                return f"slurm: {request.summary()}; {answer['node']} sees {shared} (probe job {job.job_id})"
            state = queue.jobs().get(job.job_id)
            if state is not None and not state.active:
                time.sleep(1.0)        # its answer may show a moment after its end
                if not job.paths.result_pickle.exists():
                    log = (job.paths.stdout.read_text(errors="replace")[-800:].strip()
                           if job.paths.stdout.exists() else "")
                    raise ClusterUnavailable(
                        f"the start's probe job {job.job_id} ended {state.state} without reading "
                        f"slurm.shared_dir {shared}: the nodes may not see it at that path, or cannot "
                        f"run {sys.executable} with Nightshift importable"
                        + (f"; its log: {log}" if log else " (it left no log there)"))
            time.sleep(0.2)
        queue.cancel([job.job_id])
        why = f" ({state.state}: {state.reason})" if state is not None else ""
        return (f"slurm: {request.summary()}; the probe job {job.job_id} waited over {wait_s:.0f} s "
                f"in the queue{why} and was cancelled: each run meets {shared} on its own node")
    finally:
        token.unlink(missing_ok=True)
        remove_job_files(job.paths)
