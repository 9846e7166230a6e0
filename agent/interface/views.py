"""A night as documents: `status_view` (the whole night at a glance) and `experiment_view`
(one experiment in full), plain dicts of JSON types for `--json`.

Every document names its schema and version in its first field, `"schema":
"nightshift.status/1"` or `"nightshift.experiment/1"` (`SCHEMA_VERSION`), and follows the
JSON Schema of that name shipped beside this module (schemas/, documented in docs/json.md).
Within one version a field is never removed, renamed or given another type; a new field may
appear. A change that breaks that is a new version.

The views are pure: they read a `Night` (the folded ledger, the program, the tag's lock as
`read_night` found it) and, for a diff, a function that asks git. Numbers are the ones the
rest of Nightshift shows: the keep rule's decision as recorded, the incumbent at its fresh
seeds (never the runs that selected it), the noise pooled as `status` pools it.
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Iterable

from agent.decide.decision import pooled_sd
from agent.interface.jsonable import numbers, plain
from agent.record.codec import encode
from agent.interface.runs import in_flight_view, run_view, seed_values
from agent.preflight.lock import Holder
from agent.program import Program
from agent.record.events import Decision, Role, RunFinished, RunStarted, Verdict
from agent.record.state import Experiment, LoopState
from agent.review.efficiency import night_efficiency, recorded_calibration
from agent.review.experiment_view import experiment_view as seed_pairs_view
from agent.review.report import _flagged as flagged_rows   # the report's Flagged candidates panel

SCHEMA_VERSION = 1
STATUS_SCHEMA = f"nightshift.status/{SCHEMA_VERSION}"
EXPERIMENT_SCHEMA = f"nightshift.experiment/{SCHEMA_VERSION}"
PENDING = "pending"          # the verdict word of an experiment not decided yet
INCUMBENT = "incumbent"      # `show incumbent`: the kept experiment the night stands on, or the base
BASE = "base"                # `show base`: the commit the night started from
IDS_NAMED = 20               # an unknown id's error names this many known ones at most

# (parent, commit) -> the patch between them, or None when the repository cannot say
DiffOf = Callable[[str, str], str | None]


@dataclass(frozen=True)
class Night:
    """What the views read: one tag's folded ledger, the program (its metric and direction),
    and the live process that holds the tag's lock (None: no loop runs on it now)."""

    tag: str
    folder: Path              # results/<tag>/: the runs' logs are relative to it
    state: LoopState
    program: Program
    holder: Holder | None = None


class UnknownExperiment(LookupError):
    """`show` was asked for an id the ledger does not hold; the message names the ones it does."""

    def __init__(self, asked: str, known: list[str]) -> None:
        shown = known if len(known) <= IDS_NAMED else [*known[:5], "...", *known[-5:]]
        super().__init__(f"no experiment {asked!r} in this tag; it holds "
                         f"{len(known)} experiment{'' if len(known) == 1 else 's'}"
                         f"{': ' + ', '.join(shown) if known else ''} (and `{INCUMBENT}`, `{BASE}`)")
        self.asked, self.known = asked, known


# ---- the night ----------------------------------------------------------------------------

def status_view(night: Night) -> dict[str, Any]:
    """The night at a glance: where it stands (base, incumbent, noise), every experiment as
    a short row, what is pending or in flight, what was flagged or kept, and whether a loop
    runs on the tag now."""
    state = night.state
    sd, dof = pooled_sd(state.noise_groups())
    rows = [_row(state, experiment) for experiment in state.experiments.values()]
    return {
        **_header(night, STATUS_SCHEMA),
        "base_commit": state.base_commit,
        "budget_s": plain(state.budget_s),
        "baseline": _level(state, state.base_commit),
        "incumbent": _level(state, state.incumbent),
        "noise": {"sd": plain(sd), "dof": dof},
        "counts": dict(sorted(Counter(row["verdict"] for row in rows).items())),
        "experiments": rows,
        "pending": [experiment.id for experiment in state.pending_experiments()],
        "in_flight": [in_flight_view(run, state.dispatched.get(run.run_id))
                      for run in state.in_flight.values()],
        "flagged": [{**row, "evidence": numbers(row["evidence"])}
                    for row in flagged_rows(state, night.program.metric)],
        "kept": [_kept(state, experiment) for experiment in state.kept()],
        "running": night.holder is not None,
        "lock": _holder(night.holder),
        "stopped_reason": state.stopped_reason,
        "hypotheses": [{"id": hid, "text": text, "origin": state.hypotheses[hid].origin}
                       for hid, text in state.open_hypotheses()],
        "efficiency": _efficiency(night),
    }


EFFICIENCY_FIELDS = ("runs", "run_s", "improvement", "interval", "kept", "per_run", "per_hour",
                     "per_run_second", "line", "shares_line", "time_line", "single_run")


def _efficiency(night: Night) -> dict[str, Any]:
    """The figure `status` prints (agent/review/efficiency.py): every run in one share, by
    count and by run time, the progress per run, and the single-run rule's cost."""
    figure = night_efficiency(night.state, night.program.direction,
                              recorded_calibration(night.folder)).to_dict()
    return plain({**{key: figure[key] for key in EFFICIENCY_FIELDS}, "shares": figure["rows"]})


def _header(night: Night, schema: str) -> dict[str, Any]:
    return {"schema": schema, "tag": night.tag, "metric": night.program.metric,
            "direction": night.program.direction.value}


def _row(state: LoopState, experiment: Experiment) -> dict[str, Any]:
    decided = experiment.decision
    return plain({
        "id": experiment.id, "commit": experiment.commit, "parent": experiment.parent,
        "description": experiment.description, "researcher": experiment.researcher,
        "verdict": _verdict(experiment), "mean": experiment.mean(), "n_seeds": len(experiment.values()),
        "delta": _delta(state, experiment), "effect": decided.effect if decided else None,
    })


def _verdict(experiment: Experiment) -> str:
    return experiment.verdict.value if experiment.verdict is not None else PENDING


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.fmean(values) if values else None


def _delta(state: LoopState, experiment: Experiment) -> float | None:
    """The candidate's mean minus its parent's fresh-seed mean, in metric units (the sign of
    a prediction's expected_delta), None until both are measured."""
    mine = experiment.mean()
    theirs = _mean(state.reference(experiment.parent).values()) if experiment.parent else None
    return None if mine is None or theirs is None else mine - theirs


def _level(state: LoopState, commit: str | None) -> dict[str, Any] | None:
    """A commit at its fresh seeds (its reference runs, which did not select it) and, when a
    keep made it, the experiment and the mean of the runs that selected it (biased by that)."""
    if not commit:
        return None
    values = state.reference(commit)
    kept = next((e for e in state.kept() if e.commit == commit), None)
    return plain({
        "commit": commit, "experiment": kept.id if kept else None,
        "mean": _mean(values.values()),
        "sd": statistics.stdev(values.values()) if len(values) > 1 else None,
        "values": seed_values(values),
        "selection_mean": kept.mean() if kept else None,
    })


def _kept(state: LoopState, experiment: Experiment) -> dict[str, Any]:
    decided = experiment.decision
    return plain({
        "id": experiment.id, "commit": experiment.commit, "parent": experiment.parent,
        "description": experiment.description, "effect": decided.effect if decided else None,
        "interval": decided.interval if decided else None,
        "p_value": decided.p_value if decided else None,
        "fresh_mean": _mean(state.reference(experiment.commit or "").values()),
        "selection_mean": experiment.mean(),
    })


def _holder(holder: Holder | None) -> dict[str, Any] | None:
    if holder is None:
        return None
    return {"pid": holder.pid, "host": holder.host, "since": holder.since, "command": holder.command}


# ---- one experiment -------------------------------------------------------------------------

def experiment_view(night: Night, experiment_id: str, diff_of: DiffOf) -> dict[str, Any]:
    """Everything about one experiment: what was proposed and predicted, the verdict with the
    keep rule's numbers, the diff, and every run with its curve and dynamics beside its
    parent's runs on the same seeds. `experiment_id` is an id of the ledger, `incumbent` (the
    kept experiment the night stands on, or the base while nothing was kept) or `base`.
    Raises UnknownExperiment for any other."""
    state = night.state
    wanted = experiment_id.strip()
    if wanted in (INCUMBENT, BASE) and state.base_commit:
        kept = next((e for e in reversed(state.kept()) if e.commit == state.incumbent), None)
        if wanted == INCUMBENT and kept is not None:
            return _experiment_document(night, kept, "experiment", diff_of)
        return _experiment_document(night, _base(state.base_commit), "base", diff_of)
    if wanted not in state.experiments:
        raise UnknownExperiment(wanted, list(state.experiments))
    return _experiment_document(night, state.experiments[wanted], "experiment", diff_of)


def _base(commit: str) -> Experiment:
    """The base as an experiment without a proposal or a candidate run: what measured it
    are its fresh-seed runs, which the document lists as `reference_runs`."""
    return Experiment(id=BASE, commit=commit, parent="", description="the base commit: where the night started",
                      hypothesis="", prediction=None, researcher="")


def _experiment_document(night: Night, experiment: Experiment, kind: str, diff_of: DiffOf) -> dict[str, Any]:
    """The `nightshift.experiment/1` document of `experiment` (`kind` "experiment" or "base")."""
    state = night.state
    made = experiment.decision
    test = made.decision if made is not None else None
    runs = _candidate_runs(night, experiment)
    seeds = {run["seed"] for run in runs}
    parent = experiment.parent or None
    return {
        **_header(night, EXPERIMENT_SCHEMA),
        "kind": kind,
        **plain({
            "id": experiment.id, "commit": experiment.commit, "parent": parent,
            "description": experiment.description, "hypothesis": experiment.hypothesis,
            "hypothesis_id": experiment.hypothesis_id, "researcher": experiment.researcher or None,
            "prediction": _prediction(experiment),
            "verdict": None if kind == "base" else _verdict(experiment),
            "reason": experiment.invalid_reason or (made.reason if made is not None else ""),
            "invalid_reason": experiment.invalid_reason,
            "decision": _decision(test),
            "evidence": numbers(made.evidence) if made is not None else {},
            "compute": encode(made.compute) if made is not None and made.compute else None,
            "score": _score(experiment),
            "stopped_early": _stop(experiment),
            "rebased": _rebase(experiment),
            "looks": experiment.looks,
            "mean": experiment.mean(),
            "fresh_mean": _mean(state.reference(experiment.commit).values()) if experiment.commit else None,
            "delta": _delta(state, experiment),
            "pairs": _pairs(night, experiment) if kind == "experiment" else [],
        }),
        "extra": numbers(experiment.extra),
        "diff": _diff(experiment, diff_of),
        "runs": runs,
        "in_flight": [in_flight_view(run, state.dispatched.get(run.run_id))
                      for run in state.in_flight.values() if _made_for(run, experiment, kind)],
        "reference_runs": _commit_runs(night, experiment.commit, None, role=Role.REFERENCE),
        "parent_runs": _commit_runs(night, parent, seeds) if parent else [],
    }


def _made_for(run: RunStarted, experiment: Experiment, kind: str) -> bool:
    if kind == "base":
        return run.commit == experiment.commit and run.role == Role.REFERENCE and run.experiment is None
    return run.experiment == experiment.id and run.role == Role.CANDIDATE


def _finished(state: LoopState) -> Iterable[RunFinished]:
    """Every finished run of the night, those that ended without a result too, in time order."""
    ended = (run for run in state.interrupted if isinstance(run, RunFinished))
    return sorted(chain(state.runs, ended), key=lambda run: run.time)


def _candidate_runs(night: Night, experiment: Experiment) -> list[dict[str, Any]]:
    """The runs made for `experiment`: its candidate runs, counted or not (one that landed
    after the decision, or was stopped early, is listed and not counted)."""
    counted = {run.run_id for run in experiment.runs}
    return [run_view(run, night.folder, counted=run.run_id in counted,
                     stopped_early=run.run_id in night.state.early_stops)
            for run in _finished(night.state)
            if run.experiment == experiment.id and run.role == Role.CANDIDATE]


def _commit_runs(night: Night, commit: str | None, seeds: set[int] | None,
                 role: Role | None = None) -> list[dict[str, Any]]:
    """The runs of `commit` (on `seeds`, of `role`, when given). `counted` marks the run of
    record of each seed: the first OK reference run, the value `reference` holds."""
    if not commit:
        return []
    state = night.state
    of_record = state.reference(commit)
    shown, seen = [], set()
    for run in _finished(state):
        if run.commit != commit or (seeds is not None and run.seed not in seeds) \
                or (role is not None and run.role != role):
            continue
        first = (run.role == Role.REFERENCE and run.experiment is None and run.ok
                 and run.seed not in seen and of_record.get(run.seed) == run.metric)
        if first:
            seen.add(run.seed)
        shown.append(run_view(run, night.folder, counted=first,
                              stopped_early=run.run_id in state.early_stops))
    return shown


def _prediction(experiment: Experiment) -> dict[str, Any] | None:
    p = experiment.prediction
    if p is None:
        return None
    return {"direction": p.direction, "expected_delta": p.expected_delta, "interval": p.interval,
            "confidence": p.confidence, "rationale": p.rationale}


def _decision(test: Decision | None) -> dict[str, Any] | None:
    """The keep rule's test as recorded (None: a run failed first, or a check flagged it)."""
    if test is None:
        return None
    c = test.comparison
    return {
        "rule": test.rule, "effect": test.effect, "interval": test.interval, "p_value": test.p_value,
        "seeds": test.seeds, "candidate_values": seed_values(test.candidate_values),
        "reference_values": seed_values(test.reference_values), "reason": test.reason,
        "comparison": None if c is None else {
            "paired": c.paired, "paired_seeds": c.paired_seeds, "paired_effect": c.paired_effect,
            "incumbent_runs": c.incumbent_runs, "seed_share": c.seed_share},
        "details": numbers(test.details),
    }


def _score(experiment: Experiment) -> dict[str, Any] | None:
    s = experiment.score
    if s is None:
        return None
    return {"measured_delta": s.measured_delta, "measured_direction": s.measured_direction,
            "direction_right": s.direction_right, "covered": s.covered, "error": s.error,
            "confidence": s.confidence}


def _stop(experiment: Experiment) -> dict[str, Any] | None:
    stop = experiment.stopped_early
    if stop is None:
        return None
    return {"run_id": stop.run_id, "seed": stop.seed, "checkpoint": stop.checkpoint,
            "reached": stop.reached, "predicted": stop.predicted, "interval": stop.interval,
            "bound": stop.bound, "partner": stop.partner, "saved_s": stop.saved_s,
            "reason": stop.reason}


def _rebase(experiment: Experiment) -> dict[str, Any] | None:
    moved = experiment.rebased
    if moved is None:
        return None
    return {"proposed_on": moved.proposed_on, "onto": moved.onto, "source": moved.source}


def _pairs(night: Night, experiment: Experiment) -> list[dict[str, Any]]:
    """Seed by seed, the candidate beside its incumbent (the report's experiment view)."""
    seeds = seed_pairs_view(night.state, experiment, {}, night.program.direction)["seeds"]
    return [{key: pair.get(key) for key in ("seed", "candidate", "incumbent", "improvement", "status")}
            for pair in seeds]


def _diff(experiment: Experiment, diff_of: DiffOf) -> str | None:
    """An invalid edit's recorded diff; a commit's patch against its parent from git."""
    if experiment.invalid_reason is not None or not experiment.commit:
        return experiment.diff
    if not experiment.parent:
        return ""      # the base: nothing before it in this night
    return diff_of(experiment.parent, experiment.commit)
