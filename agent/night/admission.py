"""What becomes of a ready proposal, or of a superseded candidate's diff, against today's
incumbent.

A proposal was made against the incumbent of its moment. If a keep moved the incumbent since,
its diff is rebased (three-way merge); a conflict asks the researcher again (up to a limit).
A candidate superseded by a keep comes back through `reapply`, its own path: its diff (its
commit against the incumbent it was measured on) merged onto the incumbent of the moment, or
dropped when it no longer applies. What is left must pass the gate (only the target changed,
and it parses). The loop records what they decided.
"""
from __future__ import annotations

import dataclasses
import difflib
import enum
from dataclasses import dataclass
from typing import Any, Mapping

from git import GitCommandError

from agent.night.proposals import Ready
from agent.record.events import Prediction, ProposalRebased
from agent.record.state import Experiment
from agent.researchers import Proposal
from agent.target.knobs import KnobError, knob_edit
from agent.workspace.gate import check_source
from agent.workspace.merge import three_way_merge
from agent.workspace.repo import Workspace, WorkspaceError, candidate_message


class Fate(enum.Enum):
    CANDIDATE = "candidate"   # commit it and measure it
    INVALID = "invalid"       # record why it cannot run
    ASK_AGAIN = "ask_again"   # it conflicts with the new incumbent: the researcher proposes again
    DROPPED = "dropped"       # a superseded candidate's diff that no longer applies


@dataclass(frozen=True)
class Admission:
    fate: Fate
    proposal: Proposal                      # as it will be committed: the rebased source
    reason: str = ""                        # why it is invalid
    rebased: ProposalRebased | None = None  # recorded first, whatever the fate


def admit(ready: Ready, experiment_id: str, incumbent: str, workspace: Workspace, target: str,
          max_asks: int, knobs_only: Mapping[str, str] | None = None) -> Admission:
    """What becomes of a ready proposal. `knobs_only` (program.md `edits: knobs`: the declared
    knobs, {} for the target's annotations) limits the edit to new values of those knobs."""
    proposal = ready.proposal
    assert proposal is not None, "a rejected proposal is recorded invalid before admission"
    current = workspace.read(target, incumbent)
    rebased = None
    if proposal.base and proposal.base != incumbent:
        unfit = _unfit_base(proposal.base, incumbent, workspace)
        if unfit:
            return Admission(Fate.INVALID, proposal, unfit)
    if ready.proposed_on != incumbent:
        merged = three_way_merge(workspace.read(target, ready.proposed_on), current, proposal.source)
        outcome = "conflict" if merged is None or merged == current else "rebased"
        rebased = ProposalRebased(id=experiment_id, proposed_on=ready.proposed_on, onto=incumbent,
                                  outcome=outcome)
        if outcome == "conflict":
            if proposal.base:   # the researcher chose its base: asking again gets another proposal
                return Admission(Fate.INVALID, proposal, (
                    f"made on {ready.proposed_on[:8]}, it conflicts with what was kept since "
                    f"(the incumbent is {incumbent[:8]}): check out the incumbent again and redo "
                    f"the edit there"), rebased)
            if ready.attempts >= max_asks:
                return Admission(Fate.INVALID, proposal, f"conflicted with a newer incumbent "
                                 f"{ready.attempts} times", rebased)
            return Admission(Fate.ASK_AGAIN, proposal, rebased=rebased)
        proposal = dataclasses.replace(proposal, source=merged)
    return _gated(proposal, current, target, knobs_only, rebased)


def _unfit_base(base: str, incumbent: str, workspace: Workspace) -> str | None:
    """Why a base a researcher named cannot carry its edit (None: it can): an edit is rebased
    from the incumbent or one of its ancestors, never from a commit the night did not keep."""
    try:
        if workspace.is_ancestor(base, incumbent):
            return None
    except (WorkspaceError, GitCommandError):   # not a commit of this repository at all
        return f"its base {base[:12]} is not a commit of this repository"
    return (f"its base {base[:8]} is neither the incumbent {incumbent[:8]} nor one of its "
            f"ancestors (a discarded candidate?): check out the incumbent and edit that")


def reapply(superseded: Experiment, experiment_id: str, incumbent: str, workspace: Workspace,
            target: str, knobs_only: Mapping[str, str] | None = None) -> Admission:
    """What becomes of a superseded candidate's diff: merged onto `incumbent` (the proposal
    rebuilt from the ledger's record of it: its description, hypothesis, prediction, extra),
    or dropped when it conflicts or the incumbent already holds it."""
    current = workspace.read(target, incumbent)
    merged = three_way_merge(workspace.read(target, superseded.parent), current,
                             workspace.read(target, superseded.commit))
    outcome = "conflict" if merged is None or merged == current else "rebased"
    rebased = ProposalRebased(id=experiment_id, proposed_on=superseded.parent, onto=incumbent,
                              outcome=outcome, source=superseded.id)
    proposal = Proposal(source=merged or "", description=superseded.description,
                        hypothesis=superseded.hypothesis,
                        prediction=superseded.prediction or Prediction("same", 0.0, (0.0, 0.0), 0.5),
                        hypothesis_id=superseded.hypothesis_id, extra=dict(superseded.extra))
    if outcome == "conflict":
        return Admission(Fate.DROPPED, proposal, rebased=rebased)
    return _gated(proposal, current, target, knobs_only, rebased)


def _gated(proposal: Proposal, current: str, target: str, knobs_only: Mapping[str, str] | None,
           rebased: ProposalRebased | None) -> Admission:
    """A candidate, unless the gate (or `edits: knobs`) refuses its source."""
    refusal = edit_refusal(current, proposal.source, target, knobs_only)
    if refusal is not None:
        return Admission(Fate.INVALID, proposal, refusal, rebased)
    return Admission(Fate.CANDIDATE, proposal, rebased=rebased)


def edit_refusal(current: str | None, source: str, target: str,
                 knobs_only: Mapping[str, str] | None) -> str | None:
    """Why `source` may not replace `current` as the target (the gate, then `edits: knobs`),
    or None. The night's rule; `nightshift propose` asks it too, before filing."""
    gate = check_source(target, current, source)
    if not gate.ok:
        return gate.reason
    if knobs_only is not None:
        try:
            knob_edit(current or "", source, path=target, declared=knobs_only)
        except KnobError as error:
            return str(error)
    return None


def commit_message(proposal: Proposal, experiment_id: str, rebased_from: str | None = None) -> str:
    """The candidate commit's message, with the hypothesis it tests and the candidate it
    re-applies as trailers."""
    trailers: dict[str, Any] = {}
    if proposal.hypothesis_id:
        trailers["Nightshift-Hypothesis"] = proposal.hypothesis_id
    if rebased_from:
        trailers["Nightshift-Rebased-From"] = rebased_from
    return candidate_message(proposal.description, proposal.hypothesis, proposal.prediction,
                             experiment_id, trailers or None)


def proposal_diff(old_source: str, proposal: Proposal, target: str) -> str:
    """The unified diff an invalid experiment records (what the researcher wanted to run)."""
    return "".join(difflib.unified_diff(
        old_source.splitlines(keepends=True), proposal.source.splitlines(keepends=True),
        fromfile=f"a/{target}", tofile=f"b/{target}"))
