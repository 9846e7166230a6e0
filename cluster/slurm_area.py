"""The tag's folder in the shared directory, `<shared>/nightshift/<job prefix>/`, through which
runs travel between the harness and the nodes:

    inputs/<fingerprint>/   each input a job names (snapshot, data, mounts), copied once
    runs/<run id>/          a run's folder while it is away (the node moves its results here)
    submitit/               submitit's pickled calls, answers and Slurm's logs of each job
    heartbeat               a counter the harness rewrites; nodes stop runs when it goes still

`stage` gives a job its paths here (cluster/staging.py moves every path of it); `home` moves a
run's folder back into `results/<tag>/runs/<id>/` and gives the node's outcome the harness's
paths again. Inputs already inside the shared directory are used in place. A copy is dropped
once its original is gone (a released snapshot) and no run in flight needs it; the data stays
staged for the next invocation of the tag.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Iterable

from cluster.protocol import Job, JobOutcome
from cluster.slurm_node import PRIVATE
from cluster.staging import (Relocation, StagingError, bring_back, copy_in, fingerprint, paths_in,
                             relocate, run_folder)
from sandbox.trees import remove_tree


class SharedArea:
    def __init__(self, shared: Path, prefix: str) -> None:
        """Make the tag's folder; clear what a killed harness of the tag left in runs/ and
        submitit/ (its jobs were cancelled before this one started: agent/preflight/leftovers.py)."""
        self.shared, self.root = shared, shared / "nightshift" / prefix
        for folder in ("runs", "submitit"):
            remove_tree(self.root / folder)
        for folder in ("inputs", "runs", "submitit"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self.submitit = self.root / "submitit"
        self.heartbeat = self.root / "heartbeat"
        self._lock = threading.Lock()
        self._staged: dict[Path, Path] = {}     # input on the harness's machine -> its copy here
        self._beats = 0
        self.beat()

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def stage(self, job: Job) -> tuple[Job, tuple[Path, ...]]:
        """`job` with its paths here, its inputs copied (once), its run folder made empty with
        the folders the harness made in it (out/, ...); and the inputs it uses."""
        own, there = run_folder(job), self.run_dir(job.run_id)
        table, inputs = {own: there}, []
        for path in paths_in(job):
            if path.is_relative_to(own) or path.is_relative_to(self.shared):
                continue
            with self._lock:
                copy = self._staged.get(path)
            if copy is None:
                if not path.exists():
                    raise StagingError(f"{path}, which the run needs, does not exist")
                copy = copy_in(path, self.root / "inputs" / fingerprint(path))
                with self._lock:
                    self._staged[path] = copy
            table[path] = copy
            inputs.append(path)
        remove_tree(there)
        for current, _, _ in os.walk(own):
            (there / Path(current).relative_to(own)).mkdir(parents=True, exist_ok=True)
        return relocate(job, Relocation.of(table, keep=(self.shared,))), tuple(inputs)

    def home(self, job: Job, outcome: JobOutcome | None = None) -> JobOutcome | None:
        """Move the run's folder back to the harness's run folder; the outcome (if any) with
        the harness's paths."""
        own, there = run_folder(job), self.run_dir(job.run_id)
        for name in PRIVATE:
            (there / name).unlink(missing_ok=True)
        if there.exists():
            bring_back(there, own)
        if outcome is None:
            return None
        return relocate(outcome, Relocation.of({there: own}, keep=(Path("/"),)))

    def release(self, run_id: str, inputs: Iterable[Path], needed: set[Path]) -> None:
        """A run is done: its folder goes, and the copies of its inputs whose originals are
        gone and that no run in `needed` uses."""
        remove_tree(self.run_dir(run_id))
        with self._lock:
            gone = [self._staged.pop(source) for source in inputs
                    if source not in needed and not source.exists() and source in self._staged]
        for copy in gone:
            remove_tree(copy)

    def close(self) -> None:
        with self._lock:
            gone = [copy for source, copy in self._staged.items() if not source.exists()]
        for copy in gone:        # a snapshot released meanwhile; the data stays staged
            remove_tree(copy)

    def beat(self) -> None:
        """Rewrite the heartbeat the nodes watch (cluster/slurm_node.watch_harness)."""
        self._beats += 1
        staging = self.heartbeat.with_name(f".heartbeat.{os.getpid()}")
        staging.write_text(f"{os.getpid()} {self._beats}")
        staging.replace(self.heartbeat)

    def describe(self) -> dict[str, Any]:
        return {"shared_dir": str(self.shared), "area": str(self.root)}
