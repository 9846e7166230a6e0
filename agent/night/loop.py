"""The research loop: propose → gate → commit → run → decide → keep or revert → record.

Everything the loop knows lives in the ledger: the loop reads `self.ledger.state`, which the
ledger keeps folded as events are appended (the file is read once, at start). A loop killed
at any point resumes where it stopped: a pending experiment continues with the seeds it still
needs; an incumbent missing reference runs gets them first.
"""
from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.decide.decision import DecisionRule, Evidence, pooled_sd
from agent.decide.scoring import score_prediction
from agent.program import Program
from agent.record.events import (Decision, DecisionMade, ExitCode, ExperimentInvalid,
                                 ExperimentProposed, LoopResumed, LoopStarted, LoopStopped,
                                 Prediction, Role, RunFinished, Verdict)
from agent.record.ledger import Ledger
from agent.record.state import Experiment, LoopState
from agent.record.summary import ledger_summary
from agent.record.views import write_tsv
from agent.researchers import (Outcome, Proposal, ProposalRejected, ResearchContext, Researcher,
                               ResearcherError)
from agent.night.checks import baseline_verdict
from agent.night.runs import RunExecutor
from agent.workspace.gate import check_source
from agent.workspace.repo import Workspace, candidate_message

MAX_REFERENCE_RETRIES = 2


class LoopError(RuntimeError):
    """The loop cannot go on (the baseline fails, the workspace is broken). Says why."""


class Observer(Protocol):
    """What the loop tells a display. Every method is optional to act on."""

    def message(self, text: str) -> None: ...
    def run_started(self, commit: str, seed: int, role: Role, experiment: str | None,
                    budget_s: float, label: str) -> None: ...
    def output(self, line: str) -> None: ...
    def run_finished(self, run: RunFinished) -> None: ...
    def decided(self, event: DecisionMade) -> None: ...


class QuietObserver:
    def message(self, text: str) -> None: pass
    def run_started(self, commit: str, seed: int, role: Role, experiment: str | None,
                    budget_s: float, label: str) -> None: pass
    def output(self, line: str) -> None: pass
    def run_finished(self, run: RunFinished) -> None: pass
    def decided(self, event: DecisionMade) -> None: pass


@dataclass
class StopRules:
    max_experiments: int | None = None   # experiments decided by this invocation
    hours: float | None = None           # wall clock of this invocation
    started: float = field(default_factory=time.monotonic)

    def time_is_up(self) -> bool:
        return self.hours is not None and time.monotonic() - self.started >= self.hours * 3600

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
    observer: Observer = field(default_factory=QuietObserver)
    facts: dict[str, Any] = field(default_factory=dict)   # recorded with loop_started/resumed

    @property
    def state(self) -> LoopState:
        """The fold of every event so far, kept by the ledger as it appends."""
        return self.ledger.state

    # ---- the night ---------------------------------------------------------------------

    def run(self, stop: StopRules) -> str:
        """Run until a stop rule holds. Returns the reason it stopped. Ctrl-C propagates
        after the ledger is closed cleanly."""
        self._start()
        decided_here = 0
        try:
            while True:
                reason = stop.reached(decided_here)
                if reason:
                    break
                self._ensure_reference(stop)
                if not self.state.experiments:   # the first baseline: check what it assumes
                    self._check_baseline()
                self.ledger.refresh()   # hypotheses queued meanwhile by `nightshift seed`
                experiment = self.state.pending or self._propose()
                if experiment is not None and not experiment.decided:
                    if not self._evaluate(experiment, stop):
                        reason = stop.reached(decided_here) or "time is up"
                        break
                decided_here += 1
        except KeyboardInterrupt:
            self._stop("interrupted", ExitCode.INTERRUPTED)
            raise
        except (ResearcherError, LoopError) as error:
            self._stop(f"{type(error).__name__}: {error}",
                       ExitCode.RESEARCHER if isinstance(error, ResearcherError) else ExitCode.LOOP)
            raise
        self._stop(reason, ExitCode.OK)
        return reason

    def _stop(self, reason: str, code: ExitCode) -> None:
        self.ledger.append(LoopStopped(reason=reason, exit_code=code))
        self._write_views()

    def _start(self) -> None:
        facts = {key: value for key, value in self.facts.items()}
        if not self.state.started:
            self.ledger.append(LoopStarted(tag=self.tag, base_commit=self.workspace.head(),
                                           program=self.program.to_dict(), **facts))
            self.observer.message(f"started tag {self.tag} at {self.workspace.head()[:8]}")
        else:
            self.ledger.append(LoopResumed(tag=self.tag, **facts))
            self.observer.message(f"resuming tag {self.tag}: {len(self.state.experiments)} "
                                  f"experiments so far, incumbent {self.state.incumbent[:8]}")
        self._align_branch()

    def _align_branch(self) -> None:
        """After a crash the branch may hold a commit the ledger never heard of."""
        state = self.state
        expected = state.pending.commit if state.pending and state.pending.commit else state.incumbent
        head = self.workspace.head()
        if head != expected:
            self.workspace.discard(head, f"orphan-{head[:8]}", state.incumbent)
            if expected != state.incumbent:
                self.workspace.reset_to(expected)
            self.observer.message(f"branch head {head[:8]} was not in the ledger; kept it under "
                                  f"refs/nightshift/{self.tag}/discarded/orphan-{head[:8]}")

    # ---- measuring ---------------------------------------------------------------------

    def _ensure_reference(self, stop: StopRules) -> None:
        """Measure the incumbent on the rule's baseline seeds: its fresh reference."""
        incumbent = self.state.incumbent
        for seed in self.rule.baseline_seeds():
            for attempt in range(MAX_REFERENCE_RETRIES):
                if seed in self.state.reference(incumbent):
                    break
                run = self.measure(incumbent, seed, Role.REFERENCE, None, "incumbent reference")
                if run.ok:
                    break
            else:
                raise LoopError(
                    f"the incumbent {incumbent[:8]} failed on seed {seed} "
                    f"({run.status.value}: {run.reason}); the baseline must run before "
                    f"anything can be compared with it. Log: results/{self.tag}/{run.log}")

    def _check_baseline(self) -> None:
        """Print the verdict on the first baseline's runs; stop when the seed changes nothing."""
        verdict = baseline_verdict(self.state, self.program, self.ledger.dir)
        for line in verdict.lines():
            self.observer.message(line)
        if verdict.stop:
            raise LoopError(verdict.stop)

    def measure(self, commit: str, seed: int, role: Role, experiment: str | None,
                label: str) -> RunFinished:
        """Run `commit` on `seed` in the sandbox, showing progress; returns the ledger event."""
        self.observer.run_started(commit, seed, role, experiment, self.executor.plan.budget_s, label)
        run = self.executor.run(commit, seed, role, experiment, on_output=self.observer.output)
        self.observer.run_finished(run)
        return run

    def _evidence(self, experiment: Experiment) -> Evidence:
        state = self.state
        sd, dof = pooled_sd(state.noise_groups())
        return Evidence(
            direction=self.program.direction,
            candidate=state.ok_values(experiment.commit, Role.CANDIDATE),
            reference=state.reference(experiment.parent),
            noise_sd=sd, noise_dof=dof,
            history=tuple(d.decision for d in state.decisions if d.decision),
        )

    def _evaluate(self, experiment: Experiment, stop: StopRules) -> bool:
        """Run the seeds the rule asks for, then decide. False if stopped before deciding."""
        while True:
            evidence = self._evidence(experiment)
            step = self.rule.next(evidence)
            if isinstance(step, Decision):
                self._decide(experiment, step.verdict, step, step.reason)
                return True
            for seed in step.reference_seeds:
                if seed not in evidence.reference:
                    run = self.measure(experiment.parent, seed, Role.REFERENCE, None, "incumbent reference")
                    if not run.ok:
                        raise LoopError(f"the incumbent failed on seed {seed}: {run.status.value}")
            for seed in step.candidate_seeds:
                if seed in evidence.candidate:
                    continue
                if stop.time_is_up():
                    return False
                run = self.measure(experiment.commit, seed, Role.CANDIDATE, experiment.id,
                                   experiment.description)
                if not run.ok:
                    self._decide(experiment, Verdict.of_run(run.status), None,
                                 f"{run.status.value} on seed {seed}: {run.reason}")
                    return True

    def _decide(self, experiment: Experiment, verdict: Verdict, decision: Decision | None,
                reason: str) -> None:
        incumbent = self.state.incumbent
        score = score_prediction(experiment.prediction, decision, self.program.direction)
        if verdict == Verdict.KEEP:
            self.workspace.keep(experiment.commit)
        else:
            self.workspace.discard(experiment.commit, experiment.id, incumbent)
        event = self.ledger.append(DecisionMade(
            id=experiment.id, commit=experiment.commit, incumbent=incumbent, verdict=verdict,
            decision=decision, reason=reason, score=score))
        if verdict != Verdict.KEEP:
            self.executor.release(experiment.commit)
        self._write_views()
        self.observer.decided(event)
        delta = None
        if decision is not None and decision.effect is not None:
            delta = -decision.effect if self.program.direction == "minimize" else decision.effect
        self.researcher.observe(
            _proposal_of(experiment),
            Outcome(experiment_id=experiment.id, verdict=verdict, measured_delta=delta,
                    candidate_mean=experiment.mean(), reason=reason))

    # ---- proposing ---------------------------------------------------------------------

    def _context(self) -> ResearchContext:
        state = self.state
        target = self.program.target
        reference = state.reference(state.incumbent)
        sd, _ = pooled_sd(state.noise_groups())
        return ResearchContext(
            program_text=self.program.prose, target=target,
            incumbent_source=self.workspace.read(target, state.incumbent),
            incumbent_commit=state.incumbent,
            protected=self._protected_sources(state.incumbent),
            ledger_summary=ledger_summary(state, self.program.metric),
            metric=self.program.metric, direction=self.program.direction, noise_sd=sd,
            incumbent_value=sum(reference.values()) / len(reference) if reference else None,
            experiment_index=state.next_index, hypotheses=tuple(state.open_hypotheses()),
            workdir=self.workspace.path,
        )

    def _protected_sources(self, commit: str) -> dict[str, str]:
        sources = {}
        for path in self.program.protected:
            try:
                sources[path] = self.workspace.read(path, commit)
            except (KeyError, FileNotFoundError, ValueError):
                continue  # a protected path that is not in the repository has nothing to read
        return sources

    def _propose(self) -> Experiment | None:
        state = self.state
        experiment_id = f"e{state.next_index:04d}"
        context = self._context()
        self.observer.message(f"{experiment_id}: asking the {self.researcher.name} researcher")
        try:
            proposal = self.researcher.propose(context)
        except ProposalRejected as rejected:
            self._record_invalid(experiment_id, None, str(rejected), rejected.usage)
            return None
        gate = check_source(self.program.target, context.incumbent_source, proposal.source)
        if not gate.ok:
            self._record_invalid(experiment_id, proposal, gate.reason, proposal.usage)
            return None
        trailers = {"Nightshift-Hypothesis": proposal.hypothesis_id} if proposal.hypothesis_id else None
        message = candidate_message(proposal.description, proposal.hypothesis, proposal.prediction,
                                    experiment_id, trailers)
        commit = self.workspace.commit_candidate(self.program.target, proposal.source, message)
        self.ledger.append(ExperimentProposed(
            id=experiment_id, commit=commit, parent=state.incumbent,
            description=proposal.description, hypothesis=proposal.hypothesis,
            prediction=proposal.prediction, researcher=self.researcher.name,
            hypothesis_id=proposal.hypothesis_id, extra=proposal.extra, usage=proposal.usage))
        self.observer.message(f"{experiment_id} {commit[:8]}: {proposal.description}")
        return self.state.experiments[experiment_id]

    def _record_invalid(self, experiment_id: str, proposal: Proposal | None, reason: str,
                        usage) -> None:
        diff = ""
        incumbent = self.state.incumbent
        if proposal is not None:
            old = self.workspace.read(self.program.target, incumbent)
            diff = "".join(difflib.unified_diff(
                old.splitlines(keepends=True), proposal.source.splitlines(keepends=True),
                fromfile=f"a/{self.program.target}", tofile=f"b/{self.program.target}"))
        self.ledger.append(ExperimentInvalid(
            id=experiment_id, parent=incumbent, reason=reason,
            description=proposal.description if proposal else "(no usable proposal)",
            hypothesis=proposal.hypothesis if proposal else "",
            prediction=proposal.prediction if proposal else None,
            researcher=self.researcher.name,
            hypothesis_id=proposal.hypothesis_id if proposal else None, diff=diff, usage=usage))
        self.observer.message(f"{experiment_id}: invalid — {reason}")
        if proposal is not None:
            self.researcher.observe(proposal, Outcome(experiment_id, Verdict.INVALID, None, None, reason))

    def _write_views(self) -> None:
        write_tsv(self.state, self.ledger.dir, self.program.metric)


def _proposal_of(experiment: Experiment) -> Proposal:
    """Rebuild the proposal from the ledger, so `observe` works across a resume."""
    prediction = experiment.prediction or Prediction("same", 0.0, (0.0, 0.0), 0.5)
    return Proposal(source="", description=experiment.description, hypothesis=experiment.hypothesis,
                    prediction=prediction, hypothesis_id=experiment.hypothesis_id,
                    extra=experiment.extra)
