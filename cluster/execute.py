"""Running one job on one slot, the same way in a local thread, a Ray task or a Slurm job.

A job is one sandboxed step, or two: the training step (the candidate's code), then, when the
job has an `evaluation`, the evaluation step, which scores what training left in its out
folder in a sandbox of its own (its own process, deadline, view of the data). Both run on the
slot's device, one after the other; the protected files' digests are taken around the pair.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable

from cluster.protocol import Job, JobOutcome, Slot
from sandbox import Runner, RunResult, RunSpec, SandboxUnavailable, Status
from sandbox.digest import digest_files, tampered


def on_slot(job: Job, slot: Slot) -> Job:
    """The job with the slot's device in its limits (its GPU, its cores), both steps."""
    def placed(spec: RunSpec) -> RunSpec:
        limits = dataclasses.replace(spec.limits, gpu=slot.gpu, cpuset=slot.cpuset)
        return dataclasses.replace(spec, limits=limits)

    return dataclasses.replace(job, spec=placed(job.spec),
                               evaluation=placed(job.evaluation) if job.evaluation else None)


def execute(runner: Runner, job: Job, slot: Slot, stop: threading.Event,
            on_output: Callable[[str], None] | None = None) -> JobOutcome:
    """Run `job` on `slot` with `runner`; digests of its protected paths around it. Never
    raises for the run's own failures: they are in the result (or `error`; `harness_error`
    when the harness's filesystem failed it)."""
    job = on_slot(job, slot)
    before = digest_files(job.spec.snapshot_dir, job.protected)
    started = time.time()
    try:
        result = runner.run(job.spec, on_output=on_output, stop=stop)
        evaluation, evaluation_error = _evaluate(runner, job, result, stop, on_output)
    except SandboxUnavailable as error:
        return JobOutcome(job.run_id, slot.index, None, started=started, ended=time.time(),
                       error=str(error))
    except OSError as error:   # the run's folder, its log: the harness's disk failed, not the run
        return JobOutcome(job.run_id, slot.index, None, started=started, ended=time.time(),
                       error=f"{type(error).__name__}: {error}",
                       harness_error=(error.errno or 0, error.strerror or str(error),
                                      None if error.filename is None else str(error.filename)))
    ended = time.time()
    after = digest_files(job.spec.snapshot_dir, job.protected)
    return JobOutcome(job.run_id, slot.index, result, tampered=tampered(before, after), digests=after,
                   started=started, ended=ended, evaluation=evaluation, evaluation_error=evaluation_error)


def _evaluate(runner: Runner, job: Job, trained: RunResult, stop: threading.Event,
              on_output: Callable[[str], None] | None) -> tuple[RunResult | None, str | None]:
    """The evaluation step, when the job has one and training ended well enough to score
    (a Ctrl-C during it is a RunInterrupted carrying the evaluation's INTERRUPTED result, as during
    training)."""
    if job.evaluation is None or trained.status != Status.OK or stop.is_set():
        return None, None
    try:
        return runner.run(job.evaluation, on_output=on_output, stop=stop), None
    except SandboxUnavailable as error:
        return None, str(error)
