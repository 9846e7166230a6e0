"""Assembling a loop from a program and the command line: the one place that picks the
researcher, the sandbox, the decision rule and the folders of a tag."""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from agent.decide.rules import make_rule
from agent.night.loop import ResearchLoop
from agent.preflight.held_out_scan import before_the_night
from agent.preflight.leftovers import end_jobs, end_leftovers
from agent.preflight.lock import TagLock, refuse_if_locked
from agent.preflight.prestart import prestart
from agent.preflight.run_length import LengthWarnings
from agent.program import Program
from agent.record.ledger import Ledger, read_snapshot
from agent.record.provenance import environment
from agent.record.summary import experiment_detail
from agent.run.data import data_cache, prepare_data
from agent.run.executor import RunExecutor
from agent.run.grading import measurement_note
from agent.run.observer import Observer
from agent.run.plan import RunPlan, results_dir
from agent.workspace.inspect import archive_tag
from agent.workspace.repo import Workspace
from cluster.protocol import ClusterUnavailable, OnDispatched, OnDone, Workers
from cluster.select import make_workers
from cluster.slurm_settings import job_prefix

_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def default_tag() -> str:
    return date.today().strftime("%b%d").lower()   # autoresearch's habit: one tag a night


@dataclass
class Session:
    loop: ResearchLoop
    results: Path
    notes: list[str]           # what was picked and why, printed at start
    lock: TagLock | None = None

    def close(self) -> None:
        """Release the tag (its lock) and git's helper processes. Idempotent."""
        self.loop.workspace.close()
        if self.lock is not None:
            self.lock.release()


def build_session(program: Program, tag: str, *, researcher: str, sandbox: str,
                  observer: Observer, script: Path | None = None, seed: int = 0,
                  split: str = "val", gpus: list[int] | None = None, fresh: bool = False,
                  allow_dirty: bool = False, silence_s: float | None = None) -> Session:
    """A loop of `program` on `tag`, ready to run, holding the tag's lock (`Session.close`
    releases it). Everything that can be checked is checked before anything is written:
    program.md against the repository (prestart), the rule, the sandbox and the
    researcher's name; then the lock is taken, and only then do the branch, the worktree
    and the results folder appear. `gpus` replaces the GPUs found on this machine (tests
    that fake a device list); `fresh` archives the refs of a tag whose ledger is gone;
    `allow_dirty` runs HEAD despite uncommitted changes to the target or protected files;
    `silence_s` is how long the external researcher waits for an agent that proposes nothing."""
    from agent.researchers.registry import resolve_researcher_name
    from sandbox.select import make_runner

    if not _TAG.match(tag):
        raise ValueError(f"tag {tag!r} is not usable as a git ref part: use letters, digits, . _ -")
    results = program.root / "results" / tag
    refuse_if_locked(results, tag)   # a running loop is the first thing to say, not a detail
    snapshot = read_snapshot(results)   # the one read of the ledger; nothing written yet
    plan = prestart(program, tag, results, snapshot.state if snapshot else None, fresh=fresh,
                    allow_dirty=allow_dirty)
    rule = make_rule(program.decision, program.rule_settings)
    if program.cluster == "slurm" and sandbox == "auto":
        # the nodes' sandbox: a Docker engine on the login node says nothing of the nodes
        runner, _ = make_runner("local", image=program.image)
        sandbox_why = "local (auto on Slurm: the local sandbox on each node)"
    else:
        runner, sandbox_why = make_runner(sandbox, image=program.image)
    name, researcher_why = resolve_researcher_name(researcher, os.environ)
    if program.control > 0 and name == "optuna":
        raise ValueError(f"{program.locate('control')}: control: {program.control:g} asks for an "
                         f"LLM-free control arm beside an LLM researcher, but the researcher is "
                         f"optuna already; set control: 0 or choose researcher: claude")
    # Nothing is written before this line; the lock is the first thing.
    results_dir(program, tag)
    lock = TagLock.acquire(results, tag)
    try:
        # Again, under the lock: what the tag holds now is what this night acts on (the
        # ledger applies only what was appended since the snapshot).
        ledger = Ledger(results, snapshot)
        plan = prestart(program, tag, results, ledger.state if ledger.path.exists() else None,
                        fresh=fresh, allow_dirty=allow_dirty)
        notes = [lock.note] if lock.note else []
        if plan.archive:
            prefix = archive_tag(program.root, tag, time.strftime("%Y%m%dT%H%M%S"))
            notes.append(f"--fresh: the old refs of tag {tag} are kept under {prefix}/")
        notes += plan.notes
        ended = end_leftovers(results / "runs")
        if ended:
            notes.append(f"ended {len(ended)} process{'es' if len(ended) > 1 else ''} an earlier "
                         f"harness of tag {tag} left running: {', '.join(ended)}")
        notes += _end_jobs(program, tag, results, ledger)
        workspace = Workspace.open(program.root, tag, results / "worktree")
        if plan.starts and workspace.head() != plan.head:
            workspace.reset_to(plan.head)     # a night with no evidence starts at today's HEAD
        loop, more = _assemble(program, tag, results, ledger, workspace, rule, runner, sandbox_why,
                               name, researcher_why, observer, script, seed, split, gpus,
                               silence_s)
    except BaseException:
        lock.release()
        raise
    return Session(loop=loop, results=results, notes=notes + more, lock=lock)


def night_workers(program: Program, runner: Any, on_done: OnDone, *, tag: str, results: Path,
                  gpus: list[int] | None = None, on_dispatched: OnDispatched | None = None) -> Workers:
    """Where `program`'s runs execute (program.md `cluster:` and `workers:`): the night's
    and every other tool's that runs many (`ablate`). Slurm jobs are named after the tag."""
    return make_workers(program.cluster, runner=runner, sandbox=runner.name, image=program.image,
                        workers=program.workers, on_done=on_done, address=program.cluster_address,
                        gpus=gpus, cpus_per_run=program.limits.cpus, facts=environment,
                        slurm=program.slurm, job_prefix=job_prefix(tag, results),
                        memory_mb=program.limits.memory_mb, on_dispatched=on_dispatched)


def _end_jobs(program: Program, tag: str, results: Path, ledger: Ledger) -> list[str]:
    """Cancel the Slurm jobs an earlier harness of the tag left queued or running."""
    from cluster import slurm_queue

    try:
        cancelled = end_jobs(ledger.state if ledger.path.exists() else None, job_prefix(tag, results),
                             required=program.cluster == "slurm")
    except slurm_queue.SlurmError as error:
        raise ClusterUnavailable(str(error)) from None
    if not cancelled:
        return []
    return [f"cancelled {len(cancelled)} Slurm job{'s' if len(cancelled) > 1 else ''} an earlier "
            f"harness of tag {tag} left queued or running: {', '.join(cancelled)}"]


def _assemble(program: Program, tag: str, results: Path, ledger: Ledger, workspace: Workspace,
              rule: Any, runner: Any, sandbox_why: str, name: str, researcher_why: str,
              observer: Observer, script: Path | None, seed: int, split: str,
              gpus: list[int] | None, silence_s: float | None = None) -> tuple[ResearchLoop, list[str]]:
    from agent.researchers.inbox import Inbox, taken_proposals
    from agent.researchers.registry import make_researcher

    data = prepare_data(program.prepare, workspace.path, data_cache())
    view_note = before_the_night(program, data, workspace.path, runner)

    def detail(experiment_id: str) -> str:
        return experiment_detail(ledger.state, experiment_id, workspace.diff,
                                 direction=program.direction)

    chosen = make_researcher(name, state_dir=results / "researcher", direction=program.direction,
                             claude=program.claude, openai=program.openai, script=script,
                             seed=seed, experiment_detail=detail, knobs=program.knobs,
                             results=results, taken=taken_proposals(ledger.state.experiments),
                             silence_s=silence_s)
    if chosen.name == "external":
        Inbox(results).reopen()   # a `done` said to an earlier invocation does not end this one
    control = None
    if program.control > 0:     # checked before anything was written (build_session)
        control = make_researcher("optuna", state_dir=results / "researcher" / "control",
                                  direction=program.direction, seed=seed, knobs=program.knobs)
    plan = RunPlan.from_program(program, split=split)
    executor = RunExecutor(plan=plan, runner=runner,
                           workspace=workspace, ledger=ledger, data=data, results_dir=results)

    def workers(on_done: OnDone, on_dispatched: OnDispatched) -> Workers:
        return night_workers(program, runner, on_done, tag=tag, results=results, gpus=gpus,
                             on_dispatched=on_dispatched)
    facts: dict[str, Any] = {
        "researcher": chosen.name, "researcher_why": researcher_why, "sandbox": runner.name,
        "sandbox_why": sandbox_why, "sandbox_facts": runner.describe(), "rule": rule.name,
        "data_dir": str(data.path), "corpus_hash": executor.data_hash, "budget_s": program.budget_s}
    watched = LengthWarnings(observer, plan)
    loop = ResearchLoop(tag=tag, program=program, workspace=workspace, ledger=ledger,
                        executor=executor, researcher=chosen, rule=rule, make_workers=workers,
                        observer=watched, facts=facts, overlap=program.overlap,
                        control=control, control_share=program.control)
    shown = "auto" if program.workers is None else program.workers
    notes = [f"researcher: {chosen.name} ({researcher_why})", f"sandbox: {sandbox_why}",
             f"workers: {shown} on {program.cluster}"
             + ("" if program.overlap else " (proposals only between runs: overlap false)"),
             f"decision rule: {rule.name}", f"data: {data.path}", f"results: {results}"]
    if view_note:
        notes.insert(2, view_note)
    if chosen.name == "external":
        notes.insert(1, f"the agent proposes: `nightshift checkout --tag {tag}` gives it a copy of "
                        f"the incumbent, `nightshift propose --tag {tag} ...` hands an edit over, "
                        f"`nightshift wait --tag {tag} ID --json` reads the verdict (docs/agents.md)")
    if control is not None:
        notes.insert(1, f"control arm: optuna proposes {program.control:.0%} of the experiments "
                        f"(report: Arms)")
    for mount in plan.mounts:
        notes.insert(4, f"data folder: {mount.path} of your checkout, read-only at that path in every run")
    apart, how = measurement_note(program.evaluate, program.edits, program.target)
    notes.insert(2, f"metric: {how}" if apart else f"metric: WARNING: {how}")
    return loop, notes
