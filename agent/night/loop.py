"""The research loop: propose → gate → commit → run → decide → keep or revert → record,
with every worker busy.

A scheduler on the main thread keeps up to one run per worker in flight (`cluster.Workers`)
and fills a free worker with the most useful next run (priority.py): the seeds the keep rule
asked for on pending candidates, then the incumbent's fresh reference seeds, then the screen
of a new candidate (intake.py). The researcher prepares the next proposal in a thread of its
own while runs train (`overlap`). The rule is consulted when a candidate's batch has landed,
never per seed, and the looks it took are recorded, so its error spending stays valid for them.
A candidate run whose curve, at a checkpoint of program.md's `early_stop:`, is confidently
losing to its incumbent's on the same seed is stopped: a discard stopped early (early_stops.py).

Several candidates may be in flight against the same incumbent. When one is kept, the others
were measured against an incumbent that is gone: each is recorded `superseded` (never kept on
that evidence), and its diff is re-applied onto the new incumbent as a new candidate when it
merges. A proposal made while the incumbent changed is rebased the same way, or asked again
when it conflicts; the ledger records which (`proposal_rebased`).

Everything the loop knows lives in the ledger (`self.ledger.state`, kept as events are
appended). A loop killed at any point resumes where it stopped: pending candidates continue
with the seeds they still need, git is brought in line with the ledger first (reconcile.py).
Its other parts, each a module of agent/night/, are listed in docs/architecture.md.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from agent.decide.compute import clearly_over, refusal
from agent.decide.decision import DecisionRule, Evidence, RunMore
from agent.decide.scoring import score_prediction
from agent.night.context import evaluation_plan, research_context
from agent.night.early_stops import EarlyStopping, stop_decision, stopped_reason
from agent.night.evidence import (compute_cost, evidence_for, incumbent_measured, inert,
                                  integrity_flag, night_history, waiting)
from agent.night.in_flight import InFlight
from agent.night.intake import Intake
from agent.night.priority import RunRequest, runs_wanted
from agent.night.proposals import Researchers
from agent.night.reconcile import file_orphan_head, reconcile
from agent.night.stop_rules import StopRules
from agent.preflight.check_runs import CHECK_SEEDS, CHECK_TAG, adopt, checked_baseline, plan_digest
from agent.preflight.checks import baseline_verdict
from agent.preflight.failures import describe_error
from agent.program import Program
from agent.run.executor import RunExecutor
from agent.run.live import LiveCurves
from agent.run.observer import Observer, QuietObserver
from agent.record.events import (Decision, DecisionMade, ExitCode, LookTaken, LoopResumed,
                                 LoopStarted, LoopStopped, Role, RunBegan, RunFinished, RunQueued,
                                 RunStoppedEarly, Verdict)
from agent.record.ledger import Ledger
from agent.record.state import Experiment, LoopState
from agent.record.views import TsvWriter
from agent.researchers import Outcome, ResearchContext, Researcher, ResearcherDone, ResearcherError
from agent.workspace.repo import Workspace, WorkspaceError
from cluster.protocol import Dispatched, OnDispatched, OnDone, JobOutcome, Workers
from sandbox import Status

__all__ = ["LoopError", "ResearchLoop", "StopRules"]

MAX_REFERENCE_RETRIES = 2
WAIT_S = 0.5           # longest sleep between looks at the workers and the researcher
ABORT_WAIT_S = 30.0    # how long a stopping loop waits for cancelled runs to report


class LoopError(RuntimeError):
    """The loop cannot go on (the baseline fails, the workspace is broken). Says why."""


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
        self.flight = InFlight(self.workers, self.executor, self.observer, self.live)
        self._asked: dict[str, RunMore] = {}
        self._failures: dict[tuple[str, int], int] = {}
        self._researcher_error: ResearcherError | None = None
        self._decided_here = 0
        self.views = TsvWriter(self.ledger.dir, self.program.metric)
        self._baseline_checked = False          # the first baseline's verdict was given
        arms = [(self.researcher, 1.0 - self.control_share)]
        if self.control is not None and self.control_share > 0:
            arms.append((self.control, self.control_share))
        self.proposals = Researchers(arms, lambda ready: self._queue("proposal", ready))
        self.intake = Intake(ledger=self.ledger, workspace=self.workspace, program=self.program,
                             proposals=self.proposals, observer=self.observer,
                             researcher=self.researcher.name, context=self._context)
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
            if self._researcher_error and not self.state.pending_experiments() and not self.intake.has_next():
                reason = reason or "researcher"
            if reason:
                # Honest numbers: a new incumbent is measured on its fresh seeds before the
                # night ends (not for Ctrl-C); nothing else new starts.
                self._fill(reference_only=True)
                if not self.flight:
                    if reason == "researcher":
                        if isinstance(self._researcher_error, ResearcherDone):
                            return str(self._researcher_error)   # as planned: a normal end
                        raise self._researcher_error
                    return reason
            else:
                self._fill(reference_only=stop.time_is_up())
                if not stop.time_is_up():
                    self._ask_researcher(stop)
            self.views.flush(self.state)
            self._wait()

    def _start(self) -> None:
        described = self.workers.describe()
        facts = {**self.facts, "records_looks": True, **described, "cluster_facts": described,
                 "overlap": self.overlap}
        if not self.state.has_evidence:   # new, or nothing measured yet: (re)starts at the head
            self.ledger.append(LoopStarted(tag=self.tag, base_commit=self.workspace.head(),
                                           program=self.program.to_dict(), **LoopStarted.known(facts)))
            self.observer.message(f"started tag {self.tag} at {self.workspace.head()[:8]}")
            self._adopt_checked_baseline()
        else:
            self.ledger.append(LoopResumed(tag=self.tag, **LoopResumed.known(facts)))
            pending = len(self.state.pending_experiments())
            self.observer.message(f"resuming tag {self.tag}: {len(self.state.experiments)} "
                                  f"experiments so far ({pending} pending), incumbent "
                                  f"{self.state.incumbent[:8]}")
        for note in reconcile(self.workspace, self.state):
            self.observer.message(note)
        for other in self._supersede_stale():
            self.observer.message(f"{other.id}: superseded (the keep of its incumbent's successor was "
                                  f"recorded while it ran against {other.parent[:8]})")
        for note in self.workers.notes:
            self.observer.message(note)

    def _supersede_stale(self) -> list[Experiment]:
        """A keep recorded just before a kill or Ctrl-C whose supersedes were not: the
        candidates still pending against the incumbent it replaced are superseded now, as they
        would have been (never judged on evidence against an incumbent that is gone)."""
        stale = [e for e in self.state.pending_experiments() if e.parent != self.state.incumbent]
        if not stale:
            return []
        kept = next(e for e in self.state.experiments.values()
                    if e.commit == self.state.incumbent and e.verdict == Verdict.KEEP)
        return self.intake.supersede(kept, kept.parent)

    def _stop(self, reason: str, code: ExitCode) -> str | None:
        """Record loop_stopped and rewrite the views; what could not be written, or None."""
        try:
            self.ledger.append(LoopStopped(reason=reason, exit_code=code))
        except OSError as error:
            return f"loop_stopped could not be recorded: {describe_error(error)}"
        try:
            self.views.write(self.state, now=True)
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
            error = self.intake.received(item)
            self._researcher_error = self._researcher_error or error

    def _dispatched(self, news: Dispatched) -> None:
        """A queue's news of a run in flight: queued as a job, or began on a node."""
        if news.run_id not in self.flight:
            return   # it was reported already
        if news.node is None:
            self.ledger.append(RunQueued(run_id=news.run_id, job_id=news.job_id))
        else:
            self.live.began(news.run_id)
            self.ledger.append(RunBegan(run_id=news.run_id, job_id=news.job_id, node=news.node,
                                        queued_s=news.queued_s))
        self.observer.dispatched(news)

    def _finished(self, outcome: JobOutcome, deciding: bool = True) -> None:
        if outcome.run_id not in self.flight:
            return   # reported twice (a backend's retry): the first report stands
        job, curve = self.flight.landed(outcome.run_id)
        stop = self.state.early_stops.get(outcome.run_id)
        run = self.executor.finish(job, outcome, curve=curve,
                                   stopped=stopped_reason(stop) if stop else None)
        unpaired = self.early.finished(run) if run.status != Status.INTERRUPTED else None
        if unpaired is not None:
            self.ledger.append(unpaired)
        self.observer.run_finished(run)
        self.flight.drop_unused()
        if not deciding or run.status == Status.INTERRUPTED:
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
        if not incumbent_measured(self.state, self.rule):
            return
        self._check_baseline()
        for experiment in self.state.pending_experiments():
            if experiment.decided:
                continue
            flag = integrity_flag(self.state, self.program, experiment)
            if flag is not None:   # bent how it is measured: never kept, whatever the numbers
                self._decide(experiment, flag.verdict, None, flag.reason, flag.evidence)
                continue
            unchanged = inert(self.state, experiment)
            if unchanged is not None:   # the same numbers as the incumbent: no effect to test
                self._decide(experiment, Verdict.NO_EFFECT, None, unchanged)
                continue
            spent = compute_cost(self.state, self.program, experiment)
            if clearly_over(spent):   # no seed can make it a keep: stop spending runs on it
                self._decide(experiment, Verdict.DISCARD, None,
                             refusal(spent, self.program.compute, won=False), {"refused": "compute"})
                continue
            stop = experiment.stopped_early
            if stop is not None:   # a run of it was stopped early: a discard once its runs ended
                if not self.flight.of(experiment.id):
                    self._decide(experiment, Verdict.DISCARD, stop_decision(
                        experiment, stop, self.state.reference(experiment.parent)), stop.reason)
                continue
            if waiting(self.state, self._asked.get(experiment.id), experiment):
                continue
            step = self.rule.next(self._evidence(experiment))
            if isinstance(step, Decision) and step.verdict == Verdict.KEEP and spent and spent.over:
                # a win, bought with more compute than program.md allows: the test stands
                # in the record (the researcher learns it won), the commit is not kept
                self._decide(experiment, Verdict.DISCARD, step, refusal(spent, self.program.compute),
                             {"refused": "compute"})
                continue
            if isinstance(step, Decision):
                self._decide(experiment, step.verdict, step, step.reason)
                if step.verdict == Verdict.KEEP:
                    return   # the others were superseded; the new incumbent is measured first
                continue
            if step.look is not None and step.look not in experiment.looks:
                self.ledger.append(LookTaken(id=experiment.id, seeds=step.look, reason=step.reason))
            self._asked[experiment.id] = step

    def _adopt_checked_baseline(self) -> None:
        """A new night right after `nightshift check` on the same commit and plan takes the
        check's baseline runs as its first reference runs (agent/preflight/check_runs.py):
        the same runs, not run twice. Only on one worker of this machine, as check ran them."""
        if self.state.runs or self.program.cluster != "local" or len(self.workers.slots) != 1:
            return
        seeds = tuple(s for s in self.rule.baseline_seeds() if s in CHECK_SEEDS)
        digest = plan_digest(self.executor.plan, self.executor.runner.name, self.program.image)
        found = checked_baseline(self.program.root / "results" / CHECK_TAG, commit=self.state.base_commit,
                                 digest=digest, seeds=seeds) if seeds else None
        if found is None:
            return
        for run in adopt(found, self.ledger.dir):
            self.ledger.append(run)
        self.observer.message(found.describe())

    def _check_baseline(self) -> None:
        """Once, before the first candidate: print the verdict on the first baseline's runs,
        and stop when the seed changes nothing (agent.preflight.checks)."""
        if self._baseline_checked or self.state.experiments:
            return
        self._baseline_checked = True
        verdict = baseline_verdict(self.state, self.program, self.ledger.dir)
        for line in verdict.lines():
            self.observer.message(line)
        if verdict.stop:
            raise LoopError(verdict.stop)

    def _evidence(self, experiment: Experiment, candidate: dict[int, float] | None = None) -> Evidence:
        """The rule's evidence (`candidate`: values to judge instead of the candidate's own)."""
        return evidence_for(self.state, experiment, self.program.direction, len(self.workers.slots),
                            candidate)

    def _decide(self, experiment: Experiment, verdict: Verdict, decision: Decision | None,
                reason: str, evidence: dict[str, Any] | None = None) -> None:
        """Record the verdict, then make git agree (in that order: see reconcile)."""
        incumbent = self.state.incumbent
        self._reclaim_branch(incumbent)
        score = score_prediction(experiment.prediction, decision, self.program.direction)
        event = self.ledger.append(DecisionMade(
            id=experiment.id, commit=experiment.commit, incumbent=incumbent, verdict=verdict,
            decision=decision, reason=reason, score=score, evidence=dict(evidence or {}),
            compute=compute_cost(self.state, self.program, experiment)))
        self._decided_here += 1
        self._asked.pop(experiment.id, None)
        self.flight.cancel(experiment.id)
        if verdict == Verdict.KEEP:
            self.workspace.keep(experiment.commit, experiment.id)
            for other in self.intake.supersede(experiment, incumbent):
                self._decided_here += 1
                self._asked.pop(other.id, None)
                self.flight.cancel(other.id)
                self.flight.unused(other.commit)
        else:
            self.workspace.discard(experiment.commit, experiment.id, self.state.incumbent)
            self.flight.unused(experiment.commit)
        self.views.write(self.state)
        self.observer.decided(event)
        delta = None
        if decision is not None and decision.effect is not None:
            delta = self.program.direction.sign * decision.effect   # candidate − incumbent
        self.proposals.observe(experiment, Outcome(
            experiment_id=experiment.id, verdict=verdict, measured_delta=delta,
            candidate_mean=experiment.mean(), reason=reason,
            stopped_early=experiment.stopped_early is not None and verdict == Verdict.DISCARD,
            over_compute=(evidence or {}).get("refused") == "compute"))

    def _reclaim_branch(self, incumbent: str) -> None:
        """The night's branch is the night's: a commit made on it behind its back (an agent in
        the night's worktree, a person) is filed under a discarded ref, never lost and never
        taken for a candidate, and the branch goes back to the incumbent before git follows a
        decision (printed; a resumed night's reconcile files such a commit the same way)."""
        head = self.workspace.head()
        if head == incumbent:
            return
        kept_under = file_orphan_head(self.workspace, head, incumbent)
        self.observer.message(
            f"branch {self.workspace.branch} was at {head[:8]}, a commit the night did not make: "
            f"kept under {kept_under}, the branch is back at the incumbent {incumbent[:8]} (an "
            f"agent proposes with `nightshift propose`, not by committing there)")

    # ---- starting runs ---------------------------------------------------------------------

    def _fill(self, reference_only: bool) -> None:
        """Give every free worker the most useful next run."""
        while True:
            free = self.flight.free_slots()
            if not free:
                return
            request = next(iter(self._wanted(reference_only)), None)
            if request is not None:
                self.flight.launch(request, free[0])
                continue
            if reference_only or not self.intake.has_next() or not self._room_for_candidates():
                return
            if not (self._baseline_checked or self.state.experiments):
                return   # the first candidate waits for the first baseline's verdict
            self._admit_next()

    def _wanted(self, reference_only: bool) -> Iterator[RunRequest]:
        # At the night's end the last incumbent runs every baseline seed (its record's fresh
        # value); during it, what the rule needs before judging against it.
        seeds = (self.rule.baseline_seeds() if reference_only
                 else self.rule.incumbent_seeds(night_history(self.state)))
        return runs_wanted(self.state, self._asked, seeds, self.flight.keys(),
                           reference_only, self.rule.repeat_seeds())

    def _check_curves(self) -> None:
        """Judge each candidate run in flight whose curve crossed a checkpoint: a losing one is
        stopped (recorded first, then its candidate's runs are cancelled; `_advance` records the
        discard once they ended), one that cannot be paired is recorded so."""
        for event in self.early.look(self.state, self.flight, self._evidence):
            self.ledger.append(event)
            if isinstance(event, RunStoppedEarly):
                self.observer.message(f"{event.experiment}: {event.reason}")
                self._asked.pop(event.experiment, None)
                self.flight.cancel(event.experiment)

    # ---- proposing -------------------------------------------------------------------------

    def _room_for_candidates(self) -> bool:
        """Whether a new candidate may start: --max-experiments counts what is in flight."""
        limit = self._stop_rules.max_experiments
        return limit is None or self._decided_here + len(self.state.pending_experiments()) < limit

    def _ask_researcher(self, stop: StopRules) -> None:
        """Keep proposals coming (agent.night.intake), within --max-experiments."""
        if self._researcher_error is None:
            pending = len(self.state.pending_experiments())
            self.intake.ask_as_needed(self.overlap, not self.flight and not pending,
                                      None if stop.max_experiments is None
                                      else stop.max_experiments - self._decided_here - pending)

    def _context(self, offset: int) -> ResearchContext:
        plan = evaluation_plan(self.program, self.executor.plan.budget_s, self.rule.name)
        return research_context(self.state, self.program, self.workspace, plan, offset=offset,
                                deadline=self._stop_rules.deadline())

    def _admit_next(self) -> None:
        """The next proposal (or re-applied diff) as a candidate, first looked at by the rule
        for its seeds, or as an invalid experiment (agent.night.intake)."""
        experiment = self.intake.admit_next()
        if experiment is None:
            return
        if experiment.decided:       # invalid: decided as it was recorded
            self._decided_here += 1
            self.views.write(self.state)
            return
        step = self.rule.next(self._evidence(experiment))
        if isinstance(step, RunMore):
            self._asked[experiment.id] = step
