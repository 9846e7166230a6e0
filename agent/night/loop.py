"""The research loop: propose → gate → commit → run → decide → keep or revert → record.

Everything the loop knows lives in the ledger, so each step starts from `fold(events)`:
a loop killed at any point resumes where it stopped (a pending experiment continues with
the seeds it still needs; an incumbent missing reference runs gets them first).
"""
from __future__ import annotations

import difflib
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.decide.decision import Decision, DecisionRule, Evidence, RunMore, Verdict, pooled_sd
from agent.workspace.gate import check_source
from agent.record.ledger import Experiment, Ledger, LoopState, fold, write_tsv
from agent.researchers import (Outcome, Prediction, Proposal, ProposalRejected, ResearchContext,
                               Researcher, ResearcherError)
from agent.night.runs import RunExecutor
from agent.decide.scoring import score_prediction
from agent.record.summary import ledger_summary
from agent.workspace.repo import Workspace, candidate_message

MAX_REFERENCE_RETRIES = 2
EXIT_LOOP = 4          # the loop could not go on (baseline failing, workspace broken)
EXIT_RESEARCHER = 3    # the researcher stopped (budget cap, API unavailable, script exhausted)


class LoopError(RuntimeError):
    """The loop cannot go on (the baseline fails, the workspace is broken). Says why."""


class Observer(Protocol):
    """What the loop tells a display. Every method is optional to act on."""

    def message(self, text: str) -> None: ...
    def run_started(self, run: dict[str, Any], budget_s: float, label: str) -> None: ...
    def output(self, line: str) -> None: ...
    def run_finished(self, run: dict[str, Any]) -> None: ...
    def decided(self, event: dict[str, Any]) -> None: ...


class QuietObserver:
    def message(self, text: str) -> None: pass
    def run_started(self, run: dict[str, Any], budget_s: float, label: str) -> None: pass
    def output(self, line: str) -> None: pass
    def run_finished(self, run: dict[str, Any]) -> None: pass
    def decided(self, event: dict[str, Any]) -> None: pass


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
    program: Any                 # agent.program.Program
    workspace: Workspace
    ledger: Ledger
    executor: RunExecutor
    researcher: Researcher
    rule: DecisionRule
    observer: Observer = field(default_factory=QuietObserver)
    facts: dict[str, Any] = field(default_factory=dict)   # recorded with loop_started/resumed

    # ---- the night ---------------------------------------------------------------------

    def run(self, stop: StopRules) -> str:
        """Run until a stop rule holds. Returns the reason it stopped. Ctrl-C propagates
        after the ledger is closed cleanly."""
        state = self._start()
        decided_here = 0
        try:
            while True:
                reason = stop.reached(decided_here)
                if reason:
                    break
                self._ensure_reference(state, stop)
                state = self.state()
                experiment = state.pending or self._propose(state)
                if experiment is not None and not experiment.decided:
                    if not self._evaluate(experiment, stop):
                        reason = stop.reached(decided_here) or "time is up"
                        break
                decided_here += 1
                state = self.state()
        except KeyboardInterrupt:
            self.ledger.append("loop_stopped", reason="interrupted", exit_code=130)
            self._write_views()
            raise
        except (ResearcherError, LoopError) as error:
            self.ledger.append("loop_stopped", reason=f"{type(error).__name__}: {error}",
                               exit_code=EXIT_RESEARCHER if isinstance(error, ResearcherError) else EXIT_LOOP)
            self._write_views()
            raise
        self.ledger.append("loop_stopped", reason=reason, exit_code=0)
        self._write_views()
        return reason

    def state(self) -> LoopState:
        return fold(self.ledger.events())

    def _start(self) -> LoopState:
        state = self.state()
        if not state.started:
            self.ledger.append("loop_started", tag=self.tag, base_commit=self.workspace.head(),
                               program=self.program.to_dict(), **self.facts)
            self.observer.message(f"started tag {self.tag} at {self.workspace.head()[:8]}")
        else:
            self.ledger.append("loop_resumed", tag=self.tag, **self.facts)
            self.observer.message(f"resuming tag {self.tag}: {len(state.experiments)} experiments "
                                  f"so far, incumbent {state.incumbent[:8]}")
        state = self.state()
        self._align_branch(state)
        return state

    def _align_branch(self, state: LoopState) -> None:
        """After a crash the branch may hold a commit the ledger never heard of."""
        expected = state.pending.commit if state.pending and state.pending.commit else state.incumbent
        head = self.workspace.head()
        if head != expected:
            self.workspace.discard(head, f"orphan-{head[:8]}", state.incumbent)
            if expected != state.incumbent:
                self.workspace.reset_to(expected)
            self.observer.message(f"branch head {head[:8]} was not in the ledger; kept it under "
                                  f"refs/nightshift/{self.tag}/discarded/orphan-{head[:8]}")

    # ---- measuring ---------------------------------------------------------------------

    def _ensure_reference(self, state: LoopState, stop: StopRules) -> None:
        """Measure the incumbent on the rule's baseline seeds: its fresh reference."""
        incumbent = state.incumbent
        for seed in self.rule.baseline_seeds():
            for attempt in range(MAX_REFERENCE_RETRIES):
                if seed in self.state().reference(incumbent):
                    break
                run = self.measure(incumbent, seed, "reference", None, "incumbent reference")
                if run["status"] == "ok":
                    break
            else:
                raise LoopError(
                    f"the incumbent {incumbent[:8]} failed on seed {seed} "
                    f"({run['status']}: {run.get('reason', '')}); the baseline must run before "
                    f"anything can be compared with it. Log: results/{self.tag}/{run.get('log')}")

    def measure(self, commit: str, seed: int, role: str, experiment: str | None,
                label: str) -> dict[str, Any]:
        """Run `commit` on `seed` in the sandbox, showing progress; returns the ledger event."""
        placeholder = {"commit": commit, "seed": seed, "role": role, "experiment": experiment}
        self.observer.run_started(placeholder, self.executor.plan.budget_s, label)
        run = self.executor.run(commit, seed, role, experiment, on_output=self.observer.output)
        self.observer.run_finished(run)
        return run

    def _evidence(self, state: LoopState, experiment: Experiment) -> Evidence:
        sd, dof = pooled_sd(state.noise_groups())
        return Evidence(
            direction=self.program.direction,
            candidate=state.ok_values(experiment.commit, role="candidate"),
            reference=state.reference(experiment.parent),
            noise_sd=sd, noise_dof=dof,
            history=tuple(d.get("decision", {}) | {"verdict": d["verdict"]}
                          for d in state.decisions if d.get("decision")),
        )

    def _evaluate(self, experiment: Experiment, stop: StopRules) -> bool:
        """Run the seeds the rule asks for, then decide. False if stopped before deciding."""
        while True:
            state = self.state()
            evidence = self._evidence(state, experiment)
            step = self.rule.next(evidence)
            if isinstance(step, Decision):
                self._decide(experiment, step.verdict.value, step.to_dict(), step.reason)
                return True
            for seed in step.reference_seeds:
                if seed not in evidence.reference:
                    run = self.measure(experiment.parent, seed, "reference", None, "incumbent reference")
                    if run["status"] != "ok":
                        raise LoopError(f"the incumbent failed on seed {seed}: {run['status']}")
            for seed in step.candidate_seeds:
                if seed in evidence.candidate:
                    continue
                if stop.time_is_up():
                    return False
                run = self.measure(experiment.commit, seed, "candidate", experiment.id,
                                experiment.description)
                if run["status"] != "ok":
                    self._decide(experiment, run["status"], None,
                                 f"{run['status']} on seed {seed}: {run.get('reason', '')}")
                    return True

    def _decide(self, experiment: Experiment, verdict: str, decision: dict | None, reason: str) -> None:
        state = self.state()
        keep = verdict == Verdict.KEEP.value
        score = score_prediction(experiment.prediction, decision or {}, self.program.direction)
        if keep:
            self.workspace.keep(experiment.commit)
        else:
            self.workspace.discard(experiment.commit, experiment.id, state.incumbent)
        event = self.ledger.append(
            "decision", id=experiment.id, commit=experiment.commit, incumbent=state.incumbent,
            verdict=verdict, decision=decision, reason=reason,
            score=score.to_dict() if score else None)
        if not keep:
            self.executor.release(experiment.commit)
        self._write_views()
        self.observer.decided(event)
        candidate = list(state.ok_values(experiment.commit, role="candidate").values())
        delta = None
        if decision and decision.get("effect") is not None:
            delta = -decision["effect"] if self.program.direction == "minimize" else decision["effect"]
        self.researcher.observe(
            _proposal_of(experiment),
            Outcome(experiment_id=experiment.id, verdict=verdict, measured_delta=delta,
                    candidate_mean=statistics.fmean(candidate) if candidate else None,
                    reason=reason))

    # ---- proposing ---------------------------------------------------------------------

    def _context(self, state: LoopState) -> ResearchContext:
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
            incumbent_value=statistics.fmean(reference.values()) if reference else None,
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

    def _propose(self, state: LoopState) -> Experiment | None:
        experiment_id = f"e{state.next_index:04d}"
        context = self._context(state)
        self.observer.message(f"{experiment_id}: asking the {self.researcher.name} researcher")
        try:
            proposal = self.researcher.propose(context)
        except ProposalRejected as rejected:
            self._record_invalid(experiment_id, state, None, str(rejected))
            return None
        gate = check_source(self.program.target, context.incumbent_source, proposal.source)
        if not gate.ok:
            self._record_invalid(experiment_id, state, proposal, gate.reason)
            return None
        trailers = {"Nightshift-Hypothesis": proposal.hypothesis_id} if proposal.hypothesis_id else None
        message = candidate_message(proposal.description, proposal.hypothesis, proposal.prediction,
                                    experiment_id, trailers)
        commit = self.workspace.commit_candidate(self.program.target, proposal.source, message)
        self.ledger.append(
            "experiment_proposed", id=experiment_id, commit=commit, parent=state.incumbent,
            description=proposal.description, hypothesis=proposal.hypothesis,
            prediction=proposal.prediction.to_dict(), researcher=self.researcher.name,
            hypothesis_id=proposal.hypothesis_id, extra=proposal.extra)
        self.observer.message(f"{experiment_id} {commit[:8]}: {proposal.description}")
        return self.state().experiments[experiment_id]

    def _record_invalid(self, experiment_id: str, state: LoopState, proposal: Proposal | None,
                        reason: str) -> None:
        diff = ""
        if proposal is not None:
            old = self.workspace.read(self.program.target, state.incumbent)
            diff = "".join(difflib.unified_diff(
                old.splitlines(keepends=True), proposal.source.splitlines(keepends=True),
                fromfile=f"a/{self.program.target}", tofile=f"b/{self.program.target}"))
        self.ledger.append(
            "experiment_invalid", id=experiment_id, parent=state.incumbent, reason=reason,
            description=proposal.description if proposal else "(no usable proposal)",
            hypothesis=proposal.hypothesis if proposal else "",
            prediction=proposal.prediction.to_dict() if proposal else None,
            researcher=self.researcher.name,
            hypothesis_id=proposal.hypothesis_id if proposal else None, diff=diff)
        self.observer.message(f"{experiment_id}: invalid — {reason}")
        if proposal is not None:
            self.researcher.observe(proposal, Outcome(experiment_id, "invalid", None, None, reason))

    def _write_views(self) -> None:
        write_tsv(self.state(), self.ledger.dir, self.program.metric)


def _proposal_of(experiment: Experiment) -> Proposal:
    """Rebuild the proposal from the ledger, so `observe` works across a resume."""
    prediction = Prediction.from_dict(experiment.prediction) if experiment.prediction else \
        Prediction("same", 0.0, (0.0, 0.0), 0.5)
    return Proposal(source="", description=experiment.description, hypothesis=experiment.hypothesis,
                    prediction=prediction, hypothesis_id=experiment.hypothesis_id,
                    extra=experiment.extra)
