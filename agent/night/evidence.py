"""What the keep rule and the integrity checks are shown of a pending candidate: pure
functions of the night's state (the loop asks them; nothing here records anything)."""
from __future__ import annotations

from agent.decide.compute import cost
from agent.decide.decision import DecisionRule, Evidence, RunMore, pooled_sd
from agent.decide.integrity import Flag, judge_experiment
from agent.decide.no_effect import no_effect
from agent.program import Program
from agent.record.events import ComputeCost, Direction, Role
from agent.record.state import Experiment, LoopState
from agent.run.budget import judge_budget


def evidence_for(state: LoopState, experiment: Experiment, direction: Direction, workers: int,
                 candidate: dict[int, float] | None = None) -> Evidence:
    """The keep rule's evidence on `experiment` (`candidate`: values to judge instead of its
    own, for early stopping's "would a run ending there lose?")."""
    sd, dof = pooled_sd(state.noise_groups())
    pending = max(1, len(state.pending_experiments()))
    return Evidence(
        direction=direction,
        candidate=state.ok_values(experiment.commit, Role.CANDIDATE) if candidate is None else candidate,
        reference=state.reference(experiment.parent),
        noise_sd=sd, noise_dof=dof, history=state.history(experiment),
        runs=state.same_seed_runs(), repeats=state.repeat_pairs(),
        reference_order=state.reference_order(experiment.parent),
        incumbent_runs=state.timeline(experiment.parent),
        candidate_order={seed: runs[0][0] for seed, runs
                         in state.timeline(experiment.commit, Role.CANDIDATE).items()},
        looks=tuple(experiment.looks) if experiment.looks_recorded else None,
        batch=max(1, workers // pending),
    )


def integrity_flag(state: LoopState, program: Program, experiment: Experiment) -> Flag | None:
    """What no single run shows, across the candidate's runs and the incumbent's, the
    generalization gap against the baseline's: the night's first incumbent's runs, which no
    candidate chose (agent.decide.integrity.judge_experiment)."""
    reference = [r for r in state.runs if r.commit == experiment.parent and r.role == Role.REFERENCE]
    base = [r for r in state.runs if r.commit == state.base_commit and r.role == Role.REFERENCE and r.ok]
    budget = state.budget_s or program.budget_s
    wall_clock = any(judge_budget(r.duration_s, budget, program.grace_s).kind == "wall_clock"
                     for r in base)
    return judge_experiment(experiment.runs, reference, budget_s=budget, wall_clock=wall_clock,
                            metric=program.metric, baseline=base)


def compute_cost(state: LoopState, program: Program, experiment: Experiment) -> ComputeCost | None:
    """The candidate's finished runs' time against the incumbent's (any role: a run's time does
    not select it), under program.md's compute: (agent.decide.compute). Runs stopped early
    are not in the state's runs: they were cut short."""
    incumbent = [r for r in state.runs if r.commit == experiment.parent]
    return cost(experiment.runs, incumbent, program.compute)


def inert(state: LoopState, experiment: Experiment) -> str | None:
    """Why the candidate did nothing (its runs equal the incumbent's on the same seeds), or
    None (agent.decide.no_effect)."""
    incumbent = {seed: [value for _, value in runs] for seed, runs in state.timeline(experiment.parent).items()}
    return no_effect(state.ok_values(experiment.commit, Role.CANDIDATE), incumbent)


def waiting(state: LoopState, asked: RunMore | None, experiment: Experiment) -> bool:
    """Whether seeds the rule asked for on `experiment` are still to land."""
    if asked is None:
        return False
    candidate = state.ok_values(experiment.commit, Role.CANDIDATE)
    reference = state.reference(experiment.parent)
    return (any(seed not in candidate for seed in asked.candidate_seeds)
            or any(seed not in reference for seed in asked.reference_seeds)
            or any(not state.bracketed(experiment.parent, experiment.commit, seed)
                   for seed in asked.again_seeds))


def night_history(state: LoopState) -> tuple:
    """Every test decided so far, oldest first (what the rule's incumbent_seeds reads)."""
    return tuple(d.decision for d in state.decisions if d.decision)


def incumbent_measured(state: LoopState, rule: DecisionRule) -> bool:
    """Whether the incumbent has run on every seed the rule needs before anything is judged
    against it (`rule.incumbent_seeds`: the baseline seeds, or none where it pairs anyway)."""
    reference = state.reference(state.incumbent)
    return all(seed in reference for seed in rule.incumbent_seeds(night_history(state)))
