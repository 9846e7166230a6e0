"""Workers on a Ray cluster: each run is a Ray task, sandboxed on the node it lands on.

    nightshift run --cluster ray                  # the cluster at $RAY_ADDRESS
    nightshift run --cluster ray --cluster-address 10.0.0.5:6379 --workers 16

`pip install -e '.[ray]'` on the head and on every node (the task imports `sandbox` and
`cluster` there, and the sandbox backend, local or docker, must work on each node). What
travels, and how:
- the snapshot of the commit: a tarball in Ray's object store, put once per commit and
  unpacked read-only into a scratch folder on the node;
- the data: used in place when the node sees the same folder (a shared filesystem), else a
  tarball put once per night and unpacked once per node (cached by its digest);
- back to the head: the run's result (status, metric, metrics), its log, its out folder
  (what `keep` would keep: small files), the protected files' digests before and after, the
  node's environment for provenance, and the node's address;
- while it runs, the lines it prints: the task sends them in batches, a few times a second,
  to a small actor (`LineBox`) the head empties as often, so the head reads a run's curve as
  it trains (its live view, early stopping) as it does for a local run.
Each task asks for one GPU on GPU clusters (`num_gpus=1`; the sandbox sees the one Ray
assigned), else one CPU (program.md `limits.cpus` for more). Ctrl-C or a crash of the harness
cancels the tasks: `ray.cancel` interrupts a run (the sandbox kills its tree), and Ray kills
the tasks of a driver that died, whose sandboxes die with them (the sandbox contract).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import socket
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from cluster.execute import execute
from cluster.protocol import ClusterUnavailable, Job, OnDone, OnOutput, JobOutcome, Slot, Workers
from sandbox import RunResult, RunSpec, Status
from sandbox.protocol import RunInterrupted
from sandbox.trees import read_only_tree, remove_tree

MAX_OUT_BYTES = 50 * 2**20     # what comes back of a run's out folder (checkpoints stay behind)
WAIT_S = 0.5
LINES_EVERY_S = 0.2            # how often a node sends a run's new lines, and the head takes them


class LineBox:
    """A Ray actor holding the lines runs printed until the head takes them: (run_id, line)."""

    def __init__(self) -> None:
        self._lines: list[tuple[str, str]] = []

    def push(self, run_id: str, lines: list[str]) -> None:
        self._lines.extend((run_id, line) for line in lines)

    def take(self) -> list[tuple[str, str]]:
        lines, self._lines = self._lines, []
        return lines


class _Sender:
    """On the node: a run's lines, sent to the head's LineBox every LINES_EVERY_S (one call a
    batch, never waited on: the actor keeps the order of one caller's calls)."""

    def __init__(self, box: Any, run_id: str) -> None:
        self.box, self.run_id = box, run_id
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._send_loop, daemon=True)
        self._thread.start()

    def __call__(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def _send(self) -> Any:
        with self._lock:
            lines, self._lines = self._lines, []
        return self.box.push.remote(self.run_id, lines) if lines else None

    def _send_loop(self) -> None:
        while not self._done.wait(LINES_EVERY_S):
            self._send()

    def close(self) -> None:
        """The last lines, stored before the task returns: the head takes them before it
        reports the run's end."""
        import ray

        self._done.set()
        self._thread.join()
        last = self._send()
        if last is not None:
            ray.get(last)


def _pack(folder: Path, limit: int | None = None) -> bytes:
    """A tarball of `folder`'s regular files (links and oversized files left out)."""
    buffer, total = io.BytesIO(), 0
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            size = path.stat().st_size
            if limit is not None and total + size > limit:
                continue
            total += size
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def _unpack(data: bytes, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(folder, filter="data")


def _node_data(data_dir: str, tarball: bytes | None, digest: str) -> Path:
    """The data folder on this node: the head's path when it is here, else the shipped copy."""
    if Path(data_dir).is_dir():
        return Path(data_dir)
    cache = Path(tempfile.gettempdir()) / "nightshift-ray-data" / digest
    if not (cache / ".complete").exists():
        staging = cache.with_name(f".{digest}.{os.getpid()}")
        _unpack(tarball or b"", staging)
        (staging / ".complete").write_text(digest)
        try:
            staging.rename(cache)
        except OSError:      # another run on this node unpacked it first
            remove_tree(staging)
    return cache


def run_on_node(job: Job, slot_index: int, sandbox: str, image: str, snapshot: bytes,
                data: bytes | None, data_digest: str,
                facts: Callable[[], dict[str, Any]] | None,
                evaluator: bytes | None = None, lines: Any = None) -> dict[str, Any]:
    """The Ray task: one run of `job` (and its evaluation step, with `evaluator` the
    evaluation's snapshot) in the `sandbox` backend of this node; what it prints goes to the
    `lines` actor (a LineBox) as it prints it."""
    import ray

    from sandbox.select import make_runner

    RUNS_ROOT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=RUNS_ROOT))
    try:
        data_dir = _node_data(str(job.spec.data_dir), data, data_digest)
        spec = _on_node(job.spec, work / "run", snapshot, data_dir)
        evaluation = None
        if job.evaluation is not None:
            evaluation = dataclasses.replace(
                _on_node(job.evaluation, work / "run" / "eval", evaluator or b"", data_dir),
                train_out_dir=spec.out_dir)
        gpus = [int(g) for g in ray.get_gpu_ids()]
        slot = Slot(slot_index, f"cuda:{gpus[0]}" if gpus else "cpu", gpu=gpus[0] if gpus else None)
        runner, _ = make_runner(sandbox, image=image)
        stop = threading.Event()
        sender = _Sender(lines, job.run_id) if lines is not None else None
        try:
            outcome = execute(runner, dataclasses.replace(job, spec=spec, evaluation=evaluation),
                              slot, stop, sender)
        except KeyboardInterrupt as interrupt:   # ray.cancel: the sandbox has killed the tree
            result = interrupt.result if isinstance(interrupt, RunInterrupted) else None
            outcome = JobOutcome(job.run_id, slot_index, result, error="cancelled")
        finally:
            if sender is not None:
                sender.close()
        # two nodes may share an address (a test cluster on one machine): add the node's id
        outcome.node = f"{ray.util.get_node_ip_address()}/{ray.get_runtime_context().get_node_id()[:8]}"
        outcome.environment = facts() if facts else None
        steps = {"": (spec, outcome.result)}
        if evaluation is not None:
            steps["eval"] = (evaluation, outcome.evaluation)
        back = {name: {"out": _pack(step.out_dir, MAX_OUT_BYTES),
                       "log": _read(result.log_path) if result is not None else b""}
                for name, (step, result) in steps.items()}
        return {"outcome": outcome, "steps": back, "host": socket.gethostname()}
    finally:
        remove_tree(work)


RUNS_ROOT = Path(tempfile.gettempdir()) / "nightshift-ray-runs"
"""Where a node keeps its runs while they go: hidden from every run but its own folders."""


def _on_node(spec: RunSpec, run_dir: Path, snapshot: bytes, data_dir: Path) -> RunSpec:
    """`spec` with this node's paths: its snapshot unpacked read-only, a fresh out folder."""
    snapshot_dir = run_dir / "snapshot"
    _unpack(snapshot, snapshot_dir)
    read_only_tree(snapshot_dir)
    out_dir = run_dir / "out"
    out_dir.mkdir(parents=True)
    return dataclasses.replace(spec, snapshot_dir=snapshot_dir, out_dir=out_dir, data_dir=data_dir,
                               private_root=RUNS_ROOT)


def _read(path: Path | str) -> bytes:
    return Path(path).read_bytes() if Path(path).exists() else b""


class RayWorkers(Workers):
    name = "ray"

    def __init__(self, *, address: str | None, sandbox: str, image: str, workers: int | None,
                 on_done: OnDone, cpus_per_run: float = 1.0,
                 facts: Callable[[], dict[str, Any]] | None = None) -> None:
        try:
            import ray
        except ImportError as error:
            raise ClusterUnavailable("the Ray backend needs Ray: pip install -e '.[ray]'") from error
        address = address or os.environ.get("RAY_ADDRESS")
        if not address:
            raise ClusterUnavailable("no Ray cluster given: set RAY_ADDRESS or pass "
                                     "--cluster-address HOST:PORT (`ray start --head` prints it)")
        # Tasks import this harness's own code where the node can see it (one machine, a
        # shared filesystem); elsewhere the node's installed nightshift is used.
        source = str(Path(__file__).resolve().parents[1])
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                     logging_level="WARNING",
                     runtime_env={"env_vars": {"PYTHONPATH": source}})
        except Exception as error:
            raise ClusterUnavailable(f"cannot reach the Ray cluster at {address}: {error}") from error
        self._ray = ray
        resources = ray.cluster_resources()
        self.gpus = int(resources.get("GPU", 0))
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        count = workers or self.gpus or len(nodes) or 1
        self.slots = [Slot(i, "ray") for i in range(count)]
        self.address, self.sandbox, self.image, self.on_done, self.facts = address, sandbox, image, on_done, facts
        self._options = {"num_gpus": 1, "num_cpus": 1} if self.gpus else {"num_cpus": cpus_per_run}
        self._task = ray.remote(max_retries=0)(run_on_node)
        self._lock = threading.Lock()
        self._delivering = threading.Lock()
        self._refs: dict[str, tuple[Any, Slot, Job, float]] = {}   # run_id -> (ref, slot, job, submitted)
        self._outputs: dict[str, OnOutput] = {}                    # run_id -> who reads its lines
        self._snapshots: dict[Path, Any] = {}
        self._data: tuple[Any, str] | None = None
        self._closing = threading.Event()
        # No CPU of its own: it must never keep a run from a node's only free core.
        self._lines = ray.remote(num_cpus=0)(LineBox).remote()
        self._waiter = threading.Thread(target=self._wait_loop, name="nightshift-ray", daemon=True)
        self._waiter.start()
        self._reader = threading.Thread(target=self._lines_loop, name="nightshift-ray-lines", daemon=True)
        self._reader.start()

    def submit(self, slot: Slot, job: Job, on_output: OnOutput | None = None) -> None:
        snapshot = self._snapshot_ref(job.spec.snapshot_dir)
        evaluator = self._snapshot_ref(job.evaluation.snapshot_dir) if job.evaluation else None
        data, digest = self._data_ref(job.spec.data_dir)
        unplaced = lambda spec: dataclasses.replace(   # noqa: E731  the node's to pick
            spec, limits=dataclasses.replace(spec.limits, cpuset=None, gpu=None))
        job = dataclasses.replace(job, spec=unplaced(job.spec),
                                  evaluation=unplaced(job.evaluation) if job.evaluation else None)
        with self._lock:
            if on_output is not None:
                self._outputs[job.run_id] = on_output
        ref = self._task.options(**self._options).remote(
            job, slot.index, self.sandbox, self.image, snapshot, data, digest, self.facts, evaluator,
            self._lines if on_output is not None else None)
        with self._lock:
            self._refs[job.run_id] = (ref, slot, job, time.time())

    def cancel(self, run_id: str) -> None:
        with self._lock:
            entry = self._refs.get(run_id)
        if entry is not None:
            self._ray.cancel(entry[0])     # KeyboardInterrupt in the task: the sandbox cleans up

    def running(self) -> dict[str, Slot]:
        with self._lock:
            return {run_id: slot for run_id, (_, slot, _, _) in self._refs.items()}

    def close(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.2)
        self._closing.set()
        for ref, _, _, _ in list(self._refs.values()):
            self._ray.cancel(ref, force=True)
        for thread in (self._waiter, self._reader):   # no call to Ray after close returns
            thread.join(10)

    def describe(self) -> dict[str, Any]:
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        return {**super().describe(), "sandbox": self.sandbox, "cluster_address": self.address,
                "nodes": [n["NodeManagerAddress"] for n in nodes], "gpus": self.gpus}

    # ---- the head's side ---------------------------------------------------------------------

    def _snapshot_ref(self, folder: Path) -> Any:
        with self._lock:
            if folder not in self._snapshots:
                self._snapshots[folder] = self._ray.put(_pack(folder))
            return self._snapshots[folder]

    def _data_ref(self, folder: Path) -> tuple[Any, str]:
        with self._lock:
            if self._data is None:
                tarball = _pack(folder)
                self._data = (self._ray.put(tarball), hashlib.sha256(tarball).hexdigest()[:16])
            return self._data

    def _wait_loop(self) -> None:
        while not self._closing.is_set():
            with self._lock:
                refs = {entry[0]: run_id for run_id, entry in self._refs.items()}
            if not refs:
                time.sleep(WAIT_S / 5)
                continue
            done, _ = self._ray.wait(list(refs), num_returns=1, timeout=WAIT_S)
            if done:
                self._deliver()     # the runs' last lines reach their readers before their ends
            for ref in done:
                run_id = refs[ref]
                with self._lock:
                    _, slot, job, submitted = self._refs.pop(run_id)
                outcome = self._collect(ref, slot, job, submitted)
                with self._lock:
                    self._outputs.pop(run_id, None)
                self.on_done(outcome)

    def _lines_loop(self) -> None:
        """Hand each run's lines to its reader as they arrive from the nodes (the last ones of a
        run are taken before its outcome is reported: `_collect`)."""
        while not self._closing.wait(LINES_EVERY_S):
            self._deliver()

    def _deliver(self) -> None:
        """The lines the nodes sent since the last look, to each run's reader and to its log
        on the head (what the live page reads while it runs; the node's whole log replaces it
        when the run ends)."""
        with self._delivering:     # one taker at a time: a run's lines stay in order
            try:
                lines = self._ray.get(self._lines.take.remote(), timeout=30)
            except Exception:   # the cluster is going away: the runs' outcomes say what happened
                return
            by_run: dict[str, list[str]] = {}
            for run_id, line in lines:
                by_run.setdefault(run_id, []).append(line)
            for run_id, printed in by_run.items():
                with self._lock:
                    reader, entry = self._outputs.get(run_id), self._refs.get(run_id)
                if entry is not None:
                    with contextlib.suppress(OSError):
                        with open(entry[2].spec.out_dir.parent / "log.txt", "a", encoding="utf-8") as log:
                            log.write("".join(line + "\n" for line in printed))
                for line in printed if reader is not None else ():
                    reader(run_id, line)

    def _collect(self, ref: Any, slot: Slot, job: Job, submitted: float) -> JobOutcome:
        """The task's answer, its log and out folder written where the head keeps them."""
        try:
            answer = self._ray.get(ref)
        except Exception as error:   # cancelled, or the node died under it
            cancelled = type(error).__name__ == "TaskCancelledError"
            return _interrupted(job, slot, submitted) if cancelled else JobOutcome(
                job.run_id, slot.index, None, error=f"the Ray task failed: {type(error).__name__}: {error}")
        outcome: JobOutcome = answer["outcome"]
        for name, back in answer["steps"].items():
            spec = job.evaluation if name == "eval" else job.spec
            _unpack(back["out"], spec.out_dir)
            log_path = spec.out_dir.parent / "log.txt"
            log_path.write_bytes(back["log"])
            result = outcome.evaluation if name == "eval" else outcome.result
            if result is not None:
                result = dataclasses.replace(result, log_path=log_path)
                if name == "eval":
                    outcome.evaluation = result
                else:
                    outcome.result = result
        outcome.slot = slot.index
        return outcome


def _interrupted(job: Job, slot: Slot, submitted: float) -> JobOutcome:
    log = job.spec.out_dir.parent / "log.txt"
    log.write_text("")
    now = time.time()
    iso = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now))
    result = RunResult(status=Status.INTERRUPTED, exit_code=None, metric=None, metrics={},
                       duration_s=now - submitted, peak_memory_mb=None, log_path=log, log_tail="",
                       backend="ray", started_at=iso, ended_at=iso,
                       reason="cancelled on the cluster before it finished")
    return JobOutcome(job.run_id, slot.index, result, started=submitted, ended=now)

