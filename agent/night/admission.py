"""What becomes of a ready proposal against today's incumbent.

A proposal was made against the incumbent of its moment. If a keep moved the incumbent since,
its diff is rebased (three-way merge); a conflict asks the researcher again (up to a limit), and
a superseded candidate's diff that no longer applies is dropped. What is left must pass the gate
(only the target changed, and it parses). The loop records what `admit` decided.
"""
from __future__ import annotations

import dataclasses
import difflib
import enum
from dataclasses import dataclass
from typing import Any, Mapping

from agent.night.proposals import Ready
from agent.record.events import ProposalRebased
from agent.researchers import Proposal
from agent.researchers.knobs import KnobError, knob_edit
from agent.workspace.gate import check_source
from agent.workspace.merge import three_way_merge
from agent.workspace.repo import Workspace, candidate_message


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
    if ready.proposed_on != incumbent:
        merged = three_way_merge(workspace.read(target, ready.proposed_on), current, proposal.source)
        outcome = "conflict" if merged is None or merged == current else "rebased"
        rebased = ProposalRebased(id=experiment_id, proposed_on=ready.proposed_on, onto=incumbent,
                                  outcome=outcome, source=ready.source_experiment)
        if outcome == "conflict":
            if ready.source_experiment is not None:
                return Admission(Fate.DROPPED, proposal, rebased=rebased)
            if ready.attempts >= max_asks:
                return Admission(Fate.INVALID, proposal, f"conflicted with a newer incumbent "
                                 f"{ready.attempts} times", rebased)
            return Admission(Fate.ASK_AGAIN, proposal, rebased=rebased)
        proposal = dataclasses.replace(proposal, source=merged)
    elif ready.source_experiment is not None:
        rebased = ProposalRebased(id=experiment_id, proposed_on=ready.proposed_on, onto=incumbent,
                                  outcome="rebased", source=ready.source_experiment)
    gate = check_source(target, current, proposal.source)
    if not gate.ok:
        return Admission(Fate.INVALID, proposal, gate.reason, rebased)
    if knobs_only is not None:
        try:
            knob_edit(current, proposal.source, path=target, declared=knobs_only)
        except KnobError as error:
            return Admission(Fate.INVALID, proposal, str(error), rebased)
    return Admission(Fate.CANDIDATE, proposal, rebased=rebased)


def commit_message(ready: Ready, proposal: Proposal, experiment_id: str) -> str:
    """The candidate commit's message, with the hypothesis it tests and the candidate it
    re-applies as trailers."""
    trailers: dict[str, Any] = {}
    if proposal.hypothesis_id:
        trailers["Nightshift-Hypothesis"] = proposal.hypothesis_id
    if ready.source_experiment:
        trailers["Nightshift-Rebased-From"] = ready.source_experiment
    return candidate_message(proposal.description, proposal.hypothesis, proposal.prediction,
                             experiment_id, trailers or None)


def proposal_diff(old_source: str, proposal: Proposal, target: str) -> str:
    """The unified diff an invalid experiment records (what the researcher wanted to run)."""
    return "".join(difflib.unified_diff(
        old_source.splitlines(keepends=True), proposal.source.splitlines(keepends=True),
        fromfile=f"a/{target}", tofile=f"b/{target}"))
