"""Running one measurement: a commit on a seed, in the sandbox, recorded in the ledger.

Each run gets its own folder `results/<tag>/runs/<run_id>/` holding the log, the script's
outputs (`out/result.json`, and `work/`: what it wrote next to itself, as far as `keep:`
keeps it), `eval/` (the evaluation step's log and result, with `evaluate:`) and
`provenance.json`. The commit is exported once into a read-only snapshot that all its seeds
share, so the worktree can move on meanwhile; each run works in a private writable layer over
it, with program.md's `data:` folder mounted read-only inside. What a finished run showed is
judged in one place (agent.decide.integrity.judge_run); this module gathers the evidence.
"""
from __future__ import annotations

import hashlib
import threading
import uuid
from pathlib import Path
from typing import Callable

from agent.decide.integrity import RunEvidence, StepEvidence, judge_run
from agent.record.curves import Curve
from agent.record.events import Role, RunFinished, RunStarted
from agent.record.ledger import Ledger, utc_now
from agent.record.provenance import Provenance, determinism, environment, fingerprint, write_provenance
from agent.run import grading, outputs
from agent.run.budget import BudgetJudgement, judge_budget, reported_steps
from agent.run.data import PreparedData, content_hash, folder_facts
from agent.run.live import LiveCurves
from agent.run.observer import Observer
from agent.run.plan import RunPlan
from agent.run.seeding import observe_seeding
from agent.workspace.repo import Workspace, remove_snapshot
from cluster.execute import execute
from cluster.protocol import Job, JobOutcome, Slot
from sandbox import Runner, RunResult, RunSpec, Status
from sandbox.digest import digest_files
from sandbox.protocol import DataMount, RunInterrupted

MAX_DIFF_CHARS = 1_000_000   # a diff larger than this is left to git (the commit pins it anyway)


class RunExecutor:
    def __init__(self, *, plan: RunPlan, runner: Runner, workspace: Workspace, ledger: Ledger,
                 data: PreparedData, results_dir: Path, private_root: Path | None = None) -> None:
        """`results_dir` holds the runs' folders, their ledger and the evaluation secret;
        `private_root` is hidden from every run but its own folders (default: results_dir's
        parent, `results/` for a night's `results/<tag>/`; a replay or an ablation, whose
        folder lies deeper, passes `results/` itself: the night's secret is in its tag's)."""
        self.plan, self.runner, self.workspace = plan, runner, workspace
        self.ledger, self.data = ledger, data
        self.runs_dir = results_dir / "runs"
        self.snapshots_dir = results_dir / "snapshots"
        # The data folder as the night found it: a run that changes it is tampered.
        self._data_seen = {m.path: folder_facts(m.source) for m in plan.mounts}
        self.data_hash = data.corpus_hash or _mounts_hash(plan.mounts)   # what every run's data was
        self._diffs: dict[str, tuple[str | None, str]] = {}   # commit -> (parent, diff): once each
        self.results_dir = results_dir
        self.private_root = private_root or self.runs_dir.parent.parent
        self._secret: str | None = None   # where the evaluator's windows lie: read or drawn at the first run

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

    def prepare(self, commit: str, seed: int, role: Role, experiment: str | None, *,
                slot: Slot | None = None, label: str = "") -> Job:
        """Everything one run needs, its folder made and its run_started recorded."""
        role = Role(role)
        run_id = f"{commit[:8]}-s{seed}-{role.value[:3]}-{uuid.uuid4().hex[:6]}"
        out_dir = self.runs_dir / run_id / "out"
        out_dir.mkdir(parents=True)
        plan = self.plan
        snapshot = self.snapshot(commit)
        spec = RunSpec(
            command=plan.command, snapshot_dir=snapshot, data_dir=self.data.path,
            out_dir=out_dir, seed=seed, budget_s=plan.budget_s, metric=plan.metric,
            split=plan.split, grace_s=plan.grace_s, limits=plan.limits, env=plan.extra_env,
            result_file=plan.result_file, metric_pattern=plan.metric_pattern,
            metrics_pattern=plan.metrics_pattern, python=plan.python,
            writable_workdir=plan.writable_workdir, mounts=plan.mounts,
            metric_required=plan.evaluate is None,
            hidden=grading.hidden_files(self.data.meta, grading.TRAINING_SEES),
            held_out=grading.held_out(self.data.meta),
            private_root=self.private_root,   # results/: every tag's runs and secrets
            view_add=plan.view_add,
        )
        evaluation = None
        if plan.evaluate:
            evaluator = grading.evaluator_snapshot(self.snapshots_dir, snapshot, plan.protected)
            self._secret = self._secret or grading.evaluation_secret(self.results_dir)
            evaluation = grading.evaluation_spec(spec, command=plan.evaluate, snapshot=evaluator,
                                                 meta=self.data.meta, deadline_s=plan.deadline_s,
                                                 secret=self._secret)
        self.ledger.append(RunStarted(run_id=run_id, commit=commit, seed=seed, role=role,
                                      experiment=experiment, worker=slot.index if slot else None,
                                      device=slot.device if slot else None, budget_s=plan.budget_s))
        return Job(run_id=run_id, spec=spec, protected=self.plan.protected, label=label,
                   evaluation=evaluation)

    def finish(self, job: Job, outcome: JobOutcome, curve: Curve | None = None,
               stopped: str | None = None) -> RunFinished:
        """Record how `job` ended (its provenance.json next to its result) and return the
        run_finished event, with the `curve` its progress lines drew; `stopped` says why the
        harness stopped it early (agent/night/early_stops.py), which is then its reason."""
        started = self.ledger.state.in_flight.get(job.run_id)
        commit, seed = started.commit, started.seed
        role, experiment = started.role, started.experiment
        slot = dict(worker=started.worker, device=started.device, node=outcome.node,
                    started=round(outcome.started, 3) or None, ended=round(outcome.ended, 3) or None,
                    job_id=outcome.job_id, job_state=outcome.job_state, queued_s=outcome.queued_s)
        result = outcome.result
        if outcome.harness_error is not None:
            # A full disk (or the like) on the harness's side: the night stops with it; the
            # run is closed as interrupted on the way out, never recorded as its crash.
            raise OSError(*outcome.harness_error)
        if result is None:
            judged = judge_run(RunEvidence(metric=self.plan.metric, training=None,
                                           start_error=outcome.error))
            return self.ledger.append(RunFinished(
                run_id=job.run_id, commit=commit, seed=seed, role=role, experiment=experiment,
                status=judged.status, reason=stopped or judged.reason, curve=curve, **slot))
        changed = sorted(set(outcome.tampered) | set(outputs.touches(result.written, self.plan.protected)))
        data_now = {m.path: folder_facts(m.source) for m in self.plan.mounts}
        data_changed = [path for path, facts in data_now.items() if facts != self._data_seen.get(path)]
        self._data_seen = data_now
        evaluation = outcome.evaluation
        judged = judge_run(RunEvidence(
            metric=self.plan.metric, training=_step(result), evaluated=job.evaluation is not None,
            evaluation=_step(evaluation) if evaluation is not None else None,
            start_error=outcome.evaluation_error, tampered=tuple(changed),
            data_changed=tuple(data_changed), report_tolerance=self.plan.report_tolerance))
        status, reason = judged.status, stopped or judged.reason
        spec = job.spec
        kept = outputs.prune(spec.out_dir, result.work_dir, result.written, spec.snapshot_dir,
                             self.plan.keep, always=(self.plan.result_file,))
        if evaluation is not None:
            outputs.prune(evaluation.log_path.parent / "out", evaluation.work_dir, evaluation.written,
                          job.evaluation.snapshot_dir, None)
        budget = self._judge_budget(commit, result.duration_s, result.metrics) \
            if status != Status.INTERRUPTED else None
        metric_value = judged.metric
        metrics = {**result.metrics, **_figures(evaluation)}
        seen = self.ledger.state.ok_values(commit)
        seeding = observe_seeding({**seen, seed: metric_value} if metric_value is not None else seen,
                                         self.plan.metric)
        run_dir = self.runs_dir / job.run_id
        env = outcome.environment or environment()
        parent, diff = self._diff_of(commit)
        provenance = Provenance(
            run_id=job.run_id, commit=commit, parent=parent,
            diff=diff if len(diff) <= MAX_DIFF_CHARS else "",
            diff_omitted=f"{len(diff)} characters; see `git diff {parent} {commit}`"
            if len(diff) > MAX_DIFF_CHARS else None,
            target_digest=digest_files(job.spec.snapshot_dir, (self.plan.target,)) if self.plan.target else {},
            seed=seed, role=role, experiment=experiment,
            budget_s=self.plan.budget_s, grace_s=self.plan.grace_s,
            command=self.plan.command, split=self.plan.split,
            run_env=dict(self.plan.extra_env), python=self.plan.python,
            protected_digests=outcome.digests,
            data_dir=str(self.data.path), data_meta=self.data.meta, data_hash=self.data_hash,
            data_mount=[{"path": m.path, "source": str(m.source), **data_now[m.path]}
                        for m in self.plan.mounts],
            sandbox={"backend": result.backend, **result.sandbox},
            grading={
                "measured_by": judged.measured_by, "evaluate": self.plan.evaluate,
                "reported": judged.reported, "probes": [p.to_dict() for p in judged.probes],
                "splits": grading.splits_note(self.data.meta), "hidden": result.hidden_enforced,
                "evaluation_log": _relative(evaluation.log_path, self.runs_dir.parent) if evaluation else None,
                "evaluation_sandbox": evaluation.sandbox if evaluation else None},
            outputs=kept.to_dict(),
            worker={"index": started.worker, "device": started.device, "node": outcome.node,
                    "job_id": outcome.job_id, "queued_s": outcome.queued_s},
            environment=env, env_fingerprint=fingerprint(env),
            determinism=determinism(
                seed, self.plan.extra_env,
                seed_passed="{seed} in the command and NIGHTSHIFT_SEED" if "{seed}" in self.plan.command
                else "NIGHTSHIFT_SEED (the command has no {seed})",
                seeding=(seeding.kind, seeding.note),
                budget=(budget.kind, budget.note) if budget else ("unknown", "interrupted")),
            started_at=started.time, ended_at=utc_now(),
        )
        write_provenance(run_dir / "provenance.json", provenance)
        log = Path(result.log_path)
        return self.ledger.append(RunFinished(
            run_id=job.run_id, commit=commit, seed=seed, role=role, experiment=experiment,
            status=status, metric=metric_value,
            metrics=metrics, duration_s=round(result.duration_s, 3),
            peak_memory_mb=result.peak_memory_mb, exit_code=result.exit_code, reason=reason,
            log=str(log.relative_to(self.runs_dir.parent)) if log.is_relative_to(self.runs_dir.parent)
            else str(log),
            log_tail=result.log_tail[-2000:], backend=result.backend,
            data_hash=self.data_hash, env_fingerprint=provenance.env_fingerprint,
            provenance=str((run_dir / "provenance.json").relative_to(self.runs_dir.parent)),
            over_budget_s=budget.over_s if budget else None, measured_by=judged.measured_by,
            reported=judged.reported, probes=judged.probes,
            eval_duration_s=round(evaluation.duration_s, 3) if evaluation else None,
            fingerprint=_fingerprint(evaluation), hidden=result.hidden_enforced, curve=curve, **slot))

    def _judge_budget(self, commit: str, duration_s: float, metrics: dict) -> BudgetJudgement:
        """The run's budget, judged by its steps against the plan's step count and the runs of
        this commit and of the incumbent (agent.run.budget.judge_budget)."""
        state = self.ledger.state
        peers = [(steps, run.duration_s) for run in state.runs
                 if run.ok and run.duration_s and run.commit in (commit, state.incumbent)
                 and (steps := reported_steps(run.metrics)) is not None]
        return judge_budget(duration_s, self.plan.budget_s, self.plan.grace_s,
                                   steps=reported_steps(metrics),
                                   planned_steps=self.plan.steps.steps if self.plan.steps else None,
                                   peers=peers[-8:])

    def _diff_of(self, commit: str) -> tuple[str | None, str]:
        """A commit's parent and patch (git twice per commit, not per run)."""
        if commit not in self._diffs:
            parent = self.workspace.parent(commit)
            self._diffs[commit] = (parent, self.workspace.diff(commit) if parent else "")
        return self._diffs[commit]

    def run(self, commit: str, seed: int, role: Role, experiment: str | None,
            on_output: Callable[[str], None] | None = None,
            stop: threading.Event | None = None) -> RunFinished:
        """One run, here and now, on this process's runner (for `check`, `noise` and
        `replay`): returns the recorded run_finished event. Ctrl-C records it as interrupted,
        and so does `stop` set from another thread (the runner kills the run within a second)."""
        job = self.prepare(commit, seed, role, experiment)
        stop = stop or threading.Event()
        curves = LiveCurves(self.plan.metrics_pattern)
        curves.start(job.run_id, job.spec.budget_s)

        def lines(line: str) -> None:
            curves.feed(job.run_id, line)
            if on_output is not None:
                on_output(line)
        try:
            outcome = execute(self.runner, job, WHOLE_MACHINE, stop, lines)
        except KeyboardInterrupt as interrupt:   # a RunInterrupted carries the run's result
            result = interrupt.result if isinstance(interrupt, RunInterrupted) else None
            self.finish(job, JobOutcome(job.run_id, 0, result, error="interrupted by the user")
                        if result else JobOutcome(job.run_id, 0, None, error="interrupted by the user"),
                        curve=curves.finish(job.run_id))
            raise
        return self.finish(job, outcome, curve=curves.finish(job.run_id))


WHOLE_MACHINE = Slot(0, "cpu")   # a run on its own: every core, the plan's GPU


def measure(executor: RunExecutor, observer: Observer, commit: str, seed: int, role: Role,
            experiment: str | None, label: str) -> RunFinished:
    """Run `commit` on `seed` on this process's runner, shown as it goes (`nightshift noise`):
    the ledger's run_finished."""
    observer.run_started("", WHOLE_MACHINE, commit, seed, role, experiment, executor.plan.budget_s,
                         label)
    run = executor.run(commit, seed, role, experiment, on_output=lambda line: observer.output("", line))
    observer.run_finished(run)
    return run


def _step(result: RunResult) -> StepEvidence:
    return StepEvidence(status=result.status, reason=result.reason, metrics=result.metrics,
                        duration_s=result.duration_s, hidden_read=tuple(result.hidden_read))


_EVALUATOR_OWN = ("probes", "fingerprint", "probe_seed", "split")


def _figures(evaluation: RunResult | None) -> dict:
    """The evaluation's figures for the run's metrics (its probes and fingerprint have fields
    of their own); they win over the script's own claims of the same names."""
    if evaluation is None:
        return {}
    return {k: v for k, v in evaluation.metrics.items() if k not in _EVALUATOR_OWN}


def _fingerprint(evaluation: RunResult | None) -> tuple[float, ...]:
    values = evaluation.metrics.get("fingerprint") if evaluation else None
    if not isinstance(values, list):
        return ()
    return tuple(float(v) for v in values[:512] if isinstance(v, (int, float)))


def _relative(path: Path, root: Path) -> str:
    path = Path(path)
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _mounts_hash(mounts: tuple[DataMount, ...]) -> str | None:
    """The content hash of program.md's data: folder (cached by its stat digest), or None."""
    if not mounts:
        return None
    if len(mounts) == 1:
        return content_hash(mounts[0].source)
    joined = "".join(f"{m.path}={content_hash(m.source)};" for m in mounts)
    return hashlib.sha256(joined.encode()).hexdigest()[:16]

