"""Running one job on one slot, the same way in a local thread and in a Ray task."""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable

from cluster.protocol import Job, Outcome, Slot
from sandbox import Runner, SandboxUnavailable
from sandbox.digest import digest_files, tampered


def on_slot(job: Job, slot: Slot) -> Job:
    """The job with the slot's device in its limits (its GPU, its cores)."""
    limits = dataclasses.replace(job.spec.limits, gpu=slot.gpu, cpuset=slot.cpuset)
    return dataclasses.replace(job, spec=dataclasses.replace(job.spec, limits=limits))


def execute(runner: Runner, job: Job, slot: Slot, stop: threading.Event,
            on_output: Callable[[str], None] | None = None) -> Outcome:
    """Run `job` on `slot` with `runner`; digests of its protected paths around it. Never
    raises for the run's own failures: they are in the result (or `error`)."""
    job = on_slot(job, slot)
    before = digest_files(job.spec.snapshot_dir, job.protected)
    started = time.time()
    try:
        result = runner.run(job.spec, on_output=on_output, stop=stop)
    except SandboxUnavailable as error:
        return Outcome(job.run_id, slot.index, None, started=started, ended=time.time(),
                       error=str(error))
    ended = time.time()
    changed = tampered(before, digest_files(job.spec.snapshot_dir, job.protected))
    return Outcome(job.run_id, slot.index, result, tampered=changed, started=started, ended=ended)
