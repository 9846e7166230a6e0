"""Choosing where runs execute, by name: `local` (this machine's workers) or `ray`."""
from __future__ import annotations

from cluster.devices import auto_workers, plan_slots, usable_cores, visible_gpus
from cluster.protocol import OnDone, Workers
from sandbox import Runner

CLUSTERS = ("local", "ray")   # the first is the default


def make_workers(name: str, *, runner: Runner, sandbox: str, image: str, workers: int | None,
                 on_done: OnDone, address: str | None = None,
                 gpus: list[int] | None = None) -> Workers:
    """The workers called `name`: `workers` slots (None: one per visible GPU, else one).

    `runner` runs local jobs; a Ray cluster builds the `sandbox` backend (with `image`) on
    the node each run lands on. `gpus` overrides the GPUs found on this machine (tests)."""
    if name == "local":
        from cluster.local import LocalWorkers

        gpus = visible_gpus() if gpus is None else gpus
        count = workers or auto_workers(gpus)
        return LocalWorkers(runner, plan_slots(count, gpus, usable_cores()), on_done)
    if name == "ray":
        from cluster.ray_cluster import RayWorkers   # `pip install -e '.[ray]'`; only when chosen

        return RayWorkers(address=address, sandbox=sandbox, image=image, workers=workers,
                          on_done=on_done)
    raise ValueError(f"unknown cluster {name!r}; choose one of {', '.join(CLUSTERS)}")
