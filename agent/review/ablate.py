"""`nightshift ablate`: which of a night's kept changes still matter, together, at full scale.

A night keeps changes one at a time, each against the incumbent of its moment. Whether each
still matters once they are all in place is another question: a later change can make an
earlier one redundant (two ways to the same gain) or be worth something only with it. Leave
one out answers it: from the final incumbent I, for each kept change k the variant I∖k is I
with k's change reverted, a three-way merge as the loop's rebase does
(agent/workspace/merge.py): the diff parent(k) ← k applied onto I. A revert whose lines a
later keep changed again conflicts; it is reported ("conflict") and not run, never guessed.
A change that a later keep undid already is "absent".

I, the base B and every I∖k run on the same fresh seeds (ABLATION_SEEDS on: never a seed of
the night) at the full-scale budget, seed-major so that a machine's drift hits all alike, on
the night's workers (`cluster:` local or Ray, `workers:`). agent/review/contributions.py
turns the values into each change's contribution with its interval and p-value, the whole
gain, and the interaction the sum does not explain.

Where things go: the runs are recorded by `RunExecutor` in a ledger of their own,
`results/<tag>/ablations/<ablation_id>/ledger.jsonl` (with `runs/`), so they never mix with
the night's measurements; each variant commit is kept under
`refs/nightshift/<tag>/ablations/<ablation_id>-<experiment>`; the tag's ledger gets
`ablation_planned`, one `ablation_run` per run, one `ablation_change` per kept change and
`ablation_summary` (docs/ledger.md). The tag is locked while it runs, as for a night.
"""
from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from agent.program import Program
from agent.record.records import Direction
from agent.run.executor import RunExecutor
from agent.record.events import (AblationChange, AblationPlanned, AblationRun, AblationSummary, ChangeStatus,
                                 Event, Role)
from agent.record.ledger import LEDGER_FILE, Ledger
from agent.record.state import LoopState
from agent.review.contributions import leave_one_out
from agent.review.replay import FullScaleRuns, dated_id, new_dated_dir
from agent.workspace.merge import three_way_merge
from agent.workspace.repo import Workspace
from cluster.protocol import Job, OnDone, JobOutcome, Slot, Workers

ABLATIONS_DIR = "ablations"
ABLATION_SEEDS = 700_000      # far from the night's (0.., 1000..) and noise's (900000..) seeds
ABORT_WAIT_S = 30.0


class AblationError(RuntimeError):
    """Nothing to ablate, or the tag cannot be ablated as it is; the message says why."""


@dataclass(frozen=True)
class Variant:
    """One thing to run: the incumbent, the base, or the incumbent without one kept change
    (`experiment`, whose commit and parent made the change)."""

    name: str                      # "incumbent" | "base" | the experiment id
    commit: str | None             # what runs (None: the revert could not be built)
    experiment: str | None = None
    kept_commit: str | None = None
    parent: str | None = None
    description: str = ""
    status: ChangeStatus = ChangeStatus.PLANNED   # or CONFLICT, ABSENT: not run
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "experiment": self.experiment, "commit": self.kept_commit,
                "parent": self.parent, "description": self.description,
                "variant_commit": self.commit, "status": self.status.value, "reason": self.reason}


def plan_variants(state: LoopState, workspace: Workspace, target: str,
                  ablation_id: str) -> list[Variant]:
    """The incumbent, the base and, per kept change in the order kept, the incumbent with
    that change reverted (committed on top of the incumbent and pinned under a ref)."""
    incumbent, base = state.incumbent, state.base_commit
    kept = state.kept()
    if not kept or not incumbent or not base or incumbent == base:
        raise AblationError("nothing to ablate: the tag has no kept commit (its incumbent is "
                            "still the base)")
    variants = [Variant("incumbent", incumbent, description="the final incumbent"),
                Variant("base", base, description="where the night started")]
    ours = workspace.read(target, incumbent)
    for experiment in kept:
        change = dict(experiment=experiment.id, kept_commit=experiment.commit,
                      parent=experiment.parent, description=experiment.description)
        merged = three_way_merge(base=workspace.read(target, experiment.commit), ours=ours,
                                 theirs=workspace.read(target, experiment.parent))
        if merged is None:
            variants.append(Variant(experiment.id, None, status=ChangeStatus.CONFLICT, **change, reason=(
                "its revert conflicts with a later kept change to the same lines of "
                f"{target}; not guessed, not run")))
            continue
        if merged == ours:
            variants.append(Variant(experiment.id, None, status=ChangeStatus.ABSENT, **change, reason=(
                "the incumbent no longer holds this change (a later keep undid it)")))
            continue
        sha = workspace.commit_candidate(
            target, merged, f"ablation {ablation_id}: the incumbent without {experiment.id}\n\n"
            f"Reverts {experiment.commit[:12]} ({experiment.description}) on top of "
            f"{incumbent[:12]}.", parent=incumbent)
        workspace.pin(sha, ABLATIONS_DIR, f"{ablation_id}-{experiment.id}")
        variants.append(Variant(experiment.id, sha, **change))
    return variants


@dataclass
class Ablator:
    """Runs the variants of one ablation of a tag on the night's workers and records it.
    `executor` writes to the ablation's own ledger and folder (see `build_ablator`)."""

    ledger: Ledger                 # the tag's ledger: receives the ablation events
    state: LoopState               # the tag's state, folded before the ablation starts
    executor: RunExecutor
    make_workers: Callable[[OnDone], Workers]
    ablation_id: str
    direction: Direction = Direction.MINIMIZE
    on_event: Callable[[Event], None] = lambda event: None
    events: list[Event] = field(default_factory=list)   # what this ablation recorded

    def ablate(self, variants: Sequence[Variant], settings: FullScaleRuns) -> AblationSummary:
        """Run every runnable variant on every seed, then record each change's contribution
        and the summary; returns the summary event. Ctrl-C ends the runs in flight (recorded
        as interrupted) and propagates; the events recorded so far stay."""
        incumbent = next(v for v in variants if v.name == "incumbent")
        base = next(v for v in variants if v.name == "base")
        self._emit(AblationPlanned(ablation_id=self.ablation_id, incumbent=incumbent.commit,
                                   base=base.commit, budget_s=settings.budget_s,
                                   seeds=tuple(settings.seeds), split=settings.split,
                                   variants=[v.to_dict() for v in variants if v.experiment]))
        runnable = [v for v in variants if v.commit is not None]
        values = self._run_all(runnable, settings)
        return self._record_results(variants, values, settings)

    # ---- running ---------------------------------------------------------------------------

    def _run_all(self, variants: Sequence[Variant],
                 settings: FullScaleRuns) -> dict[str, dict[int, float]]:
        """variant name -> seed -> metric of its OK runs."""
        todo = [(seed, variant) for seed in settings.seeds for variant in variants]
        values: dict[str, dict[int, float]] = {v.name: {} for v in variants}
        done: "queue.Queue[JobOutcome]" = queue.Queue()
        workers = self.make_workers(done.put)
        running: dict[str, tuple[Job, Variant, Slot]] = {}
        try:
            while todo or running:
                busy = {slot.index for _, _, slot in running.values()}
                for slot in [s for s in workers.slots if s.index not in busy]:
                    if not todo:
                        break
                    seed, variant = todo.pop(0)
                    job = self.executor.prepare(variant.commit, seed, Role.ABLATION,
                                                variant.experiment, slot=slot,
                                                label=_label(variant))
                    workers.submit(slot, job)
                    running[job.run_id] = (job, variant, slot)
                try:
                    outcome = done.get(timeout=0.5)
                except queue.Empty:
                    continue
                self._landed(outcome, running, values)
        except KeyboardInterrupt:
            self._abort(workers, done, running, values)
            raise
        finally:
            workers.close()
            for variant in variants:
                self.executor.release(variant.commit)
        return values

    def _landed(self, outcome: JobOutcome, running: dict[str, tuple[Job, Variant, Slot]],
                values: dict[str, dict[int, float]]) -> None:
        if outcome.run_id not in running:
            return   # reported twice (a backend's retry): the first report stands
        job, variant, _ = running.pop(outcome.run_id)
        run = self.executor.finish(job, outcome)
        if run.ok and run.metric is not None:
            values[variant.name][run.seed] = run.metric
        self._emit(AblationRun(ablation_id=self.ablation_id, variant=variant.name,
                               commit=run.commit, seed=run.seed, status=run.status,
                               metric=run.metric, duration_s=run.duration_s, run_id=run.run_id,
                               reason=run.reason))

    def _abort(self, workers: Workers, done: "queue.Queue[JobOutcome]",
               running: dict[str, tuple[Job, Variant, Slot]],
               values: dict[str, dict[int, float]]) -> None:
        """Ctrl-C: end every run in flight and record how each ended."""
        workers.cancel_all()
        deadline = time.monotonic() + ABORT_WAIT_S
        while running and time.monotonic() < deadline:
            try:
                self._landed(done.get(timeout=0.5), running, values)
            except queue.Empty:
                continue
        for run_id in list(running):
            job, _, _ = running.pop(run_id)
            self.executor.finish(job, JobOutcome(run_id, 0, None, error="interrupted by the user"))

    # ---- recording -------------------------------------------------------------------------

    def _record_results(self, variants: Sequence[Variant], values: dict[str, dict[int, float]],
                        settings: FullScaleRuns) -> AblationSummary:
        changes = [v for v in variants if v.experiment]
        measured = [v for v in changes if v.commit is not None and values.get(v.name)]
        found = leave_one_out(values.get("incumbent", {}), values.get("base", {}),
                              {v.name: values[v.name] for v in measured}, self.direction)
        for variant in changes:
            estimate = found.contributions.get(variant.name)
            status, reason = variant.status, variant.reason
            if variant.commit is not None:
                status = ChangeStatus.MEASURED if estimate is not None and estimate.n else ChangeStatus.FAILED
                if status == ChangeStatus.FAILED:
                    reason = "no seed on which both it and the incumbent ran successfully"
            self._emit(AblationChange(
                ablation_id=self.ablation_id, experiment=variant.name, commit=variant.kept_commit,
                parent=variant.parent, description=variant.description, status=status,
                reason=reason, variant_commit=variant.commit, values=dict(values.get(variant.name, {})),
                contribution=estimate.value if estimate else None,
                interval=estimate.interval if estimate else None,
                p_value=estimate.p_value if estimate else None,
                p_adjusted=found.adjusted.get(variant.name), n=estimate.n if estimate else 0))
        incumbent = next(v for v in variants if v.name == "incumbent")
        base = next(v for v in variants if v.name == "base")
        counted = tuple(v.name for v in measured if found.contributions[v.name].n)
        return self._emit(AblationSummary(
            ablation_id=self.ablation_id, incumbent=incumbent.commit, base=base.commit,
            budget_s=settings.budget_s, seeds=tuple(settings.seeds), split=settings.split,
            level=found.gain.level, incumbent_values=dict(values.get("incumbent", {})),
            base_values=dict(values.get("base", {})), full_gain=found.gain.value,
            full_interval=found.gain.interval, full_p=found.gain.p_value,
            sum_contributions=found.sum_contributions, interaction=found.interaction.value,
            interaction_interval=found.interaction.interval,
            interaction_p=found.interaction.p_value, measured=counted,
            not_measured=tuple(v.name for v in changes if v.name not in counted)))

    def _emit(self, event: Event) -> Any:
        event = self.ledger.append(event)
        self.events.append(event)
        self.on_event(event)
        return event


def _label(variant: Variant) -> str:
    if variant.experiment:
        return f"ablation: the incumbent without {variant.experiment} ({variant.description[:40]})"
    return f"ablation: the {variant.name}"


@dataclass
class Assembled:
    """An ablation ready to run, and what must be closed after it."""

    ablator: Ablator
    variants: list[Variant]
    workspace: Workspace
    lock: Any                      # the tag's TagLock

    def close(self) -> None:
        self.workspace.close()
        self.lock.release()


def build_ablator(program: Program, tag: str, settings: FullScaleRuns, *, sandbox: str,
                  on_event: Callable[[Event], None] = lambda event: None, runner: Any = None,
                  gpus: list[int] | None = None) -> Assembled:
    """Assemble an ablation of `tag` the way `nightshift run` assembles a night (the same
    workspace, data, sandbox and workers), holding the tag's lock. Raises FileNotFoundError
    without a ledger, TagLocked while a night runs, AblationError when nothing was kept."""
    from agent.run.data import prepare_data
    from agent.preflight.lock import TagLock
    from agent.run.plan import RunPlan
    from agent.night.session import night_workers
    from agent.run.data import data_cache
    from agent.run.plan import results_dir

    tag_dir = results_dir(program, tag)
    if not (tag_dir / LEDGER_FILE).exists():
        raise FileNotFoundError(f"no ledger at {tag_dir / LEDGER_FILE}; run `nightshift run "
                                f"--tag {tag}` first, or pass the tag whose night to ablate")
    lock = TagLock.acquire(tag_dir, tag)   # a night must not move the worktree meanwhile
    try:
        ledger = Ledger(tag_dir)
        if ledger.state.pending_experiments():
            raise AblationError(f"tag {tag} has experiments still undecided "
                                f"({', '.join(e.id for e in ledger.state.pending_experiments())}); "
                                f"`nightshift run --tag {tag}` finishes them first")
        workspace = Workspace.open(program.root, tag, tag_dir / "worktree")
        try:
            ablation_id = dated_id()
            variants = plan_variants(ledger.state, workspace, program.target, ablation_id)
            _, folder = new_ablation_dir(tag_dir, ablation_id)
            data = prepare_data(program.prepare, workspace.path, data_cache())
            if runner is None:
                from sandbox.select import make_runner

                runner, _ = make_runner(sandbox, image=program.image)
            plan = RunPlan.from_program(program, budget_s=settings.budget_s, split=settings.split)
            executor = RunExecutor(plan=plan, runner=runner, workspace=workspace,
                                   ledger=Ledger(folder), data=data, results_dir=folder,
                                   private_root=tag_dir.parent)
        except BaseException:
            workspace.close()
            raise
    except BaseException:
        lock.release()
        raise
    ablator = Ablator(ledger=ledger, state=ledger.state, executor=executor,
                      make_workers=lambda on_done: night_workers(program, runner, on_done, tag=tag,
                                                                 results=tag_dir, gpus=gpus),
                      ablation_id=ablation_id, direction=program.direction, on_event=on_event)
    return Assembled(ablator, variants, workspace, lock)


def new_ablation_dir(tag_dir: Path, ablation_id: str | None = None) -> tuple[str, Path]:
    """A fresh ablation id (or `ablation_id`) and its folder under results/<tag>/ablations/."""
    return new_dated_dir(Path(tag_dir) / ABLATIONS_DIR, ablation_id)
