"""The research loop: propose → gate → commit → run → decide → keep or revert → record,
with every worker busy.

A scheduler on the main thread keeps up to one run per worker in flight (`cluster.Workers`)
and fills a free worker with the most useful next run: first the seeds the keep rule asked
for on pending candidates (a whole batch at once, paired incumbent runs beside them), then
the incumbent's fresh reference seeds, then the screen of a new candidate. The researcher
prepares the next proposal in a thread of its own while runs train (`overlap`). The rule is
consulted when a candidate's batch has landed, never per seed, and the looks it took are
recorded, so its error spending stays valid for them.

Several candidates may be in flight against the same incumbent. When one is kept, the others
were measured against an incumbent that is gone: each is recorded `superseded` (never kept on
that evidence), and its diff is re-applied onto the new incumbent as a new candidate when it
merges cleanly. A proposal made while the incumbent changed is rebased the same way, or asked
again when it conflicts; the ledger records which (`proposal_rebased`).

Everything the loop knows lives in the ledger (`self.ledger.state`, kept as events are
appended). A loop killed at any point resumes where it stopped: pending candidates continue
with the seeds they still need, git is brought in line with the ledger first (reconcile).

Beside it in agent/night/: priority.py (which run a free worker gets), admission.py (what
becomes of a ready proposal), context.py (what the researcher is shown), proposals.py (the
researchers' threads and arms), observer.py (what a display is told).
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from agent.decide.decision import DecisionRule, Evidence, RunMore, pooled_sd
from agent.decide.integrity import Flag, judge_experiment
from agent.decide.scoring import score_prediction
from agent.night.admission import Fate, admit, commit_message, proposal_diff
from agent.night.checks import baseline_verdict, judge_budget
from agent.night.context import evaluation_plan, research_context
from agent.night.early_stops import EarlyStopping, stop_decision, stopped_reason
from agent.night.failures import describe_error
from agent.night.live import LiveCurves
from agent.night.observer import Observer, QuietObserver
from agent.night.priority import RunRequest, runs_wanted
from agent.night.proposals import Arm, Ready, Researchers
from agent.night.reconcile import reconcile
from agent.night.runs import RunExecutor
from agent.program import Program
from agent.record.events import (Decision, DecisionMade, ExitCode, ExperimentInvalid,
                                 ExperimentProposed, LookTaken, LoopResumed, LoopStarted,
                                 LoopStopped, Prediction, ProposalAsked, ProposalReady,
                                 ProposalRebased, Role, RunBegan, RunFinished, RunQueued,
                                 RunStoppedEarly, Usage, Verdict)
from agent.record.ledger import Ledger
from agent.record.curves import Curve
from agent.record.state import Experiment, LoopState
from agent.record.views import write_tsv
from agent.researchers import Outcome, Proposal, ResearchContext, Researcher, ResearcherError
from agent.workspace.merge import three_way_merge
from agent.workspace.repo import Workspace, WorkspaceError
from cluster.protocol import (Dispatched, Job, OnDispatched, OnDone, Outcome as RunOutcome, Slot,
                              Workers)
from sandbox import Status

MAX_REFERENCE_RETRIES = 2
MAX_ASKS = 3           # a proposal that keeps conflicting with a moving incumbent is given up
WAIT_S = 0.5           # longest sleep between looks at the workers and the researcher
ABORT_WAIT_S = 30.0    # how long a stopping loop waits for cancelled runs to report
VIEWS_EVERY_S = 5.0    # results.tsv is rewritten at most this often during a night


class LoopError(RuntimeError):
    """The loop cannot go on (the baseline fails, the workspace is broken). Says why."""


@dataclass
class StopRules:
    max_experiments: int | None = None   # experiments decided by this invocation
    hours: float | None = None           # wall clock of this invocation
    started: float = field(default_factory=time.monotonic)

    def time_is_up(self) -> bool:
        return self.hours is not None and time.monotonic() - self.started >= self.hours * 3600

    def deadline(self) -> float | None:
        """When --hours runs out, as epoch seconds (what a researcher's retries must respect)."""
        if self.hours is None:
            return None
        return time.time() + self.hours * 3600 - (time.monotonic() - self.started)

    def reached(self, decided_here: int) -> str | None:
        if self.max_experiments is not None and decided_here >= self.max_experiments:
            return f"reached --max-experiments {self.max_experiments}"
        if self.time_is_up():
            return f"reached --hours {self.hours:g}"
        return None


@dataclass
class ResearchLoop:
    tag: str
    program: Program
    workspace: Workspace
    ledger: Ledger
    executor: RunExecutor
    researcher: Researcher
    rule: DecisionRule
    # called once: where this night's runs execute (outcomes to the first callback, a queue's
    # news of a run, Slurm's, to the second)
    make_workers: Callable[[OnDone, OnDispatched], Workers]
    observer: Observer = field(default_factory=QuietObserver)
    facts: dict[str, Any] = field(default_factory=dict)   # recorded with loop_started/resumed
    overlap: bool = True          # the researcher prepares proposals while runs train
    control: Researcher | None = None   # the LLM-free control arm, proposing a `control_share`
    control_share: float = 0.0

    def __post_init__(self) -> None:
        self._events: queue.Queue = queue.Queue()
        self._wake = threading.Event()          # set whenever an event is queued
        self.workers = self.make_workers(lambda outcome: self._queue("run", outcome),
                                         lambda news: self._queue("dispatch", news))
        # the curves of the runs in flight, as they print them; a checkpoint passed wakes the loop
        self.live = LiveCurves(self.program.metrics_pattern, self.program.early_stop.checkpoints,
                               self._wake.set)
        self.early = EarlyStopping(self.program.early_stop, self.rule, self.program.direction)

    @property
    def state(self) -> LoopState:
        """The fold of every event so far, kept by the ledger as it appends."""
        return self.ledger.state

    # ---- the night ---------------------------------------------------------------------

    def run(self, stop: StopRules) -> str:
        """Run until a stop rule holds. Returns the reason it stopped. Ctrl-C propagates
        after every run in flight was stopped and recorded and the ledger is closed."""
        self._stop_rules = stop
        self._running: dict[str, tuple[Job, RunRequest, Slot]] = {}
        self._asked: dict[str, RunMore] = {}
        self._ready: list[Ready] = []
        self._failures: dict[tuple[str, int], int] = {}
        self._unused: set[str] = set()          # snapshots to drop once their runs are done
        self._researcher_error: ResearcherError | None = None
        self._decided_here = 0
        self._views_written = -VIEWS_EVERY_S    # the first decision writes results.tsv at once
        self._views_stale = False               # a decision since the last rewrite
        self._baseline_checked = False          # the first baseline's verdict was given
        arms = [(self.researcher, 1.0 - self.control_share)]
        if self.control is not None and self.control_share > 0:
            arms.append((self.control, self.control_share))
        self.proposals = Researchers(arms, lambda ready: self._queue("proposal", ready))
        try:
            self._start()
            reason = self._night(stop)
        except KeyboardInterrupt:
            self._abort_recording()
            self._reconcile_quietly()   # Ctrl-C between a decision and its git move
            self._stop("interrupted", ExitCode.INTERRUPTED)
            raise
        except ResearcherError as error:
            self._stop(f"ResearcherError: {error}", ExitCode.RESEARCHER)
            raise
        except (LoopError, WorkspaceError, OSError) as error:
            # One clear message, a loop_stopped while the ledger can still be written, exit 4:
            # a full disk or a broken git is the night's end, never a traceback.
            text = str(error) if isinstance(error, LoopError) else describe_error(error)
            unrecorded = [note for note in (self._abort_recording(), self._stop(text, ExitCode.LOOP))
                          if note]
            raise LoopError(text + "".join(f"; {note}" for note in unrecorded)
                            + f"; when it is fixed, `nightshift run --tag {self.tag}` resumes") from error
        finally:
            self.proposals.stop()
            self.workers.close()
        unrecorded = self._stop(reason, ExitCode.OK)
        if unrecorded:
            raise LoopError(f"the night stopped ({reason}), but {unrecorded}")
        return reason

    def _night(self, stop: StopRules) -> str:
        while True:
            self._handle_events()
            self._check_curves()
            self._advance()
            reason = stop.reached(self._decided_here)
            if self._researcher_error and not self.state.pending_experiments() and not self._ready:
                reason = reason or "researcher"
            if reason:
                # Honest numbers: a new incumbent is measured on its fresh seeds before the
                # night ends (not for Ctrl-C); nothing else new starts.
                self._fill(reference_only=True)
                if not self._running:
                    if reason == "researcher":
                        raise self._researcher_error
                    return reason
            else:
                self._fill(reference_only=stop.time_is_up())
                if not stop.time_is_up():
                    self._ask_researcher(stop)
            if self._views_stale:
                self._write_views()
            self._wait()

    def _start(self) -> None:
        described = self.workers.describe()
        facts = {**self.facts, "records_looks": True, **described, "cluster_facts": described,
                 "overlap": self.overlap}
        if not self.state.has_evidence:   # new, or nothing measured yet: (re)starts at the head
            self.ledger.append(LoopStarted(tag=self.tag, base_commit=self.workspace.head(),
                                           program=self.program.to_dict(), **_known(LoopStarted, facts)))
            self.observer.message(f"started tag {self.tag} at {self.workspace.head()[:8]}")
        else:
            self.ledger.append(LoopResumed(tag=self.tag, **_known(LoopResumed, facts)))
            pending = len(self.state.pending_experiments())
            self.observer.message(f"resuming tag {self.tag}: {len(self.state.experiments)} "
                                  f"experiments so far ({pending} pending), incumbent "
                                  f"{self.state.incumbent[:8]}")
        for note in reconcile(self.workspace, self.state):
            self.observer.message(note)
        for note in self.workers.notes:
            self.observer.message(note)

    def _stop(self, reason: str, code: ExitCode) -> str | None:
        """Record loop_stopped and rewrite the views; what could not be written, or None."""
        try:
            self.ledger.append(LoopStopped(reason=reason, exit_code=code))
        except OSError as error:
            return f"loop_stopped could not be recorded: {describe_error(error)}"
        try:
            self._write_views(now=True)
        except OSError as error:
            return f"results.tsv could not be written: {describe_error(error)}"
        return None

    def _reconcile_quietly(self) -> None:
        """Git in line with the ledger now rather than at the next start (never raises: the
        next start reconciles again)."""
        try:
            reconcile(self.workspace, self.state)
        except (OSError, WorkspaceError):
            pass

    def _abort_recording(self) -> str | None:
        """`_abort`, when the disk or git may be what failed: what could not be recorded."""
        try:
            self._abort()
        except (OSError, WorkspaceError) as error:
            return f"the runs in flight could not all be recorded: {describe_error(error)}"
        return None

    def _queue(self, kind: str, item: Any) -> None:
        """Hand an event over from a worker's or the researcher's thread."""
        self._events.put((kind, item))
        self._wake.set()

    def _wait(self) -> None:
        """Sleep until something is queued (at most WAIT_S)."""
        self._wake.wait(WAIT_S)

    def _abort(self) -> None:
        """Stop every run in flight and record how each ended (interrupted). A run the ledger
        shows started whose outcome never came (Ctrl-C struck while it was being launched or
        recorded) is closed as interrupted too: no ghost stays "in flight"."""
        self.workers.cancel_all()
        deadline = time.monotonic() + ABORT_WAIT_S
        while (self.workers.running() or not self._events.empty()) and time.monotonic() < deadline:
            try:
                kind, item = self._events.get(timeout=0.5)
            except queue.Empty:
                continue
            if kind == "run":
                self._finished(item, deciding=False)
            elif kind == "dispatch":
                self._dispatched(item)
        for started in list(self.state.in_flight.values()):
            self.ledger.append(RunFinished(
                run_id=started.run_id, commit=started.commit, seed=started.seed, role=started.role,
                experiment=started.experiment, worker=started.worker, device=started.device,
                status=Status.INTERRUPTED, reason="the harness stopped before this run was recorded"))

    # ---- events from the workers and the researcher --------------------------------------

    def _handle_events(self) -> None:
        self._wake.clear()       # before draining: an event queued from now on wakes _wait
        while True:
            try:
                kind, item = self._events.get_nowait()
            except queue.Empty:
                return
            if kind == "run":
                self._finished(item)
                continue
            if kind == "dispatch":
                self._dispatched(item)
                continue
            self.proposals.received(item)
            self._record_ready(item)
            if item.error is not None:
                self._researcher_error = self._researcher_error or item.error
            else:
                self._ready.append(item)

    def _dispatched(self, news: Dispatched) -> None:
        """A queue's news of a run in flight: queued as a job, or began on a node."""
        if news.run_id not in self._running:
            return   # it was reported already
        if news.node is None:
            self.ledger.append(RunQueued(run_id=news.run_id, job_id=news.job_id))
        else:
            self.live.began(news.run_id)
            self.ledger.append(RunBegan(run_id=news.run_id, job_id=news.job_id, node=news.node,
                                        queued_s=news.queued_s))
        self.observer.dispatched(news)

    def _finished(self, outcome: RunOutcome, deciding: bool = True) -> None:
        if outcome.run_id not in self._running:
            return   # reported twice (a backend's retry): the first report stands
        job, request, _ = self._running.pop(outcome.run_id)
        stop = self.state.early_stops.get(outcome.run_id)
        run = self.executor.finish(job, outcome, curve=self.live.finish(outcome.run_id),
                                   stopped=stopped_reason(stop) if stop else None)
        unpaired = self.early.finished(run) if run.status != Status.INTERRUPTED else None
        if unpaired is not None:
            self.ledger.append(unpaired)
        self.observer.run_finished(run)
        self._drop_unused_snapshots()
        if not deciding or run.status.value == "interrupted":
            return
        if run.role == Role.CANDIDATE and not run.ok:
            experiment = self.state.experiments.get(run.experiment or "")
            if experiment is not None and not experiment.decided and experiment.stopped_early is None:
                self._decide(experiment, Verdict.of_run(run.status), None,
                             f"{run.status.value} on seed {run.seed}: {run.reason}")
        elif run.role == Role.REFERENCE and not run.ok:
            key = (run.commit, run.seed)
            self._failures[key] = self._failures.get(key, 0) + 1
            if self._failures[key] >= MAX_REFERENCE_RETRIES:
                raise LoopError(
                    f"the incumbent {run.commit[:8]} failed on seed {run.seed} "
                    f"({run.status.value}: {run.reason}); the baseline must run before "
                    f"anything can be compared with it. Log: results/{self.tag}/{run.log}")

    # ---- deciding ----------------------------------------------------------------------

    def _advance(self) -> None:
        """Ask the rule about every pending candidate whose batch has landed."""
        if not self._incumbent_measured():
            return
        self._check_baseline()
        for experiment in self.state.pending_experiments():
            if experiment.decided:
                continue
            flag = self._integrity(experiment)
            if flag is not None:   # bent how it is measured: never kept, whatever the numbers
                self._decide(experiment, flag.verdict, None, flag.reason, flag.evidence)
                continue
            stop = experiment.stopped_early
            if stop is not None:   # a run of it was stopped early: a discard once its runs ended
                if not any(r.experiment == experiment.id for _, r, _ in self._running.values()):
                    self._decide(experiment, Verdict.DISCARD, stop_decision(
                        experiment, stop, self.state.reference(experiment.parent)), stop.reason)
                continue
            if self._waiting(experiment):
                continue
            step = self.rule.next(self._evidence(experiment))
            if isinstance(step, Decision):
                self._decide(experiment, step.verdict, step, step.reason)
                if step.verdict == Verdict.KEEP:
                    return   # the others were superseded; the new incumbent is measured first
                continue
            if step.look is not None and step.look not in experiment.looks:
                self.ledger.append(LookTaken(id=experiment.id, seeds=step.look, reason=step.reason))
            self._asked[experiment.id] = step

    def _integrity(self, experiment: Experiment) -> Flag | None:
        """What no single run shows, across the candidate's runs and the incumbent's
        (agent.decide.integrity.judge_experiment)."""
        state = self.state
        reference = [r for r in state.runs if r.commit == experiment.parent and r.role == Role.REFERENCE]
        base = [r for r in state.runs if r.commit == state.base_commit and r.role == Role.REFERENCE and r.ok]
        budget = state.budget_s or self.program.budget_s
        wall_clock = any(judge_budget(r.duration_s, budget, self.program.grace_s).kind == "wall_clock"
                         for r in base)
        return judge_experiment(experiment.runs, reference, budget_s=budget, wall_clock=wall_clock,
                                metric=self.program.metric)

    def _check_baseline(self) -> None:
        """Once, before the first candidate: print the verdict on the first baseline's runs,
        and stop when the seed changes nothing (agent.night.checks)."""
        if self._baseline_checked or self.state.experiments:
            return
        self._baseline_checked = True
        verdict = baseline_verdict(self.state, self.program, self.ledger.dir)
        for line in verdict.lines():
            self.observer.message(line)
        if verdict.stop:
            raise LoopError(verdict.stop)

    def _incumbent_measured(self) -> bool:
        reference = self.state.reference(self.state.incumbent)
        return all(seed in reference for seed in self.rule.baseline_seeds())

    def _waiting(self, experiment: Experiment) -> bool:
        """Whether seeds the rule asked for on `experiment` are still to land."""
        asked = self._asked.get(experiment.id)
        if asked is None:
            return False
        candidate = self.state.ok_values(experiment.commit, Role.CANDIDATE)
        reference = self.state.reference(experiment.parent)
        return (any(seed not in candidate for seed in asked.candidate_seeds)
                or any(seed not in reference for seed in asked.reference_seeds))

    def _evidence_with(self, experiment: Experiment, candidate: dict[int, float]) -> Evidence:
        """The evidence the rule would see if the candidate's values were `candidate`."""
        return dataclasses.replace(self._evidence(experiment), candidate=candidate)

    def _evidence(self, experiment: Experiment) -> Evidence:
        state = self.state
        sd, dof = pooled_sd(state.noise_groups())
        pending = max(1, len(state.pending_experiments()))
        return Evidence(
            direction=self.program.direction,
            candidate=state.ok_values(experiment.commit, Role.CANDIDATE),
            reference=state.reference(experiment.parent),
            noise_sd=sd, noise_dof=dof, history=state.history(experiment),
            runs=state.same_seed_runs(), repeats=state.repeat_pairs(),
            looks=tuple(experiment.looks) if experiment.looks_recorded else None,
            batch=max(1, len(self.workers.slots) // pending),
        )

    def _decide(self, experiment: Experiment, verdict: Verdict, decision: Decision | None,
                reason: str, evidence: dict[str, Any] | None = None) -> None:
        """Record the verdict, then make git agree (in that order: see reconcile)."""
        incumbent = self.state.incumbent
        score = score_prediction(experiment.prediction, decision, self.program.direction)
        event = self.ledger.append(DecisionMade(
            id=experiment.id, commit=experiment.commit, incumbent=incumbent, verdict=verdict,
            decision=decision, reason=reason, score=score, evidence=dict(evidence or {})))
        self._decided_here += 1
        self._asked.pop(experiment.id, None)
        self._cancel_runs_of(experiment.id)
        if verdict == Verdict.KEEP:
            self.workspace.keep(experiment.commit, experiment.id)
            self._supersede(experiment, incumbent)
        else:
            self.workspace.discard(experiment.commit, experiment.id, self.state.incumbent)
            self._unused.add(experiment.commit)
        self._drop_unused_snapshots()
        self._write_views()
        self.observer.decided(event)
        delta = None
        if decision is not None and decision.effect is not None:
            delta = -decision.effect if self.program.direction == "minimize" else decision.effect
        self.proposals.observe(experiment.researcher, _proposal_of(experiment), Outcome(
            experiment_id=experiment.id, verdict=verdict, measured_delta=delta,
            candidate_mean=experiment.mean(), reason=reason))

    def _supersede(self, kept: Experiment, old: str) -> None:
        """Candidates measured against `old` cannot be decided on that evidence: each is
        recorded superseded, and its diff re-applied onto the new incumbent when it merges."""
        target = self.program.target
        new_source, old_source = self.workspace.read(target, kept.commit), self.workspace.read(target, old)
        for other in self.state.pending_experiments():
            merged = three_way_merge(old_source, new_source, self.workspace.read(target, other.commit))
            again = merged is not None and merged != new_source
            why = ("its diff is re-applied onto the new incumbent as a new candidate" if again else
                   "its diff does not apply to the new incumbent: not re-proposed"
                   if merged is None else "the new incumbent already holds its change")
            self.ledger.append(DecisionMade(
                id=other.id, commit=other.commit, incumbent=old, verdict=Verdict.SUPERSEDED,
                reason=f"{kept.id} was kept while this ran against {old[:8]}; {why}"))
            self._decided_here += 1
            self._asked.pop(other.id, None)
            self._cancel_runs_of(other.id)
            self.workspace.discard(other.commit, other.id, kept.commit)
            self._unused.add(other.commit)
            if merged is None:
                self.ledger.append(ProposalRebased(id=other.id, proposed_on=old, onto=kept.commit,
                                                   outcome="conflict", source=other.id))
            elif again:
                proposal = dataclasses.replace(_proposal_of(other), source=merged, usage=None)
                context = dataclasses.replace(self._context(0), incumbent_commit=kept.commit)
                self._ready.insert(0, Ready(context=context, proposal=proposal,
                                            source_experiment=other.id))
            self.proposals.observe(other.researcher, _proposal_of(other), Outcome(
                experiment_id=other.id, verdict=Verdict.SUPERSEDED, measured_delta=None,
                candidate_mean=None, reason=why))

    # ---- starting runs ---------------------------------------------------------------------

    def _fill(self, reference_only: bool) -> None:
        """Give every free worker the most useful next run."""
        while True:
            free = self._free_slots()
            if not free:
                return
            request = next(iter(self._wanted(reference_only)), None)
            if request is not None:
                self._launch(request, free[0])
                continue
            if reference_only or not self._ready or not self._room_for_candidates():
                return
            if not (self._baseline_checked or self.state.experiments):
                return   # the first candidate waits for the first baseline's verdict
            self._record_next_proposal()

    def _free_slots(self) -> list[Slot]:
        busy = {slot.index for _, _, slot in self._running.values()}
        return [slot for slot in self.workers.slots if slot.index not in busy]

    def _wanted(self, reference_only: bool) -> Iterator[RunRequest]:
        in_flight = {(r.commit, r.seed, r.role) for _, r, _ in self._running.values()}
        return runs_wanted(self.state, self._asked, self.rule.baseline_seeds(), in_flight,
                           reference_only, self.rule.repeat_seeds())

    def _launch(self, request: RunRequest, slot: Slot) -> None:
        job = self.executor.prepare(request.commit, request.seed, request.role, request.experiment,
                                    slot=slot, label=request.label)
        self.observer.run_started(job.run_id, slot, request.commit, request.seed, request.role,
                                  request.experiment, job.spec.budget_s, request.label)
        self.live.start(job.run_id, job.spec.budget_s)
        self.workers.submit(slot, job, on_output=self._output)
        self._running[job.run_id] = (job, request, slot)

    def _output(self, run_id: str, line: str) -> None:
        """A line a run printed (on a worker's thread): its curve, and the display."""
        self.live.feed(run_id, line)
        self.observer.output(run_id, line)

    def _check_curves(self) -> None:
        """Judge each candidate run in flight whose curve crossed a checkpoint: a losing one is
        stopped (recorded first, then its candidate's runs are cancelled; `_advance` records the
        discard once they ended), one that cannot be paired is recorded so."""
        for run_id, (job, request, _) in list(self._running.items()):
            started = self.state.in_flight.get(run_id)
            if request.role != Role.CANDIDATE or started is None:
                continue
            event = self.early.check(self.state, started, self.live.curve(run_id),
                                     self._evidence_with, self._running_curve, job.spec.budget_s)
            if event is None:
                continue
            self.ledger.append(event)
            if isinstance(event, RunStoppedEarly):
                self.observer.message(f"{event.experiment}: {event.reason}")
                self._asked.pop(event.experiment, None)
                self._cancel_runs_of(event.experiment)

    def _running_curve(self, commit: str, seed: int) -> Curve | None:
        """The curve so far of the incumbent's run on `seed`, when one is in flight."""
        for run_id, (_, request, _) in self._running.items():
            if (request.commit, request.seed, request.role) == (commit, seed, Role.REFERENCE):
                return self.live.curve(run_id)
        return None

    def _cancel_runs_of(self, experiment_id: str) -> None:
        for run_id, (_, request, _) in list(self._running.items()):
            if request.experiment == experiment_id:
                self.workers.cancel(run_id)

    def _drop_unused_snapshots(self) -> None:
        in_use = {request.commit for _, request, _ in self._running.values()}
        for commit in list(self._unused - in_use):
            self.executor.release(commit)
            self._unused.discard(commit)

    # ---- proposing -------------------------------------------------------------------------

    def _room_for_candidates(self) -> bool:
        """Whether a new candidate may start: --max-experiments counts what is in flight."""
        limit = self._stop_rules.max_experiments
        return limit is None or self._decided_here + len(self.state.pending_experiments()) < limit

    def _ask_researcher(self, stop: StopRules) -> None:
        """Keep a proposal in preparation (overlap), or ask only when nothing runs."""
        if self._researcher_error is not None:
            return
        waiting = self.proposals.preparing + sum(1 for r in self._ready if r.source_experiment is None)
        if self.overlap:
            wanted = self.proposals.capacity - waiting
        else:
            idle = not self._running and not self.state.pending_experiments() and not self._ready
            wanted = 1 if idle and waiting == 0 else 0
        if stop.max_experiments is not None:
            started = self._decided_here + len(self.state.pending_experiments()) + waiting
            wanted = min(wanted, stop.max_experiments - started)
        proposed: dict[str, int] = {}
        for experiment in self.state.experiments.values():
            proposed[experiment.researcher] = proposed.get(experiment.researcher, 0) + 1
        for ready in self._ready:
            proposed[ready.researcher] = proposed.get(ready.researcher, 0) + 1
        for _ in range(wanted):
            arm = self.proposals.next_arm(proposed)
            if arm is None:
                return
            self._ask(arm)

    def _ask(self, arm: Arm, attempts: int = 1) -> None:
        """Ask `arm` for a proposal, recorded first (proposal_asked): the live page shows it
        being written until its proposal_ready."""
        context = self._context(offset=self.proposals.preparing + len(self._ready))
        request_id = uuid.uuid4().hex[:10]
        self.ledger.append(ProposalAsked(request_id=request_id, researcher=arm.name,
                                         incumbent=context.incumbent_commit, attempt=attempts))
        self.proposals.propose(context, attempts=attempts, arm=arm, request_id=request_id)

    def _record_ready(self, ready: Ready) -> None:
        if ready.request_id is None:
            return
        outcome = "error" if ready.error else "rejected" if ready.rejected else "proposal"
        self.ledger.append(ProposalReady(
            request_id=ready.request_id, researcher=ready.researcher, outcome=outcome,
            description=ready.proposal.description if ready.proposal else "",
            duration_s=ready.duration_s))

    def _context(self, offset: int) -> ResearchContext:
        plan = evaluation_plan(self.program, self.executor.plan.budget_s, self.rule.name)
        return research_context(self.state, self.program, self.workspace, plan, offset=offset,
                                deadline=self._stop_rules.deadline())

    def _record_next_proposal(self) -> None:
        """Turn the oldest ready proposal into a candidate (rebased if the incumbent moved)
        or an invalid experiment (agent.night.admission)."""
        ready = self._ready.pop(0)
        state = self.state
        experiment_id = f"e{state.next_index:04d}"
        if ready.rejected is not None:
            self._record_invalid(ready, experiment_id, None, str(ready.rejected), ready.rejected.usage,
                                 ready.rejected.extra)
            return
        incumbent, target = state.incumbent, self.program.target
        admission = admit(ready, experiment_id, incumbent, self.workspace, target, MAX_ASKS,
                          knobs_only=dict(self.program.knobs) if self.program.edits == "knobs" else None)
        if admission.rebased is not None:
            self.ledger.append(admission.rebased)
        proposal = admission.proposal
        if admission.fate is Fate.DROPPED:
            return   # a superseded candidate's diff: the ledger says it was dropped
        if admission.fate is Fate.ASK_AGAIN:
            self.observer.message(f"a proposal made against {ready.proposed_on[:8]} conflicts "
                                  f"with the new incumbent {incumbent[:8]}: asking again")
            self._ask(self.proposals.choose(name=ready.researcher), attempts=ready.attempts + 1)
            return
        if admission.fate is Fate.INVALID:
            self._record_invalid(ready, experiment_id, proposal, admission.reason, proposal.usage)
            return
        commit = self.workspace.commit_candidate(target, proposal.source,
                                                 commit_message(ready, proposal, experiment_id),
                                                 parent=incumbent, name=experiment_id)
        self.ledger.append(ExperimentProposed(
            id=experiment_id, commit=commit, parent=incumbent,
            description=proposal.description, hypothesis=proposal.hypothesis,
            prediction=proposal.prediction, researcher=ready.researcher or self.researcher.name,
            hypothesis_id=proposal.hypothesis_id, extra=proposal.extra, usage=proposal.usage))
        self.observer.message(f"{experiment_id} {commit[:8]}: {proposal.description}")
        experiment = self.state.experiments[experiment_id]
        step = self.rule.next(self._evidence(experiment))
        if isinstance(step, RunMore):
            self._asked[experiment_id] = step

    def _record_invalid(self, ready: Ready, experiment_id: str, proposal: Proposal | None,
                        reason: str, usage: Usage | None,
                        extra: dict[str, Any] | None = None) -> None:
        researcher = ready.researcher or self.researcher.name
        diff = ""
        incumbent = self.state.incumbent
        if proposal is not None:
            diff = proposal_diff(self.workspace.read(self.program.target, incumbent), proposal,
                                 self.program.target)
        self.ledger.append(ExperimentInvalid(
            id=experiment_id, parent=incumbent, reason=reason,
            description=proposal.description if proposal else "(no usable proposal)",
            hypothesis=proposal.hypothesis if proposal else "",
            prediction=proposal.prediction if proposal else None,
            researcher=researcher,
            hypothesis_id=proposal.hypothesis_id if proposal else None, diff=diff, usage=usage,
            extra=dict(proposal.extra) if proposal else dict(extra or {})))
        self._decided_here += 1
        self._write_views()
        self.observer.message(f"{experiment_id}: invalid — {reason}")
        if proposal is not None:
            self.proposals.observe(researcher, proposal,
                                   Outcome(experiment_id, Verdict.INVALID, None, None, reason))

    def _write_views(self, now: bool = False) -> None:
        """Rewrite results.tsv: at once when the night stops, else at most every VIEWS_EVERY_S
        (it holds every experiment, so a rewrite per decision would cost a long night time in
        proportion to its length); a rewrite put off is made by `_night`'s next turn once due.
        The ledger, not the TSV, is what a resume reads."""
        self._views_stale = True
        if now or time.monotonic() - self._views_written >= VIEWS_EVERY_S:
            write_tsv(self.state, self.ledger.dir, self.program.metric)
            self._views_written, self._views_stale = time.monotonic(), False

    # ---- one run, here and now (noise measurements) ------------------------------------------

    def measure(self, commit: str, seed: int, role: Role, experiment: str | None,
                label: str) -> RunFinished:
        """Run `commit` on `seed` on this process's runner, showing progress; the ledger event."""
        slot = Slot(0, "cpu")
        self.observer.run_started("", slot, commit, seed, role, experiment,
                                  self.executor.plan.budget_s, label)
        run = self.executor.run(commit, seed, role, experiment,
                                on_output=lambda line: self.observer.output("", line))
        self.observer.run_finished(run)
        return run


def _proposal_of(experiment: Experiment) -> Proposal:
    """Rebuild the proposal from the ledger, so `observe` works across a resume."""
    prediction = experiment.prediction or Prediction("same", 0.0, (0.0, 0.0), 0.5)
    return Proposal(source="", description=experiment.description, hypothesis=experiment.hypothesis,
                    prediction=prediction, hypothesis_id=experiment.hypothesis_id,
                    extra=experiment.extra)


def _known(cls: type, facts: dict[str, Any]) -> dict[str, Any]:
    """The facts `cls` has fields for (a backend may describe itself with more)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {key: value for key, value in facts.items() if key in names}
