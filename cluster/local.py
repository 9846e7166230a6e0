"""Workers on this machine: one thread per run in flight, each waiting on its sandboxed
process, so N runs proceed side by side while the harness's main thread stays free."""
from __future__ import annotations

import threading
from typing import Any

from cluster.execute import execute
from cluster.protocol import Job, OnDone, OnOutput, JobOutcome, Slot, Workers
from sandbox import Runner


class LocalWorkers(Workers):
    name = "local"

    def __init__(self, runner: Runner, slots: list[Slot], on_done: OnDone) -> None:
        self.runner, self.slots, self.on_done = runner, slots, on_done
        self._lock = threading.Lock()
        self._jobs: dict[str, tuple[Slot, threading.Event, threading.Thread]] = {}

    def submit(self, slot: Slot, job: Job, on_output: OnOutput | None = None) -> None:
        stop = threading.Event()
        lines = (lambda line: on_output(job.run_id, line)) if on_output else None

        def work() -> None:
            try:
                outcome = execute(self.runner, job, slot, stop, lines)
            except BaseException as error:   # a harness bug in a thread must still report
                outcome = JobOutcome(job.run_id, slot.index, None, error=f"{type(error).__name__}: {error}")
            with self._lock:
                self._jobs.pop(job.run_id, None)
            self.on_done(outcome)

        # Not a daemon: a run is never abandoned mid-flight; cancel() ends it instead.
        thread = threading.Thread(target=work, name=f"nightshift-run-{job.run_id}")
        with self._lock:
            self._jobs[job.run_id] = (slot, stop, thread)
        thread.start()

    def cancel(self, run_id: str) -> None:
        with self._lock:
            job = self._jobs.get(run_id)
        if job is not None:
            job[1].set()

    def running(self) -> dict[str, Slot]:
        with self._lock:
            return {run_id: slot for run_id, (slot, _, _) in self._jobs.items()}

    def close(self, timeout_s: float = 60.0) -> None:
        with self._lock:
            threads = [thread for _, _, thread in self._jobs.values()]
        for thread in threads:
            thread.join(timeout_s)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "sandbox": self.runner.name}
