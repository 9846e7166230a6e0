"""What the researcher is shown before its next proposal: the incumbent's source and the
protected files at the incumbent, the brief of the ledger, the measured noise, and the test a
candidate must pass (`EvaluationPlan`, with the lines of the target that the command's flags
override: the researcher is told they are fixed)."""
from __future__ import annotations

from agent.decide.decision import pooled_sd
from agent.program import Program
from agent.record.brief import EvaluationPlan, build_brief
from agent.record.provenance import environment
from agent.record.state import LoopState
from agent.researchers import ResearchContext
from agent.target.overrides import overridden
from agent.workspace.repo import Workspace


def evaluation_plan(program: Program, budget_s: float, rule_name: str,
                    target_source: str = "") -> EvaluationPlan:
    """The test a candidate must pass, as the brief states it, with the lines of the target
    (`target_source`, the incumbent's) that the command's flags override."""
    fixed = tuple(o.describe() for o in overridden(target_source, program.target, program.command))
    return EvaluationPlan(metric=program.metric, direction=program.direction, budget_s=budget_s,
                          seeds_baseline=program.seeds.baseline, seeds_screen=program.seeds.screen,
                          seeds_max=program.seeds.max, alpha=program.alpha,
                          min_effect=program.min_effect, rule=rule_name, fdr=program.fdr,
                          evaluator=program.evaluate is not None, target=program.target, fixed=fixed,
                          early_stop=program.early_stop.checkpoints if program.early_stop.enabled else ())


def protected_sources(workspace: Workspace, program: Program, commit: str) -> dict[str, str]:
    sources = {}
    for path in program.protected:
        try:
            sources[path] = workspace.read(path, commit)
        except (KeyError, FileNotFoundError, ValueError):
            continue  # a protected path that is not in the repository has nothing to read
    return sources


def research_context(state: LoopState, program: Program, workspace: Workspace, plan: EvaluationPlan,
                     *, offset: int, deadline: float | None) -> ResearchContext:
    """The context of the researcher's next call; `offset` counts the proposals already being
    prepared or waiting, so each call knows its own experiment index."""
    reference = state.reference(state.incumbent)
    sd, dof = pooled_sd(state.noise_groups())
    source = workspace.read(program.target, state.incumbent)
    if not plan.fixed:   # the lines the command overrides, in the incumbent's target
        plan = evaluation_plan(program, plan.budget_s, plan.rule, source)
    brief = build_brief(state, plan, noise_sd=sd, noise_dof=dof, environment=environment())
    return ResearchContext(
        program_text=program.prose, target=program.target,
        incumbent_source=source,
        incumbent_commit=state.incumbent,
        protected=protected_sources(workspace, program, state.incumbent),
        ledger_summary=brief.text(),
        metric=program.metric, direction=program.direction, noise_sd=sd,
        incumbent_value=sum(reference.values()) / len(reference) if reference else None,
        experiment_index=state.researcher_proposals + 1 + offset,
        hypotheses=tuple(state.open_hypotheses()), workdir=workspace.path,
        brief=brief, deadline=deadline,
    )
