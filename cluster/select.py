"""Choosing where runs execute, by name: `local` (this machine's workers), `ray` or `slurm`."""
from __future__ import annotations

from typing import Any, Callable

from cluster.devices import auto_workers, plan_slots, usable_cores, visible_gpus
from cluster.protocol import OnDispatched, OnDone, Workers
from cluster.slurm_settings import SlurmSettings
from sandbox import Runner

CLUSTERS = ("local", "ray", "slurm")   # the first is the default


def make_workers(name: str, *, runner: Runner, sandbox: str, image: str, workers: int | None,
                 on_done: OnDone, address: str | None = None, gpus: list[int] | None = None,
                 cpus_per_run: float | None = None,
                 facts: Callable[[], dict[str, Any]] | None = None,
                 slurm: SlurmSettings | None = None, job_prefix: str = "nightshift",
                 memory_mb: int | None = None,
                 on_dispatched: OnDispatched | None = None) -> Workers:
    """The workers called `name`: `workers` slots (None: one per visible GPU, else one; on
    Ray, one per GPU of the cluster, else one per node; on Slurm, what the partition runs at
    once, at most 16).

    `runner` runs local jobs; a Ray cluster or a Slurm node builds the `sandbox` backend
    (with `image`) where each run lands, asks `cpus_per_run` CPUs per run (Ray: default 1;
    Slurm: default a worker's share of a node) and reports the node's `facts()` (its
    environment, for provenance). Slurm takes program.md's `slurm` settings, names its jobs
    `<job_prefix>-<run id>`, asks `memory_mb` (the sandbox's limit) plus the node's share,
    and reports queueing to `on_dispatched`. `gpus` overrides the GPUs found on this machine
    (tests)."""
    if name == "local":
        from cluster.local import LocalWorkers

        gpus = visible_gpus() if gpus is None else gpus
        count = workers or auto_workers(gpus)
        return LocalWorkers(runner, plan_slots(count, gpus, usable_cores()), on_done)
    if name == "ray":
        from cluster.ray_cluster import RayWorkers   # `pip install -e '.[ray]'`; only when chosen

        return RayWorkers(address=address, sandbox=sandbox, image=image, workers=workers,
                          on_done=on_done, cpus_per_run=cpus_per_run or 1.0, facts=facts)
    if name == "slurm":
        from cluster.slurm import SlurmWorkers   # `pip install -e '.[slurm]'`; only when chosen

        return SlurmWorkers(settings=slurm or SlurmSettings(), sandbox=sandbox, image=image,
                            workers=workers, on_done=on_done, job_prefix=job_prefix,
                            on_dispatched=on_dispatched, cpus_per_run=cpus_per_run,
                            memory_mb=memory_mb, facts=facts)
    raise ValueError(f"unknown cluster {name!r}; choose one of {', '.join(CLUSTERS)}")
