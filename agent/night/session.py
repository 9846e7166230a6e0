"""Assembling a loop from a program and the command line: the one place that picks the
researcher, the sandbox, the decision rule and the folders of a tag."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from agent.night.data import prepare_data
from agent.decide.decision import DecisionRule, NoiseBandRule
from agent.record.ledger import Ledger, fold
from agent.record.summary import experiment_detail
from agent.night.loop import ResearchLoop
from agent.night.runs import RunExecutor, RunPlan
from agent.workspace.repo import Workspace
from sandbox import Limits

_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def default_tag() -> str:
    return date.today().strftime("%b%d").lower()   # autoresearch's habit: one tag a night


def results_dir(program: Any, tag: str) -> Path:
    folder = program.root / "results" / tag
    ignore = program.root / "results" / ".gitignore"
    if not ignore.exists():
        # Keep the user's `git status` clean without touching their .gitignore.
        ignore.parent.mkdir(parents=True, exist_ok=True)
        ignore.write_text("*\n")
    return folder


def data_cache() -> Path:
    return Path(os.environ.get("NIGHTSHIFT_DATA_ROOT", Path.home() / ".cache" / "nightshift" / "data"))


def make_rule(program: Any) -> DecisionRule:
    if program.decision == "noise_band":
        return NoiseBandRule(seeds=program.seeds.max, baseline=program.seeds.baseline)
    from agent.decide.sequential import SequentialRule

    return SequentialRule(alpha=program.alpha, min_effect=program.min_effect,
                          baseline=program.seeds.baseline, screen=program.seeds.screen,
                          max_seeds=program.seeds.max, fdr=program.fdr)


def gpu_for_runs() -> int | None:
    """One GPU per run, chosen by the harness: the first one, when there is any."""
    try:
        import torch

        return 0 if torch.cuda.is_available() else None
    except Exception:
        return None


@dataclass
class Session:
    loop: ResearchLoop
    results: Path
    notes: list[str]           # what was picked and why, printed at start


def build_session(program: Any, tag: str, *, researcher: str, sandbox: str, observer: Any,
                  script: Path | None = None, seed: int = 0, split: str = "val") -> Session:
    from agent.researchers.registry import make_researcher, resolve_researcher_name
    from sandbox.select import make_runner

    if not _TAG.match(tag):
        raise ValueError(f"tag {tag!r} is not usable as a git ref part: use letters, digits, . _ -")
    results = results_dir(program, tag)
    ledger = Ledger(results)
    workspace = Workspace.open(program.root, tag, results / "worktree")
    data = prepare_data(program.prepare, workspace.path, data_cache())
    runner, sandbox_why = make_runner(sandbox, image=program.image)
    name, researcher_why = resolve_researcher_name(researcher, os.environ)
    def detail(experiment_id: str) -> str:
        return experiment_detail(fold(ledger.events()), experiment_id, workspace.diff)

    chosen = make_researcher(name, state_dir=results / "researcher", program=program,
                             script=script, seed=seed, experiment_detail=detail)
    rule = make_rule(program)
    limits = Limits(memory_mb=program.limits.memory_mb, pids=program.limits.pids,
                    cpus=program.limits.cpus, gpu=gpu_for_runs())
    plan = RunPlan(command=program.command, metric=program.metric, budget_s=program.budget_s,
                   grace_s=program.grace_s, protected=tuple(program.protected), limits=limits,
                   target=program.target,
                   split=split)
    executor = RunExecutor(plan=plan, runner=runner, workspace=workspace, ledger=ledger,
                           data=data, results_dir=results)
    facts = {"researcher": chosen.name, "researcher_why": researcher_why, "sandbox": runner.name,
             "sandbox_why": sandbox_why, "sandbox_facts": runner.describe(), "rule": rule.name,
             "data_dir": str(data.path), "corpus_hash": data.corpus_hash,
             "budget_s": program.budget_s}
    loop = ResearchLoop(tag=tag, program=program, workspace=workspace, ledger=ledger,
                        executor=executor, researcher=chosen, rule=rule, observer=observer,
                        facts=facts)
    notes = [f"researcher: {chosen.name} ({researcher_why})", f"sandbox: {sandbox_why}",
             f"decision rule: {rule.name}", f"data: {data.path}", f"results: {results}"]
    return Session(loop=loop, results=results, notes=notes)
