"""Running one measurement: a commit on a seed, in the sandbox, recorded in the ledger.

Each run gets its own folder `results/<tag>/runs/<run_id>/` holding the log, the script's
outputs (`out/result.json`) and `provenance.json`. The commit is exported once into a
read-only snapshot that all its seeds share, so the worktree can move on meanwhile.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agent.night.data import PreparedData
from agent.workspace.gate import digest_files, tampered
from agent.record.ledger import Ledger, utc_now
from agent.record.provenance import determinism, environment, fingerprint, write_provenance
from agent.workspace.repo import Workspace, remove_snapshot
from sandbox import Limits, Runner, RunSpec, Status

MAX_DIFF_CHARS = 1_000_000   # a diff larger than this is left to git (the commit pins it anyway)


@dataclass
class RunPlan:
    """Fixed for one loop invocation: where and how every run of the night happens."""

    command: str
    metric: str
    budget_s: float
    grace_s: float
    protected: tuple[str, ...]
    limits: Limits
    split: str = "val"
    extra_env: dict[str, str] = field(default_factory=dict)
    target: str | None = None      # the file the researcher edits; its digest goes in provenance


class RunExecutor:
    def __init__(self, *, plan: RunPlan, runner: Runner, workspace: Workspace, ledger: Ledger,
                 data: PreparedData, results_dir: Path) -> None:
        self.plan, self.runner, self.workspace = plan, runner, workspace
        self.ledger, self.data = ledger, data
        self.runs_dir = results_dir / "runs"
        self.snapshots_dir = results_dir / "snapshots"

    def snapshot(self, commit: str) -> Path:
        dest = self.snapshots_dir / commit
        if not (dest / ".nightshift-complete").exists():
            if dest.exists():
                remove_snapshot(dest)
            staging = self.snapshots_dir / f".{commit}.partial"
            if staging.exists():
                remove_snapshot(staging)
            self.workspace.snapshot(commit, staging)
            staging.chmod(0o755)
            (staging / ".nightshift-complete").write_text(commit)
            (staging / ".nightshift-complete").chmod(0o444)
            staging.chmod(0o555)
            staging.rename(dest)
        return dest

    def release(self, commit: str) -> None:
        """Drop a commit's snapshot once no more runs of it are expected."""
        dest = self.snapshots_dir / commit
        if dest.exists():
            remove_snapshot(dest)

    def run(self, commit: str, seed: int, role: str, experiment: str | None,
            on_output: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Run `commit` on `seed` and return the recorded run_finished event."""
        run_id = f"{commit[:8]}-s{seed}-{role[:3]}-{uuid.uuid4().hex[:6]}"
        run_dir = self.runs_dir / run_id
        out_dir = run_dir / "out"
        out_dir.mkdir(parents=True)
        snapshot = self.snapshot(commit)
        protected_before = digest_files(snapshot, self.plan.protected)
        spec = RunSpec(
            command=self.plan.command, snapshot_dir=snapshot, data_dir=self.data.path,
            out_dir=out_dir, seed=seed, budget_s=self.plan.budget_s, metric=self.plan.metric,
            split=self.plan.split, grace_s=self.plan.grace_s, limits=self.plan.limits,
            env=self.plan.extra_env,
        )
        started = self.ledger.append("run_started", run_id=run_id, commit=commit, seed=seed,
                                     role=role, experiment=experiment)
        try:
            result = self.runner.run(spec, on_output=on_output)
        except KeyboardInterrupt:
            self.ledger.append("run_finished", run_id=run_id, commit=commit, seed=seed, role=role,
                               experiment=experiment, status=Status.INTERRUPTED.value, metric=None,
                               metrics={}, reason="interrupted by the user")
            raise
        status, reason = result.status, result.reason
        changed = tampered(protected_before, digest_files(snapshot, self.plan.protected))
        if changed:
            status, reason = Status.TAMPERED, f"protected files changed during the run: {', '.join(changed)}"
        env = environment()
        parent = self.workspace.parent(commit)
        diff = self.workspace.diff(commit) if parent else ""   # a root commit's diff is everything
        provenance = {
            "run_id": run_id, "commit": commit, "parent": parent,
            "diff": diff if len(diff) <= MAX_DIFF_CHARS else "",
            "diff_omitted": f"{len(diff)} characters; see `git diff {parent} {commit}`"
            if len(diff) > MAX_DIFF_CHARS else None,
            "target_digest": digest_files(snapshot, (self.plan.target,)) if self.plan.target else {},
            "seed": seed, "role": role, "experiment": experiment,
            "budget_s": self.plan.budget_s, "grace_s": self.plan.grace_s,
            "command": self.plan.command, "split": self.plan.split,
            "protected_digests": protected_before,
            "data_dir": str(self.data.path), "data_meta": self.data.meta,
            "sandbox": {"backend": result.backend, **result.sandbox},
            "environment": env, "env_fingerprint": fingerprint(env),
            "determinism": determinism(seed, self.plan.extra_env),
            "started_at": started["time"], "ended_at": utc_now(),
        }
        write_provenance(run_dir / "provenance.json", provenance)
        return self.ledger.append(
            "run_finished", run_id=run_id, commit=commit, seed=seed, role=role,
            experiment=experiment, status=status.value,
            metric=result.metric if status == Status.OK else None,
            metrics=_json_safe(result.metrics), duration_s=round(result.duration_s, 3),
            peak_memory_mb=result.peak_memory_mb, exit_code=result.exit_code, reason=reason,
            log=str(Path(result.log_path).relative_to(self.runs_dir.parent))
            if Path(result.log_path).is_relative_to(self.runs_dir.parent) else str(result.log_path),
            log_tail=result.log_tail[-2000:], backend=result.backend,
            data_hash=self.data.corpus_hash, env_fingerprint=provenance["env_fingerprint"],
            provenance=str((run_dir / "provenance.json").relative_to(self.runs_dir.parent)),
        )


def _json_safe(metrics: dict[str, Any]) -> dict[str, Any]:
    """NaN and inf are not JSON: record them as strings so the ledger line stays valid."""
    safe = {}
    for key, value in metrics.items():
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            safe[key] = repr(value)
        else:
            safe[key] = value
    return safe
