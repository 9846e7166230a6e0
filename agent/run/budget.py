"""Whether a run kept to its budget: stopped at its wall clock, stopped on its own after a step
count (step-budgeted: allowed, and said), or ran past it. From one run's duration and the steps
it reports, judged by its steps against the count the command sets and the incumbent's runs, so
a loaded machine does not make a step count look like a wall clock."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from agent.program import Program
from agent.target.overrides import StepCount, step_count

STEP_BUDGET_FRACTION = 0.75   # a run that ends before this share of its budget stopped on its own


@dataclass(frozen=True)
class BudgetJudgement:
    kind: str                  # "wall_clock" | "step" | "over_budget"
    over_s: float | None       # seconds past the budget, when past it by more than the tolerance
    note: str                  # one sentence for provenance and the check


# The figures under which a run reports how far it trained: optimizer steps, else tokens.
STEP_METRICS = ("steps", "step", "iter", "iters", "iteration", "iterations", "global_step",
                "num_steps", "train_steps", "tokens", "train_tokens", "tokens_seen")
SAME_PACE = 0.15   # durations within this share of each other say nothing about the budget


def reported_steps(metrics: Mapping[str, Any]) -> float | None:
    """How far a run says it trained (its steps, else its tokens), from its metrics."""
    for name in STEP_METRICS:
        value = metrics.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def step_count_of(program: Program) -> StepCount | None:
    """How many steps a run of `program` takes, where its command or target (as in the
    checkout) says so: nanoGPT's --max_iters=2000, a config's max_steps = 500."""
    path = program.root / program.target
    try:
        source = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        source = ""
    return step_count(source, program.target, program.command)


def budget_tolerance_s(budget_s: float, grace_s: float) -> float:
    """How far past its budget a run may end before it is flagged: startup and the final
    evaluation take some seconds (10 s or a quarter of the budget), but never more than half
    the grace, past which the run is killed, so a script that overruns is flagged before it
    is killed."""
    return min(0.5 * grace_s, max(10.0, 0.25 * budget_s))


def judge_budget(duration_s: float | None, budget_s: float, grace_s: float, *,
                 steps: float | None = None, planned_steps: int | None = None,
                 peers: Iterable[tuple[float, float]] = ()) -> BudgetJudgement:
    """Whether a run stopped at its wall-clock budget, on its own after a step count, or ran
    past its budget. Judged by the steps the run reports where they tell: as many as the
    command or target sets (`planned_steps`), or as many as a run of the incumbent took
    (`peers`: (steps, duration)) in a clearly different time, is a step count, however long
    it took on a loaded machine. Otherwise by its wall clock: a run that ends well before
    its budget stopped on its own."""
    duration = duration_s or 0.0
    evidence = _step_evidence(duration, steps, planned_steps, peers)
    # A script that stops at the deadline ends its training a little past it (the last step,
    # the export): the tolerance. One that counts steps never looks at the budget, so any
    # time past it is compute the budget did not bound.
    tolerance = 0.0 if evidence else budget_tolerance_s(budget_s, grace_s)
    if duration > budget_s + tolerance:
        over = round(duration - budget_s, 1)
        why = (f"step-budgeted ({evidence}), so a slower machine or a slower candidate takes longer"
               if evidence else "it does not stop at the budget (step-budgeted, or it ignores "
               "NIGHTSHIFT_BUDGET_S)")
        return BudgetJudgement("over_budget", over, (
            f"ran {duration:.0f} s, past its {budget_s:g} s budget by {over:g} s: {why}"))
    if evidence:
        return BudgetJudgement("step", None, (
            f"step-budgeted: {evidence}, for a {budget_s:g} s budget; it stops after a step count, not at the budget, so a slower machine makes it take "
            f"longer, not train less; allowed, but the budget does not bound its compute"))
    if duration < STEP_BUDGET_FRACTION * budget_s:
        return BudgetJudgement("step", None, (
            f"step-budgeted: finished in {duration:.1f} s of its {budget_s:g} s budget, so it stops "
            f"on its own (a step or epoch count), not at the budget; allowed, but the budget does "
            f"not bound its compute"))
    trained = f" and {steps:g} steps" if steps is not None else ""
    return BudgetJudgement("wall_clock", None, (
        f"wall clock: ran {duration:.1f} s{trained} for a {budget_s:g} s budget, so the number of "
        f"steps depends on the machine's speed"))


def _step_evidence(duration: float, steps: float | None, planned: int | None,
                   peers: Iterable[tuple[float, float]]) -> str:
    """Why a run's steps show a step count ("" when they do not)."""
    if steps is None:
        return ""
    if planned is not None and steps in (planned, planned + 1):   # a last step, or step 0 counted
        return f"{steps:g} steps in {duration:.1f} s, the count its command or target sets"
    for peer_steps, peer_duration in peers:
        if peer_steps == steps and abs(duration - peer_duration) > SAME_PACE * max(duration, peer_duration):
            return f"the same {steps:g} steps in {duration:.0f} s as another run in {peer_duration:.0f} s"
    return ""
