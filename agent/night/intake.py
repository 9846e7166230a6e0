"""A night's proposals, from asked to admitted: what the loop turns into candidates.

The researchers are asked (`proposal_asked`), answer on their own threads (`Ready`, recorded as
`proposal_ready`), and the oldest answer is admitted when a worker has room for a new
candidate (agent/night/admission.py: rebased onto a newer incumbent, asked again on a
conflict, gated), committed and recorded (`experiment_proposed`), or recorded invalid. A
candidate a keep superseded is its own item, ahead of new proposals: its diff merged onto the
incumbent of the moment (`admission.reapply`), or dropped with the conflict recorded.
"""
from __future__ import annotations

import uuid
from typing import Any, Callable

from agent.night.admission import Fate, admit, commit_message, proposal_diff, reapply
from agent.night.proposals import Arm, Ready, Researchers
from agent.program import Program
from agent.run.observer import Observer
from agent.record.events import (DecisionMade, ExperimentInvalid, ExperimentProposed,
                                 ProposalAsked, ProposalReady, ProposalRebased, Usage, Verdict)
from agent.record.ledger import Ledger
from agent.record.state import Experiment
from agent.researchers import Outcome, Proposal, ResearchContext, ResearcherError
from agent.workspace.merge import three_way_merge
from agent.workspace.repo import Workspace

MAX_ASKS = 3           # a proposal that keeps conflicting with a moving incumbent is given up


class Intake:
    def __init__(self, *, ledger: Ledger, workspace: Workspace, program: Program,
                 proposals: Researchers, observer: Observer, researcher: str,
                 context: Callable[[int], ResearchContext]) -> None:
        """`researcher`: the night's researcher's name (the default author of a proposal);
        `context(offset)`: what a researcher is shown, `offset` proposals ahead of the night."""
        self.ledger, self.workspace, self.program = ledger, workspace, program
        self.proposals, self.observer, self.researcher = proposals, observer, researcher
        self.context = context
        self.ready: list[Ready] = []
        self.reapplies: list[Experiment] = []     # superseded candidates whose diffs merge

    @property
    def waiting(self) -> int:
        """Proposals asked for and not yet admitted."""
        return self.proposals.preparing + len(self.ready)

    def has_next(self) -> bool:
        return bool(self.reapplies or self.ready)

    def received(self, ready: Ready) -> ResearcherError | None:
        """A researcher's answer, off the loop's event queue: recorded, and kept unless it is
        an error that stops the night (returned)."""
        self.proposals.received(ready)
        if ready.request_id is not None:
            outcome = "error" if ready.error else "rejected" if ready.rejected else "proposal"
            self.ledger.append(ProposalReady(
                request_id=ready.request_id, researcher=ready.researcher, outcome=outcome,
                description=ready.proposal.description if ready.proposal else "",
                duration_s=ready.duration_s))
        if ready.error is not None:
            return ready.error
        self.ready.append(ready)
        return None

    def ask_as_needed(self, overlap: bool, idle: bool, room: int | None) -> None:
        """Keep proposals in preparation while runs train (`overlap`), or ask for one only when
        nothing runs (`idle`); never more than `room` (what --max-experiments leaves)."""
        asked = self.waiting
        wanted = (self.proposals.capacity - asked if overlap else
                  1 if idle and asked == 0 and not self.reapplies else 0)
        if room is not None:
            wanted = min(wanted, room - asked)
        self._ask_researchers(wanted)

    def _ask_researchers(self, wanted: int) -> None:
        """Ask for `wanted` more proposals, each of the arm furthest below its share."""
        proposed: dict[str, int] = {}
        for experiment in self.state.experiments.values():
            proposed[experiment.researcher] = proposed.get(experiment.researcher, 0) + 1
        for ready in self.ready:
            proposed[ready.researcher] = proposed.get(ready.researcher, 0) + 1
        for _ in range(wanted):
            arm = self.proposals.next_arm(proposed)
            if arm is None:
                return
            self.ask(arm)

    def ask(self, arm: Arm, attempts: int = 1) -> None:
        """Ask `arm` for a proposal, recorded first (proposal_asked): the live page shows it
        being written until its proposal_ready."""
        context = self.context(self.proposals.preparing + len(self.ready))
        request_id = uuid.uuid4().hex[:10]
        self.ledger.append(ProposalAsked(request_id=request_id, researcher=arm.name,
                                         incumbent=context.incumbent_commit, attempt=attempts))
        self.proposals.propose(context, attempts=attempts, arm=arm, request_id=request_id)

    def supersede(self, kept: Experiment, old: str) -> list[Experiment]:
        """Candidates measured against `old` cannot be decided on that evidence: each is
        recorded superseded (its commit filed under its discarded ref), its researcher told,
        and its diff queued to be re-applied onto the new incumbent, ahead of new proposals,
        when it merges. Returns them (their runs are the loop's to stop)."""
        target = self.program.target
        new_source, old_source = self.workspace.read(target, kept.commit), self.workspace.read(target, old)
        superseded = [e for e in self.state.pending_experiments() if e.parent != kept.commit]
        for other in superseded:
            merged = three_way_merge(old_source, new_source, self.workspace.read(target, other.commit))
            again = merged is not None and merged != new_source
            why = ("its diff is re-applied onto the new incumbent as a new candidate" if again else
                   "its diff does not apply to the new incumbent: not re-proposed"
                   if merged is None else "the new incumbent already holds its change")
            self.ledger.append(DecisionMade(
                id=other.id, commit=other.commit, incumbent=old, verdict=Verdict.SUPERSEDED,
                reason=f"{kept.id} was kept while this ran against {old[:8]}; {why}"))
            self.workspace.discard(other.commit, other.id, kept.commit)
            if merged is None:
                self.ledger.append(ProposalRebased(id=other.id, proposed_on=old, onto=kept.commit,
                                                   outcome="conflict", source=other.id))
            elif again:
                self.reapplies.append(other)   # merged onto the incumbent of its admission
            self.proposals.observe(other, Outcome(
                experiment_id=other.id, verdict=Verdict.SUPERSEDED, measured_delta=None,
                candidate_mean=None, reason=why))
        return superseded

    def admit_next(self) -> Experiment | None:
        """The next re-applied diff or ready proposal as an experiment: a candidate to measure
        (undecided) or an invalid one (decided); None when nothing became an experiment."""
        if self.reapplies:
            superseded = self.reapplies.pop(0)
            return self._candidate(reapply(superseded, self._next_id(), self.state.incumbent,
                                          self.workspace, self.program.target, self._knobs_only()),
                                   superseded.researcher, rebased_from=superseded.id)
        ready = self.ready.pop(0)
        if ready.rejected is not None:
            return self._invalid(ready.researcher, None, str(ready.rejected), ready.rejected.usage,
                                 ready.rejected.extra)
        incumbent = self.state.incumbent
        admission = admit(ready, self._next_id(), incumbent, self.workspace, self.program.target,
                          MAX_ASKS, self._knobs_only())
        if admission.fate is Fate.ASK_AGAIN:
            self.ledger.append(admission.rebased)
            self.observer.message(f"a proposal made against {ready.proposed_on[:8]} conflicts "
                                  f"with the new incumbent {incumbent[:8]}: asking again")
            self.ask(self.proposals.choose(name=ready.researcher), attempts=ready.attempts + 1)
            return None
        return self._candidate(admission, ready.researcher)

    @property
    def state(self):
        return self.ledger.state

    def _next_id(self) -> str:
        return f"e{self.state.next_index:04d}"

    def _knobs_only(self) -> dict[str, str] | None:
        return dict(self.program.knobs) if self.program.edits == "knobs" else None

    def _candidate(self, admission, researcher: str, rebased_from: str | None = None) -> Experiment | None:
        if admission.rebased is not None:
            self.ledger.append(admission.rebased)
        proposal = admission.proposal
        if admission.fate is Fate.DROPPED:
            return None   # a superseded candidate's diff that no longer applies: recorded so
        if admission.fate is Fate.INVALID:
            return self._invalid(researcher, proposal, admission.reason, proposal.usage)
        experiment_id, incumbent, target = self._next_id(), self.state.incumbent, self.program.target
        commit = self.workspace.commit_candidate(target, proposal.source,
                                                 commit_message(proposal, experiment_id, rebased_from),
                                                 parent=incumbent, name=experiment_id)
        self.ledger.append(ExperimentProposed(
            id=experiment_id, commit=commit, parent=incumbent,
            description=proposal.description, hypothesis=proposal.hypothesis,
            prediction=proposal.prediction, researcher=researcher or self.researcher,
            hypothesis_id=proposal.hypothesis_id, extra=proposal.extra,
            usage=proposal.usage))
        self.observer.message(f"{experiment_id} {commit[:8]}: {proposal.description}")
        return self.state.experiments[experiment_id]

    def _invalid(self, researcher: str, proposal: Proposal | None, reason: str, usage: Usage | None,
                 extra: dict[str, Any] | None = None) -> Experiment:
        """Record an experiment that never became a run, and tell its researcher."""
        experiment_id, incumbent = self._next_id(), self.state.incumbent
        diff = "" if proposal is None else proposal_diff(
            self.workspace.read(self.program.target, incumbent), proposal, self.program.target)
        self.ledger.append(ExperimentInvalid(
            id=experiment_id, parent=incumbent, reason=reason,
            description=proposal.description if proposal else "(no usable proposal)",
            hypothesis=proposal.hypothesis if proposal else "",
            prediction=proposal.prediction if proposal else None,
            researcher=researcher or self.researcher,
            hypothesis_id=proposal.hypothesis_id if proposal else None, diff=diff, usage=usage,
            extra=dict(proposal.extra) if proposal else dict(extra or {})))
        self.observer.message(f"{experiment_id}: invalid — {reason}")
        experiment = self.state.experiments[experiment_id]
        if proposal is not None:
            self.proposals.observe(experiment, Outcome(experiment_id, Verdict.INVALID, None, None, reason))
        return experiment
