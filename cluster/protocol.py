"""The workers protocol: slots, jobs, outcomes, and what a backend must do with them."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

from sandbox import RunResult, RunSpec


@dataclass(frozen=True)
class Slot:
    """One worker: runs one job at a time, on its own device."""

    index: int
    device: str                              # "cuda:2", "cpu:0-3" (its cores), "cpu" (all), "ray", "slurm"
    gpu: int | None = None                   # the GPU its runs see (CUDA_VISIBLE_DEVICES)
    cpuset: tuple[int, ...] | None = None    # the cores its runs may use; None = all


@dataclass(frozen=True)
class Job:
    """One run to execute: the sandbox's spec (paths as on the harness's machine), and the
    snapshot-relative paths whose digests must not change while it runs.

    With `evaluation`, the run is two sandboxed steps on the same slot: `spec` trains (the
    candidate's code), then `evaluation` scores what it left in its out folder (the harness's
    evaluator over protected files only; `evaluation.train_out_dir` is `spec.out_dir`)."""

    run_id: str
    spec: RunSpec
    protected: tuple[str, ...] = ()
    label: str = ""
    evaluation: RunSpec | None = None


@dataclass
class JobOutcome:
    """How a job ended, as the harness records it."""

    run_id: str
    slot: int
    result: RunResult | None                 # None when the job could not run at all
    tampered: list[str] = field(default_factory=list)   # protected paths that changed
    digests: dict[str, str] = field(default_factory=dict)   # the protected paths' digests after it
    node: str | None = None                  # the cluster node it ran on, if not this machine
    environment: dict[str, Any] | None = None   # that node's facts (None: this machine's)
    started: float = 0.0                     # wall clock (epoch seconds) around the run
    ended: float = 0.0
    error: str | None = None                 # why it could not run (sandbox unavailable, ...)
    # (errno, strerror, filename) when the harness's own filesystem failed the run (a full
    # disk): the night's problem, not the run's, so it is never recorded as the run's crash
    harness_error: tuple[int, str, str | None] | None = None
    evaluation: RunResult | None = None      # the evaluation step's, when it ran
    evaluation_error: str | None = None      # why the evaluation step could not run
    # A cluster with a queue (Slurm): the job's id, how it ended in the cluster's own words
    # (PREEMPTED, CANCELLED, NODE_FAIL...; None when the run reported its own end), and the
    # seconds from the harness's submit to the run's start (staging, sbatch, the queue)
    job_id: str | None = None
    job_state: str | None = None
    queued_s: float | None = None


@dataclass(frozen=True)
class Dispatched:
    """News of a job before it ends, from a backend with a queue: it was queued as `job_id`
    (node None), or it began on `node` after `queued_s` seconds."""

    run_id: str
    job_id: str
    node: str | None = None
    queued_s: float | None = None


class ClusterUnavailable(RuntimeError):
    """The workers cannot be had (no cluster at the address, Ray not installed). The message
    says the fix."""


OnOutput = Callable[[str, str], None]        # (run_id, line)
OnDone = Callable[[JobOutcome], None]
OnDispatched = Callable[[Dispatched], None]


class Workers(ABC):
    """Runs jobs on slots, side by side, and reports each outcome to `on_done` (from a
    thread of its own: the callback must only hand the outcome over, e.g. to a queue).

    A backend with a queue also reports `Dispatched` news (queued, began) to the
    `on_dispatched` callback it was given, from its own thread, like `on_done`.

    Contract: `submit` returns at once; every submitted job produces exactly one JobOutcome,
    also when cancelled (an INTERRUPTED result) or when it could not start (`error`);
    `cancel(run_id)` and `cancel_all()` make the runs end within seconds; `close()` returns
    once nothing runs any more. A job never outlives the harness (see the sandbox contract; a
    Slurm job stops its run once the harness's heartbeat has been still for two minutes).
    """

    name: str = "abstract"
    slots: list[Slot]
    notes: tuple[str, ...] = ()              # what a person should hear at start

    @abstractmethod
    def submit(self, slot: Slot, job: Job, on_output: OnOutput | None = None) -> None:
        ...

    @abstractmethod
    def cancel(self, run_id: str) -> None:
        ...

    def cancel_all(self) -> None:
        for run_id in list(self.running()):
            self.cancel(run_id)

    @abstractmethod
    def running(self) -> dict[str, Slot]:
        """run_id -> slot of every job submitted and not reported yet."""

    def close(self) -> None:
        """Release what the backend holds (threads, connections)."""

    def describe(self) -> dict[str, Any]:
        """Facts for the ledger: the backend, its slots, where they run."""
        return {"cluster": self.name, "workers": len(self.slots),
                "devices": [slot.device for slot in self.slots]}
