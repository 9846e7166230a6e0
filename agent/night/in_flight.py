"""The night's runs in flight: each launched on a free worker, its lines read live as it
prints them (its curve, the display), cancelled when its experiment no longer needs it, and
the snapshots of commits no run needs any more released."""
from __future__ import annotations

from agent.night.priority import RunRequest
from agent.record.curves import Curve
from agent.record.events import Role
from agent.run.executor import RunExecutor
from agent.run.live import LiveCurves
from agent.run.observer import Observer
from cluster.protocol import Job, Slot, Workers


class InFlight:
    """Used from the scheduler's thread only (the workers' threads reach `_output`, which
    hands lines to the thread-safe LiveCurves and to the display)."""

    def __init__(self, workers: Workers, executor: RunExecutor, observer: Observer,
                 live: LiveCurves) -> None:
        self.workers, self.executor, self.observer, self.live = workers, executor, observer, live
        self.runs: dict[str, tuple[Job, RunRequest, Slot]] = {}   # run_id -> what it is, where
        self._unused: set[str] = set()          # snapshots to drop once their runs are done

    def __bool__(self) -> bool:
        return bool(self.runs)

    def __contains__(self, run_id: str) -> bool:
        return run_id in self.runs

    def free_slots(self) -> list[Slot]:
        busy = {slot.index for _, _, slot in self.runs.values()}
        return [slot for slot in self.workers.slots if slot.index not in busy]

    def keys(self) -> set[tuple[str, int, Role]]:
        """(commit, seed, role) of every run in flight: what must not be started twice."""
        return {(r.commit, r.seed, r.role) for _, r, _ in self.runs.values()}

    def launch(self, request: RunRequest, slot: Slot) -> None:
        job = self.executor.prepare(request.commit, request.seed, request.role, request.experiment,
                                    slot=slot, label=request.label)
        self.observer.run_started(job.run_id, slot, request.commit, request.seed, request.role,
                                  request.experiment, job.spec.budget_s, request.label)
        self.live.start(job.run_id, job.spec.budget_s)
        self.workers.submit(slot, job, on_output=self._output)
        self.runs[job.run_id] = (job, request, slot)

    def _output(self, run_id: str, line: str) -> None:
        """A line a run printed (on a worker's thread): its curve, and the display."""
        self.live.feed(run_id, line)
        self.observer.output(run_id, line)

    def landed(self, run_id: str) -> tuple[Job, Curve | None]:
        """A run's outcome arrived: its job and its whole curve; it is in flight no more."""
        job, _, _ = self.runs.pop(run_id)
        return job, self.live.finish(run_id)

    def candidates(self) -> list[tuple[str, Job]]:
        """(run_id, job) of every candidate run in flight."""
        return [(run_id, job) for run_id, (job, request, _) in self.runs.items()
                if request.role == Role.CANDIDATE]

    def of(self, experiment_id: str) -> bool:
        """Whether a run of `experiment_id` is still in flight."""
        return any(r.experiment == experiment_id for _, r, _ in self.runs.values())

    def reference_curve(self, commit: str, seed: int) -> Curve | None:
        """The curve so far of `commit`'s reference run on `seed`, when one is in flight."""
        for run_id, (_, request, _) in self.runs.items():
            if (request.commit, request.seed, request.role) == (commit, seed, Role.REFERENCE):
                return self.live.curve(run_id)
        return None

    def cancel(self, experiment_id: str) -> None:
        """Stop every run of `experiment_id` (each still reports how it ended)."""
        for run_id, (_, request, _) in list(self.runs.items()):
            if request.experiment == experiment_id:
                self.workers.cancel(run_id)

    def unused(self, commit: str) -> None:
        """No more runs of `commit` will be started: its snapshot goes once its runs ended."""
        self._unused.add(commit)
        self.drop_unused()

    def drop_unused(self) -> None:
        in_use = {request.commit for _, request, _ in self.runs.values()}
        for commit in list(self._unused - in_use):
            self.executor.release(commit)
            self._unused.discard(commit)
