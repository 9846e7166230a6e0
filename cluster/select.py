"""Choosing where runs execute, by name: `local` (this machine's workers) or `ray`."""
from __future__ import annotations

from typing import Any, Callable

from cluster.devices import auto_workers, plan_slots, usable_cores, visible_gpus
from cluster.protocol import OnDone, Workers
from sandbox import Runner

CLUSTERS = ("local", "ray")   # the first is the default


def make_workers(name: str, *, runner: Runner, sandbox: str, image: str, workers: int | None,
                 on_done: OnDone, address: str | None = None, gpus: list[int] | None = None,
                 cpus_per_run: float | None = None,
                 facts: Callable[[], dict[str, Any]] | None = None) -> Workers:
    """The workers called `name`: `workers` slots (None: one per visible GPU, else one; on
    Ray, one per GPU of the cluster, else one per node).

    `runner` runs local jobs; a Ray cluster builds the `sandbox` backend (with `image`) on
    the node each run lands on, asks `cpus_per_run` CPUs per run (default 1) and reports the
    node's `facts()` (its environment, for provenance). `gpus` overrides the GPUs found on
    this machine (tests)."""
    if name == "local":
        from cluster.local import LocalWorkers

        gpus = visible_gpus() if gpus is None else gpus
        count = workers or auto_workers(gpus)
        return LocalWorkers(runner, plan_slots(count, gpus, usable_cores()), on_done)
    if name == "ray":
        from cluster.ray_cluster import RayWorkers   # `pip install -e '.[ray]'`; only when chosen

        return RayWorkers(address=address, sandbox=sandbox, image=image, workers=workers,
                          on_done=on_done, cpus_per_run=cpus_per_run or 1.0, facts=facts)
    raise ValueError(f"unknown cluster {name!r}; choose one of {', '.join(CLUSTERS)}")
