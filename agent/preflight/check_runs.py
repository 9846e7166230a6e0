"""`nightshift check`'s baseline runs, reused by the night that follows it.

`check` runs the user's HEAD on the seeds a night measures its baseline on first (0 and 1),
through the same executor a night uses. A night that starts soon after, on the same commit,
with the same run plan (command, budget, environment, patterns, limits, interpreter) and the
same sandbox, would run exactly those runs again: it takes the check's instead, copying their
folders (log, provenance, kept outputs) into its own results, and says so. Anything that
differs, a failed check, or a check older than REUSE_WITHIN_S, and the night measures again.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from agent.record.events import Role, RunFinished
from agent.record.ledger import read_events
from agent.run.plan import RunPlan

CHECK_TAG = "nightshift-check"   # results/<CHECK_TAG>/: what the last check ran
CHECK_SEEDS = (0, 1)             # a night's first baseline seeds (the keep rule's 0 and 1)
RECORD = "reusable.json"
REUSE_WITHIN_S = 3600.0   # an hour: the machine's load and state are still the night's


@dataclass(frozen=True)
class CheckedBaseline:
    """The check's runs a night may take as its own first reference runs."""

    runs: tuple[RunFinished, ...]
    results: Path          # the check's results folder (its runs/<id>/ are copied from there)
    age_s: float

    def describe(self) -> str:
        seeds = ", ".join(str(r.seed) for r in self.runs)
        return (f"baseline: the {len(self.runs)} runs `nightshift check` made {self.age_s / 60:.0f} min ago "
                f"on seeds {seeds} of {self.runs[0].commit[:8]} (the same commit, command, budget "
                f"and sandbox) are this night's first reference runs, not run again")


def plan_digest(plan: RunPlan, backend: str, image: str | None) -> str:
    """What makes two runs of one commit and seed the same run: the plan (which GPU a worker
    gets aside), the sandbox backend and its image."""
    fields = dataclasses.asdict(plan)
    fields["limits"] = {k: v for k, v in fields["limits"].items() if k != "gpu"}
    text = json.dumps({"plan": fields, "backend": backend, "image": image}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def record_check(results: Path, *, commit: str, digest: str, passed: bool) -> None:
    """Write what a later night needs to trust this check's runs (atomically: a night reads it)."""
    path = results / RECORD
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"commit": commit, "digest": digest, "passed": passed,
                               "time": time.time()}), encoding="utf-8")
    os.replace(tmp, path)


def checked_baseline(results: Path, *, commit: str, digest: str, seeds: tuple[int, ...],
                     now: float | None = None) -> CheckedBaseline | None:
    """The check's OK reference runs of `commit` on `seeds`, when its record says it passed
    recently with the same plan; None otherwise (or when its files cannot be read)."""
    try:
        record = json.loads((results / RECORD).read_text(encoding="utf-8"))
        events = list(read_events(results / "ledger.jsonl"))
    except (OSError, ValueError):
        return None
    age = (now if now is not None else time.time()) - float(record.get("time", 0))
    if (not record.get("passed") or record.get("commit") != commit or record.get("digest") != digest
            or not 0 <= age <= REUSE_WITHIN_S):
        return None
    runs = {}
    for event in events:
        if (isinstance(event, RunFinished) and event.ok and event.commit == commit
                and event.role == Role.REFERENCE and event.seed in seeds and event.seed not in runs
                and (results / "runs" / event.run_id).is_dir()):
            runs[event.seed] = event
    if set(runs) != set(seeds):
        return None
    return CheckedBaseline(tuple(runs[s] for s in seeds), results, age)


def adopt(baseline: CheckedBaseline, night_results: Path) -> list[RunFinished]:
    """Copy the check's run folders into the night's results; the runs, to append to its
    ledger as they were (their log and provenance paths are relative to the results folder)."""
    for run in baseline.runs:
        target = night_results / "runs" / run.run_id
        if not target.exists():
            shutil.copytree(baseline.results / "runs" / run.run_id, target, symlinks=True)
    return list(baseline.runs)
