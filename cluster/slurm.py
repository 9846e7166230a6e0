"""Workers on a Slurm cluster: each run is a Slurm job, submitted with submitit, sandboxed on
the node it lands on.

    nightshift run --cluster slurm --workers 8      # program.md: cluster: slurm, slurm: {...}

`pip install -e '.[slurm]'` where the harness runs (a login node); the nodes run the same
interpreter (`sys.executable`, as on a cluster whose software lives on a shared filesystem)
and import Nightshift from the same place. The researcher, git and the ledger stay here.
Everything travels through `slurm.shared_dir` (a folder every node sees at the same path;
cluster/slurm_area.py): the job's inputs copied once, its run folder, submitit's files. The
node runs the job in its own scratch (cluster/slurm_node.py) and moves the log, result.json,
the outputs and its working layer into the shared run folder; the harness moves them into
`results/<tag>/runs/<run id>/`, where the night keeps what `keep:` keeps. Two threads here:
one stages and submits, one watches (the shared folder every 0.5 s, squeue every 3 s).

Each job asks for one GPU (`--gres=gpu:1`) where the partition has GPUs, else the CPUs a
worker's share of a node would be (program.md `limits.cpus` for another number), `--mem` the
sandbox's memory limit plus the node's own share, and `--time` budget + grace + start-up, so
that Slurm cuts a run only once the sandbox would have. `--workers N` is the number of jobs
queued or running at once. Jobs are submitted `--no-requeue`: a preempted job ends, and the
run is recorded as not a result and run again on its seed (a new job), instead of Slurm
restarting it behind the harness's back; a node that fails fails only its run.

Job names are `<job prefix>-<run id>`, the prefix naming the tag and its results folder, so a
harness killed with jobs queued leaves them findable: the next `run --tag` cancels them
(agent/preflight/leftovers.py). Ctrl-C and the loop's exits cancel them through `cancel_all`. And
the harness rewrites a heartbeat in the shared folder every few seconds; a job whose harness
stopped beating stops its run by itself (cluster/slurm_node.watch_harness).
"""
from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from cluster import slurm_queue as queue
from cluster.protocol import (ClusterUnavailable, Dispatched, Job, OnDispatched, OnDone, OnOutput,
                              JobOutcome, Slot, Workers)
from cluster.slurm_area import SharedArea
from cluster.slurm_jobs import Request, job_deadline_s, make_executor, probe_nodes, remove_job_files
from cluster.slurm_node import BEGAN, HARNESS_LOST_S, OUTPUT, run_on_node
from cluster.slurm_settings import SlurmSettings, check_shared_dir, time_limit_min
from cluster.staging import run_folder
from sandbox import RunResult, Status

POLL_S = 0.5          # how often the shared folder is looked at (files: cheap)
SQUEUE_S = 3.0        # how often squeue is asked (one call for every job)
RESULT_WAIT_S = 15.0  # a job Slurm says ended, whose answer the filesystem has not shown yet
PROBE_WAIT_S = 60.0   # how long the start waits for the probe job to run
HEARTBEAT_S = 5.0     # how often the harness rewrites its heartbeat for the nodes


@dataclasses.dataclass
class _Entry:
    """One run handed to Slurm, from submit() to its JobOutcome."""

    job: Job                        # as the harness knows it (its own paths)
    slot: Slot
    submitted: float                # when submit() was called
    shared_run: Path
    time_limit_min: int
    job_id: str | None = None
    paths: Any = None               # submitit's JobPaths (its answer, its logs)
    began: float | None = None
    node: str | None = None
    cancelled: bool = False
    ended_seen: float | None = None   # when Slurm first said it ended, awaiting its answer
    inputs: tuple[Path, ...] = ()
    on_output: OnOutput | None = None
    output_read: int = 0            # bytes of the run's output file passed on so far


class SlurmWorkers(Workers):
    name = "slurm"

    def __init__(self, *, settings: SlurmSettings, sandbox: str, image: str, workers: int | None,
                 on_done: OnDone, job_prefix: str, on_dispatched: OnDispatched | None = None,
                 cpus_per_run: float | None = None, memory_mb: int | None = None,
                 facts: Callable[[], dict[str, Any]] | None = None,
                 probe_wait_s: float = PROBE_WAIT_S, harness_lost_s: float = HARNESS_LOST_S) -> None:
        try:
            import submitit  # noqa: F401  (`pip install -e '.[slurm]'`; only when chosen)
        except ImportError as error:
            raise ClusterUnavailable("the Slurm backend needs submitit: pip install -e '.[slurm]'") from error
        try:
            self.shared = check_shared_dir(settings.shared_dir, "slurm.shared_dir")
            self.request = Request.plan(settings, queue.partitions(), workers, cpus_per_run, memory_mb)
        except (ValueError, queue.SlurmError) as error:
            raise ClusterUnavailable(str(error)) from None
        self.settings, self.sandbox, self.image, self.facts = settings, sandbox, image, facts
        self.on_done, self.on_dispatched, self.prefix = on_done, on_dispatched, job_prefix
        self.slots = [Slot(i, "slurm") for i in range(self.request.slots)]
        self.area = SharedArea(self.shared, job_prefix)
        self._executor = make_executor(self.area.submitit)
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._submit_queue: list[str] = []
        self._submitted: list[str] = []              # every job id of this session
        self._forgotten: list[Any] = []              # submitit paths of the jobs reported
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._last_squeue = 0.0
        self.harness_lost_s = harness_lost_s
        self.notes = (probe_nodes(self._executor, self.request, self.area.root, self.shared,
                                  f"{job_prefix}-probe", probe_wait_s),)
        self._threads = [
            threading.Thread(target=self._submitter, name="nightshift-slurm-submit", daemon=True),
            threading.Thread(target=self._watcher, name="nightshift-slurm-watch", daemon=True)]
        for thread in self._threads:
            thread.start()

    # ---- the Workers protocol --------------------------------------------------------------

    def submit(self, slot: Slot, job: Job, on_output: OnOutput | None = None) -> None:
        limits = dataclasses.replace(job.spec.limits, cpuset=None, gpu=None)   # the node's to pick
        job = dataclasses.replace(job, spec=dataclasses.replace(job.spec, limits=limits))
        entry = _Entry(job=job, slot=slot, submitted=time.time(),
                       shared_run=self.area.run_dir(job.run_id),
                       time_limit_min=time_limit_min(job_deadline_s(job), self.settings),
                       on_output=on_output)
        with self._lock:
            self._entries[job.run_id] = entry
            self._submit_queue.append(job.run_id)
        self._wake.set()

    def cancel(self, run_id: str) -> None:
        self._cancel([run_id])

    def cancel_all(self) -> None:
        self._cancel(list(self.running()))

    def running(self) -> dict[str, Slot]:
        with self._lock:
            return {run_id: entry.slot for run_id, entry in self._entries.items()}

    def close(self, timeout_s: float = 60.0) -> None:
        """Cancel what is still queued or running (none, after a normal end), wait for their
        outcomes, stop the threads, and return once Slurm says none of this session's jobs
        is active any more (a job whose run answered may still be COMPLETING)."""
        if self.running():
            self.cancel_all()
        deadline = time.monotonic() + timeout_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        self._closing.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(5.0)
        with self._lock:
            left = [e.job_id for e in self._entries.values() if e.job_id]
        try:
            queue.cancel(left)   # past the wait: nothing of the tag stays queued however it ended
            while time.monotonic() < deadline:
                jobs = queue.jobs()
                if not any(jobs[j].active for j in self._submitted if j in jobs):
                    break
                time.sleep(0.2)
        except queue.SlurmError as error:
            print(f"nightshift: {error}", file=sys.stderr)
        # a job cancelled as it finished may write its answer after it was forgotten: once
        # none of this session's jobs is active, nothing writes there any more
        for paths in self._forgotten:
            remove_job_files(paths)
        self.area.close()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "sandbox": self.sandbox, **self.request.describe(),
                **self.area.describe(), "job_prefix": self.prefix}

    # ---- submitting --------------------------------------------------------------------------

    def _submit_one(self, entry: _Entry, job: Job) -> Any:
        self._executor.update_parameters(**self.request.parameters(
            f"{self.prefix}-{entry.job.run_id}", entry.time_limit_min))
        return self._executor.submit(run_on_node, job, self.sandbox, self.image, self.facts,
                                     str(self.area.heartbeat), self.harness_lost_s)

    def _submitter(self) -> None:
        while not self._closing.is_set():
            try:
                self._submit_next()
            except Exception as error:   # a harness bug must not end the submissions silently
                print(f"nightshift: the Slurm submitter: {error}", file=sys.stderr)

    def _submit_next(self) -> None:
        with self._lock:
            run_id = self._submit_queue.pop(0) if self._submit_queue else None
            entry = self._entries.get(run_id) if run_id else None
        if run_id is None:
            self._wake.wait(POLL_S)
            self._wake.clear()
            return
        if entry is None:
            return
        if entry.cancelled:
            self._report(entry, self._ended(entry, Status.INTERRUPTED, "cancelled before it was submitted"))
            return
        longest = self.request.partition.max_time_min
        if longest is not None and entry.time_limit_min > longest:
            self._report(entry, JobOutcome(entry.job.run_id, entry.slot.index, None, error=(
                f"its time limit of {entry.time_limit_min} min (budget + grace + start-up, or "
                f"slurm.time) exceeds partition {self.request.partition.name}'s MaxTime of {longest} "
                f"min; lower the budget or choose a partition that allows it")))
            return
        try:
            job, inputs = self.area.stage(entry.job)
            sub = self._submit_one(entry, job)
        except Exception as error:   # staging (a full shared disk) or sbatch refusing it
            self._report(entry, JobOutcome(entry.job.run_id, entry.slot.index, None,
                                        error=f"it could not be submitted to Slurm: {error}"))
            return
        with self._lock:   # the news of its queueing goes before any news of its start
            entry.job_id, entry.paths, entry.inputs = sub.job_id, sub.paths, inputs
            self._submitted.append(sub.job_id)
            if self.on_dispatched:
                self.on_dispatched(Dispatched(entry.job.run_id, sub.job_id))
        if entry.cancelled:
            self._cancel([entry.job.run_id])

    # ---- watching ----------------------------------------------------------------------------

    def _watcher(self) -> None:
        last_beat = time.monotonic()
        while not self._closing.is_set():
            try:
                if time.monotonic() - last_beat >= HEARTBEAT_S:
                    self.area.beat()
                    last_beat = time.monotonic()
                self._look()
            except Exception as error:   # squeue hiccups: say so, keep watching
                print(f"nightshift: the Slurm watcher: {error}", file=sys.stderr)
            self._closing.wait(POLL_S)

    def _look(self) -> None:
        with self._lock:
            entries = [e for e in self._entries.values() if e.job_id]
        now = time.time()
        states: dict[str, queue.JobState] | None = None
        if entries and (now - self._last_squeue >= SQUEUE_S or any(e.cancelled for e in entries)):
            states, self._last_squeue = queue.jobs(), now
        for entry in entries:
            if entry.began is None:
                self._check_began(entry)
            if entry.began is not None and entry.on_output is not None:
                self._follow(entry)
            answer = self._answer(entry)
            state = states.get(entry.job_id) if states is not None else None
            if answer is not None:
                self._answered(entry, answer, state, states is not None)
            elif states is not None:
                self._unanswered(entry, state, now)

    def _check_began(self, entry: _Entry) -> None:
        marker = entry.shared_run / BEGAN
        try:
            facts = json.loads(marker.read_text())
        except (OSError, ValueError):
            return
        entry.began, entry.node = float(facts["time"]), facts.get("node")
        if self.on_dispatched:
            self.on_dispatched(Dispatched(entry.job.run_id, entry.job_id or "", entry.node,
                                          round(max(0.0, entry.began - entry.submitted), 3)))

    @staticmethod
    def _follow(entry: _Entry) -> None:
        """Pass on the complete lines the run printed since the last look."""
        try:
            with open(entry.shared_run / OUTPUT, "rb") as handle:
                handle.seek(entry.output_read)
                chunk = handle.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1
        entry.output_read += end
        for line in chunk[:end].decode("utf-8", errors="replace").splitlines():
            entry.on_output(entry.job.run_id, line)

    @staticmethod
    def _answer(entry: _Entry) -> tuple[str, Any] | None:
        from submitit.core.utils import pickle_load

        if entry.paths is None or not entry.paths.result_pickle.exists():
            return None
        try:
            return pickle_load(entry.paths.result_pickle)
        except Exception:        # half-written (another filesystem's lag): next look
            return None

    def _answered(self, entry: _Entry, answer: tuple[str, Any], state: queue.JobState | None,
                  asked: bool) -> None:
        kind, value = answer
        if kind != "success":
            last = str(value).strip().splitlines()[-1:] or ["?"]
            where = entry.node or "its node"
            self._report(entry, JobOutcome(entry.job.run_id, entry.slot.index, None,
                                        error=f"Slurm job {entry.job_id} failed on {where}: {last[0]}"))
            return
        outcome: JobOutcome = value["outcome"]
        stopped_by = value.get("signal")
        finished = outcome.result is not None and outcome.result.status == Status.OK
        if stopped_by and not finished:
            # A signal stopped the run (the run's processes may have had Slurm's SIGTERM before
            # the sandbox stopped them: a "crash" that is not the run's). What it was decides.
            if entry.cancelled:
                status, job_state = Status.INTERRUPTED, None
                reason = f"cancelled by the harness (Slurm job {entry.job_id})"
            elif stopped_by == "HARNESS_LOST":   # a heartbeat a slow filesystem did not show
                status, job_state = Status.INTERRUPTED, None
                reason = (f"the node stopped it: the harness's heartbeat in {self.shared} did not change "
                          f"for {self.harness_lost_s:.0f} s there (a filesystem's lag?); not a result, "
                          f"its seed runs again")
            else:                                # Slurm's: scancel, preemption, the time limit
                if not asked or (state is not None and state.active):
                    return                       # its state at the next squeue says which
                if state is None or state.state == "COMPLETED":   # gone, or only signalled
                    state = queue.JobState(entry.job_id or "", "", "CANCELLED", entry.node or "")
                ending = queue.ending(state, cancelled_by_us=False, time_limit_min=entry.time_limit_min)
                status, reason, job_state = ending.status, ending.reason, state.state
            if outcome.result is not None:
                outcome.result = dataclasses.replace(outcome.result, status=status, reason=reason,
                                                     metric=None)
            outcome.job_state = job_state
        self._report(entry, self._brought_back(entry, outcome))

    def _unanswered(self, entry: _Entry, state: queue.JobState | None, now: float) -> None:
        if state is not None and state.active:
            if entry.began is not None and state.state in ("PENDING", "REQUEUED", "REQUEUE_HOLD"):
                # requeued behind the harness's back: end it; the seed runs again as a new job
                queue.cancel([entry.job_id or ""])
                ending = queue.ending(dataclasses.replace(state, state="REQUEUED"), cancelled_by_us=False,
                                      time_limit_min=entry.time_limit_min)
                self._report(entry, self._ended(entry, ending.status, ending.reason, "REQUEUED"))
            return
        entry.ended_seen = entry.ended_seen or now
        if now - entry.ended_seen < (2.0 if entry.cancelled else RESULT_WAIT_S):
            return       # a filesystem that shows the answer late (NFS), or a cancel landing
        if state is None:
            state = queue.JobState(entry.job_id or "", "", "CANCELLED" if entry.cancelled else "GONE",
                                   entry.node or "", "it left Slurm's queue without an answer")
        ending = queue.ending(state, cancelled_by_us=entry.cancelled, time_limit_min=entry.time_limit_min)
        self._report(entry, self._ended(entry, ending.status, ending.reason,
                                        None if entry.cancelled else state.state))

    def _cancel(self, run_ids: list[str]) -> None:
        with self._lock:
            entries = [self._entries[r] for r in run_ids if r in self._entries]
            for entry in entries:
                entry.cancelled = True
        try:
            queue.cancel([e.job_id for e in entries if e.job_id])
        except queue.SlurmError as error:   # the watcher sees them end, or close() tries again
            print(f"nightshift: {error}", file=sys.stderr)
        self._last_squeue = 0.0       # ask at the next look
        self._wake.set()

    # ---- answering -----------------------------------------------------------------------------

    def _brought_back(self, entry: _Entry, outcome: JobOutcome) -> JobOutcome:
        """The node's outcome with the run's folder moved home and its paths the harness's."""
        if entry.on_output is not None:
            self._follow(entry)              # the last lines, before the answer
        return self.area.home(entry.job, outcome)

    def _ended(self, entry: _Entry, status: Status, reason: str, job_state: str | None = None) -> JobOutcome:
        """An outcome for a job that ended without the node's answer (cancelled, preempted,
        failed before it ran): its log is whatever Slurm wrote of the job."""
        own = run_folder(entry.job)
        log = own / "log.txt"
        slurm_log = entry.paths.stdout if entry.paths is not None else None
        text = slurm_log.read_text(errors="replace") if slurm_log and slurm_log.exists() else ""
        log.write_text(text)
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now))
        start = entry.began or entry.submitted
        result = RunResult(status=status, exit_code=None, metric=None, metrics={},
                           duration_s=round(now - start, 3) if entry.began else 0.0,
                           peak_memory_mb=None, log_path=log, log_tail="\n".join(text.splitlines()[-40:]),
                           backend=self.sandbox, started_at=stamp, ended_at=stamp, reason=reason)
        self.area.home(entry.job)
        return JobOutcome(entry.job.run_id, entry.slot.index, result, node=entry.node,
                       started=entry.began or 0.0, ended=now if entry.began else 0.0,
                       job_state=job_state)

    def _report(self, entry: _Entry, outcome: JobOutcome) -> None:
        outcome.slot, outcome.job_id = entry.slot.index, entry.job_id
        outcome.node = outcome.node or entry.node
        if entry.began is not None:
            outcome.queued_s = round(max(0.0, entry.began - entry.submitted), 3)
        with self._lock:
            if self._entries.pop(entry.job.run_id, None) is None:
                return   # reported already
        self._forget(entry)
        self.on_done(outcome)

    def _forget(self, entry: _Entry) -> None:
        """Remove what the job left in the shared folder (its answer, pickles, Slurm's log:
        kept with the run as slurm.log), and inputs no run needs any more."""
        paths = entry.paths
        if paths is not None:
            own = run_folder(entry.job)
            if paths.stdout.exists():
                try:
                    (own / "slurm.log").write_bytes(paths.stdout.read_bytes())
                except OSError:
                    pass
            remove_job_files(paths)
            self._forgotten.append(paths)
        with self._lock:
            needed = {path for e in self._entries.values() for path in e.inputs}
        self.area.release(entry.job.run_id, entry.inputs, needed)
