"""The state of a loop: what its events add up to.

`LoopState.apply(event)` folds one event in; `fold(events)` is the same from nothing, for
resume, tests and the morning's views. The ledger keeps a state and applies each event as
it appends it (`agent.record.ledger.Ledger`), so a running loop never re-reads its file.
Everything here is derived from the events alone: two states built from the same events
are equal, however they were built.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

from agent.record.events import (DecisionMade, Event, ExperimentInvalid, ExperimentProposed,
                                 HypothesisQueued, LookTaken, LoopResumed, LoopStarted,
                                 LoopStopped, Prediction, ProposalRebased, RunBegan, RunFinished,
                                 RunQueued, RunStarted, RunStoppedEarly, RunUnpaired, Role, Score,
                                 Usage, Verdict)
from sandbox import Status


@dataclass
class Experiment:
    """One proposal and what became of it."""

    id: str
    commit: str | None                # None for an invalid edit (never committed)
    parent: str                       # the incumbent it was compared with
    description: str
    hypothesis: str
    prediction: Prediction | None
    researcher: str
    hypothesis_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    usage: Usage | None = None        # what the researcher spent proposing it
    runs: list[RunFinished] = field(default_factory=list)   # its candidate runs, in order
    decision: DecisionMade | None = None
    invalid_reason: str | None = None
    diff: str = ""                    # an invalid edit's diff (a commit's diff lives in git)
    looks: list[int] = field(default_factory=list)   # candidate seeds at each look that went on
    looks_recorded: bool = False      # proposed by a harness that records looks
    history_size: int = 0             # decisions recorded before it was proposed: its history
    rebased: ProposalRebased | None = None   # how it was moved onto a newer incumbent, if it was
    stopped_early: RunStoppedEarly | None = None   # a run of it stopped early: it is discarded

    @property
    def decided(self) -> bool:
        return self.decision is not None or self.invalid_reason is not None

    @property
    def verdict(self) -> Verdict | None:
        if self.invalid_reason is not None:
            return Verdict.INVALID
        return self.decision.verdict if self.decision else None

    @property
    def score(self) -> Score | None:
        return self.decision.score if self.decision else None

    def values(self) -> list[float]:
        """The metrics of its successful candidate runs (the runs that selected it)."""
        return [run.metric for run in self.runs if run.ok and run.metric is not None]

    def mean(self) -> float | None:
        values = self.values()
        return statistics.fmean(values) if values else None


@dataclass(frozen=True)
class Repeat:
    """A run of a (commit, seed, role) that already had an OK run: the first value stays the
    run of record (the reference, the evidence, the noise); this one only says how well one
    seed reproduces a run (the baseline runs one seed twice; agent/decide/pairing.py)."""

    commit: str
    seed: int
    role: Role
    first: float
    again: float | None       # None: the repeat did not end OK


@dataclass
class Invocation:
    """One `nightshift run` of the loop: when it started and stopped, with how many workers."""

    started: str                      # ISO times of its loop_started/resumed and loop_stopped
    stopped: str | None = None
    workers: int = 1


@dataclass(frozen=True)
class Calibration:
    """How a researcher's pre-registered predictions held up over a night."""

    n: int = 0
    direction_accuracy: float | None = None
    coverage: float | None = None              # share of intervals that held the measurement
    claimed_confidence: float | None = None    # the mean confidence claimed for them
    mean_abs_error: float | None = None


def calibration(scores: Iterable[Score | None]) -> Calibration:
    """Running calibration: how often intervals covered vs the confidence claimed."""
    scored = [s for s in scores if s is not None]
    if not scored:
        return Calibration()
    n = len(scored)
    return Calibration(
        n=n, direction_accuracy=sum(s.direction_right for s in scored) / n,
        coverage=sum(s.covered for s in scored) / n,
        claimed_confidence=sum(s.confidence for s in scored) / n,
        mean_abs_error=sum(abs(s.error) for s in scored) / n)


@dataclass
class LoopState:
    tag: str | None = None
    base_commit: str | None = None
    incumbent: str | None = None
    started: bool = False
    stopped_reason: str | None = None
    budget_s: float | None = None     # per-run budget of the latest invocation that said
    records_looks: bool = False       # the latest invocation records the keep rule's looks
    experiments: dict[str, Experiment] = field(default_factory=dict)
    runs: list[RunFinished] = field(default_factory=list)    # finished, not interrupted
    in_flight: dict[str, RunStarted] = field(default_factory=dict)   # run_id -> started, not finished
    # run_id -> what the cluster's queue last said of a run in flight (queued, or began on a node)
    dispatched: dict[str, RunQueued | RunBegan] = field(default_factory=dict)
    # runs that ended without a result: interrupted, never finished, or stopped early
    interrupted: list[RunStarted | RunFinished] = field(default_factory=list)
    early_stops: dict[str, RunStoppedEarly] = field(default_factory=dict)   # run_id -> its stop
    unpaired: dict[str, RunUnpaired] = field(default_factory=dict)          # run_id -> why
    hypotheses: dict[str, HypothesisQueued] = field(default_factory=dict)
    decisions: list[DecisionMade] = field(default_factory=list)
    rebases: list[ProposalRebased] = field(default_factory=list)
    invocations: list[Invocation] = field(default_factory=list)
    repeats: list[Repeat] = field(default_factory=list)       # seeds run again, in order
    usage: Usage = field(default_factory=Usage)               # the researcher's, whole night
    # indices, kept as events arrive so that lookups do not scan every run of the night
    _ok: dict[str, dict[Role, dict[int, float]]] = field(default_factory=dict, repr=False)
    _ok_any: dict[str, dict[int, float]] = field(default_factory=dict, repr=False)
    _metrics: dict[str, list[float]] = field(default_factory=dict, repr=False)
    _pending: dict[str, None] = field(default_factory=dict, repr=False)   # ordered set of ids

    # ---- folding ---------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Fold one event into the state."""
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _loop_started(self, event: LoopStarted) -> None:
        self._close_in_flight()   # a night that starts again (no evidence yet) after a kill
        self.started, self.tag = True, event.tag
        self.base_commit = self.incumbent = event.base_commit
        self.budget_s = event.budget_s or event.program.get("budget_s") or self.budget_s
        self.records_looks = event.records_looks
        self.invocations.append(Invocation(event.time, workers=event.workers or 1))

    def _loop_resumed(self, event: LoopResumed) -> None:
        self._close_in_flight()
        self.budget_s = event.budget_s or self.budget_s
        self.records_looks = event.records_looks
        self.invocations.append(Invocation(event.time, workers=event.workers or 1))

    def _loop_stopped(self, event: LoopStopped) -> None:
        self.stopped_reason = event.reason
        if self.invocations and self.invocations[-1].stopped is None:
            self.invocations[-1].stopped = event.time

    def _close_in_flight(self) -> None:
        """A new invocation starts: runs the last one started and never finished died with it."""
        self.interrupted.extend(self.in_flight.values())
        self.in_flight.clear()
        self.dispatched.clear()

    def _hypothesis(self, event: HypothesisQueued) -> None:
        self.hypotheses[event.hypothesis_id] = event

    def _proposed(self, event: ExperimentProposed) -> None:
        self._add(Experiment(
            id=event.id, commit=event.commit, parent=event.parent, description=event.description,
            hypothesis=event.hypothesis, prediction=event.prediction, researcher=event.researcher,
            hypothesis_id=event.hypothesis_id, extra=dict(event.extra), usage=event.usage))

    def _invalid(self, event: ExperimentInvalid) -> None:
        self._add(Experiment(
            id=event.id, commit=event.commit, parent=event.parent, description=event.description,
            hypothesis=event.hypothesis, prediction=event.prediction, researcher=event.researcher,
            hypothesis_id=event.hypothesis_id, extra=dict(event.extra), usage=event.usage,
            invalid_reason=event.reason, diff=event.diff))

    def _add(self, experiment: Experiment) -> None:
        experiment.history_size = len(self.decisions)
        experiment.looks_recorded = self.records_looks
        experiment.rebased = next((r for r in reversed(self.rebases)
                                   if r.id == experiment.id and r.outcome == "rebased"), None)
        self.experiments[experiment.id] = experiment
        if experiment.usage is not None:
            self.usage = self.usage + experiment.usage
        if not experiment.decided:
            self._pending[experiment.id] = None

    def _rebased(self, event: ProposalRebased) -> None:
        self.rebases.append(event)

    def _look(self, event: LookTaken) -> None:
        experiment = self.experiments.get(event.id)
        if experiment is not None:
            experiment.looks.append(event.seeds)

    def _run_started(self, event: RunStarted) -> None:
        self.in_flight[event.run_id] = event

    def _run_dispatched(self, event: RunQueued | RunBegan) -> None:
        if event.run_id in self.in_flight:
            self.dispatched[event.run_id] = event

    def _run_finished(self, event: RunFinished) -> None:
        self.in_flight.pop(event.run_id, None)
        self.dispatched.pop(event.run_id, None)
        # A run stopped early is evidence for discarding its candidate only (docs/decisions.md):
        # never a result, a reference or a noise measurement, even one that ended before the
        # stop could take effect.
        if event.status == Status.INTERRUPTED or event.run_id in self.early_stops:
            self.interrupted.append(event)
            return
        self.runs.append(event)
        if event.role == Role.REFERENCE and event.experiment is not None:
            # A bracket: the incumbent run again for `experiment`, after the candidate's run
            # on a seed it had run (the keep rule's drift guard). Only `timeline` holds it:
            # never a fresh reference (the seed may be one that selected the incumbent), never
            # a repeat of the night's jitter (it is spaced by drift on purpose).
            return
        first = self._ok.get(event.commit, {}).get(event.role, {}).get(event.seed)
        if first is not None:
            self.repeats.append(Repeat(event.commit, event.seed, event.role, first,
                                       event.metric if event.ok else None))
            return
        if event.ok and event.metric is not None:
            self._ok.setdefault(event.commit, {}).setdefault(event.role, {})[event.seed] = event.metric
            self._ok_any.setdefault(event.commit, {})[event.seed] = event.metric
            self._metrics.setdefault(event.commit, []).append(event.metric)
        experiment = self.experiments.get(event.experiment or "")
        # A run that lands after its experiment was decided (it was stopped too late, or it
        # was in flight when another candidate was kept) is a measurement, not evidence: it
        # counts for the noise, never for the experiment it no longer serves.
        if experiment is not None and event.role == Role.CANDIDATE and not experiment.decided:
            experiment.runs.append(event)

    def _stopped_early(self, event: RunStoppedEarly) -> None:
        self.early_stops[event.run_id] = event
        experiment = self.experiments.get(event.experiment)
        if experiment is not None and not experiment.decided and experiment.stopped_early is None:
            experiment.stopped_early = event

    def _unpaired(self, event: RunUnpaired) -> None:
        self.unpaired[event.run_id] = event

    def _decided(self, event: DecisionMade) -> None:
        self.decisions.append(event)
        experiment = self.experiments.get(event.id)
        if experiment is not None:
            experiment.decision = event
        if event.verdict == Verdict.KEEP:
            self.incumbent = event.commit
        self._pending.pop(event.id, None)

    # ---- reading ---------------------------------------------------------------------

    @property
    def has_evidence(self) -> bool:
        """Whether the night started and measured or proposed anything: until then it may
        start again at a newer commit (a baseline that failed, then was fixed and committed).
        Noise runs made before a night started do not make it started."""
        return self.started and (bool(self.experiments) or bool(self._ok_any))

    @property
    def pending(self) -> Experiment | None:
        """The oldest experiment proposed but not decided yet."""
        return self.experiments[next(iter(self._pending))] if self._pending else None

    def pending_experiments(self) -> list[Experiment]:
        """Every experiment proposed but not decided yet, oldest first."""
        return [self.experiments[i] for i in self._pending]

    def history(self, experiment: Experiment) -> tuple:
        """The tests decided before `experiment` was proposed: what the keep rule may use for
        it (its seed plan, its LORD++ level), fixed however long it stays in flight."""
        return tuple(d.decision for d in self.decisions[:experiment.history_size] if d.decision)

    @property
    def next_index(self) -> int:
        return len(self.experiments) + 1

    @property
    def researcher_proposals(self) -> int:
        """How many proposals the researcher was asked for so far: every experiment but the
        re-applied diffs of superseded ones, plus proposals that conflicted with a newer
        incumbent and were asked again."""
        reapplied = sum(1 for e in self.experiments.values() if e.rebased and e.rebased.source)
        conflicts = sum(1 for r in self.rebases if r.outcome == "conflict" and r.source is None)
        return len(self.experiments) - reapplied + conflicts

    def ok_values(self, commit: str, role: Role | None = None) -> dict[int, float]:
        """seed -> metric for the OK runs of a commit (optionally of one role only)."""
        if role is None:
            return dict(self._ok_any.get(commit, {}))
        return dict(self._ok.get(commit, {}).get(Role(role), {}))

    def reference(self, commit: str) -> dict[int, float]:
        """The incumbent's fresh reference runs: never the runs that selected it."""
        return self.ok_values(commit, Role.REFERENCE)

    def reference_order(self, commit: str) -> dict[int, int]:
        """seed -> the place, in the order runs landed, of the commit's first OK reference run
        on that seed (the run `reference` holds): which incumbent runs are close in time."""
        order: dict[int, int] = {}
        for place, run in enumerate(self.runs):
            if run.commit == commit and run.role == Role.REFERENCE and run.ok \
                    and run.metric is not None:
                order.setdefault(run.seed, place)
        return order

    def timeline(self, commit: str, role: Role | None = None) -> dict[int, tuple[tuple[int, float], ...]]:
        """seed -> every OK run of `commit` on it (of `role` only, if given) as (place, metric),
        the place in the order runs landed: which runs of two commits came before or after
        one another (the keep rule brackets a candidate's run between two incumbent runs)."""
        runs: dict[int, list[tuple[int, float]]] = {}
        for place, run in enumerate(self.runs):
            if run.commit == commit and run.ok and run.metric is not None \
                    and (role is None or run.role == role):
                runs.setdefault(run.seed, []).append((place, run.metric))
        return {seed: tuple(values) for seed, values in runs.items()}

    def bracketed(self, incumbent: str, candidate: str, seed: int) -> bool:
        """Whether the incumbent ran `seed` after the candidate's (first OK) run on it."""
        mine = self.timeline(candidate, Role.CANDIDATE).get(seed)
        theirs = self.timeline(incumbent).get(seed, ())
        return bool(mine) and any(place > mine[0][0] for place, _ in theirs)

    def same_seed_runs(self) -> dict[str, dict[int, float]]:
        """commit -> seed -> metric for every commit with OK runs on two or more seeds (the
        first run of each seed): what the night's pooled same-seed spread is fitted on."""
        return {commit: dict(values) for commit, values in self._ok_any.items() if len(values) >= 2}

    def repeat_pairs(self) -> tuple[tuple[float, float], ...]:
        """(first, again) of every OK repeat of a (commit, seed): the run-to-run jitter."""
        return tuple((r.first, r.again) for r in self.repeats if r.again is not None)

    def noise_groups(self) -> list[list[float]]:
        """Per-commit lists of OK metrics, for the pooled seed-to-seed spread."""
        return [list(values) for values in self._metrics.values()]

    def open_hypotheses(self) -> list[tuple[str, str]]:
        tested = {e.hypothesis_id for e in self.experiments.values() if e.hypothesis_id}
        return [(hid, h.text) for hid, h in self.hypotheses.items() if hid not in tested]

    def kept(self) -> list[Experiment]:
        return [e for e in self.experiments.values() if e.verdict == Verdict.KEEP]

    def verdict_counts(self) -> dict[str, int]:
        """How many experiments ended each way ("running" for the undecided), sorted by name."""
        counts: dict[str, int] = {}
        for experiment in self.experiments.values():
            key = experiment.verdict.value if experiment.verdict else "running"
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    def calibration(self) -> Calibration:
        return calibration(e.score for e in self.experiments.values())


_HANDLERS = {
    LoopStarted: LoopState._loop_started, LoopResumed: LoopState._loop_resumed,
    LoopStopped: LoopState._loop_stopped, HypothesisQueued: LoopState._hypothesis,
    ExperimentProposed: LoopState._proposed, ExperimentInvalid: LoopState._invalid,
    RunStarted: LoopState._run_started, RunFinished: LoopState._run_finished,
    RunQueued: LoopState._run_dispatched, RunBegan: LoopState._run_dispatched,
    DecisionMade: LoopState._decided, LookTaken: LoopState._look,
    ProposalRebased: LoopState._rebased, RunStoppedEarly: LoopState._stopped_early,
    RunUnpaired: LoopState._unpaired,
}


def fold(events: Iterable[Event]) -> LoopState:
    """The state of a loop from its events, in order."""
    state = LoopState()
    for event in events:
        state.apply(event)
    return state
