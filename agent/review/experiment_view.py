"""One experiment on a page of its own: what the report and the live page open on a click.

`experiment_view` adds to the report's row of an experiment (agent/review/report.py) what a
person asks next: every seed's value, the candidate's beside the incumbent's on the same seed
(the pairs the keep rule compared) with the improvement on that seed, the runs still in flight,
the looks the rule took, and the decision's own words. Both pages draw it with the same macro
(templates/experiment.html.j2), so the report's view and the live one cannot drift apart.
"""
from __future__ import annotations

import statistics
from typing import Any

from agent.record.events import Role, RunFinished
from agent.record.records import Direction
from agent.record.state import Experiment, LoopState


def experiment_views(state: LoopState, rows: list[dict[str, Any]], direction: Direction) -> dict[str, dict[str, Any]]:
    """id -> view, for every row of the report's experiments table."""
    return {row["id"]: experiment_view(state, state.experiments[row["id"]], row, direction)
            for row in rows if row["id"] in state.experiments}


def experiment_view(state: LoopState, experiment: Experiment, row: dict[str, Any],
                    direction: Direction) -> dict[str, Any]:
    """The row, plus the per-seed pairs, runs in flight, looks and the decision's reason."""
    sign = Direction(direction).sign
    made = experiment.decision
    test = made.decision if made is not None else None
    runs = {run.seed: run for run in experiment.runs}
    # Once decided, the values the rule looked at; before, what has landed so far.
    if test is not None and test.candidate_values:
        candidate, reference = dict(test.candidate_values), dict(test.reference_values)
    else:
        candidate = {seed: run.metric for seed, run in runs.items() if run.ok}
        reference = state.reference(experiment.parent) if experiment.parent else {}
    flying = {run.seed: run for run in state.in_flight.values()
              if run.experiment == experiment.id and run.role == Role.CANDIDATE}
    # a run stopped early is no measurement: shown with where it stopped and what it predicted
    stopped = {stop.seed: stop for stop in state.early_stops.values() if stop.experiment == experiment.id}
    partial = {r.run_id: r for r in state.interrupted if isinstance(r, RunFinished)}
    seeds = []
    for seed in sorted(set(candidate) | set(runs) | set(flying) | set(stopped)):
        mine, theirs = candidate.get(seed), reference.get(seed)
        run, stop = runs.get(seed), stopped.get(seed)
        if run is None and stop is not None and seed not in flying:
            lo, hi = stop.interval
            seeds.append({"seed": seed, "candidate": None, "incumbent": theirs, "improvement": None,
                          "status": f"stopped early at {stop.reached:.0%}",
                          "reason": f"predicted {stop.predicted:+.4g} [{lo:+.4g}, {hi:+.4g}] from its "
                                    f"curve: a discard, not a measurement",
                          "log": getattr(partial.get(stop.run_id), "log", None)})
            continue
        seeds.append({
            "seed": seed, "candidate": mine, "incumbent": theirs,
            "improvement": sign * (mine - theirs) if mine is not None and theirs is not None else None,
            "status": "running" if seed in flying and run is None else
                      run.status.value if run is not None else "ok",
            "reason": run.reason if run is not None and not run.ok else "",
            "log": run.log if run is not None else None,
        })
    unpaired = [value for seed, value in reference.items() if seed not in candidate]
    prediction = experiment.prediction
    return {**row, "seeds": seeds, "in_flight": len(flying), "looks": list(experiment.looks),
            "rule": test.rule if test is not None else None,
            "decision_reason": made.reason if made is not None else experiment.invalid_reason or "",
            "rationale": prediction.rationale if prediction is not None else "",
            "unpaired_reference": {"n": len(unpaired),
                                   "mean": statistics.fmean(unpaired) if unpaired else None}}
