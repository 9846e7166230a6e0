"""Git and the ledger agree again after a crash: the ledger is the truth, git catches up.

Every change to the branch or the refs happens after the ledger line that decides it, so a
harness killed between the two leaves git one step behind, never ahead: a keep recorded but
not yet fast-forwarded, a discard recorded but its pending ref not yet moved, a candidate
committed whose proposal never reached the ledger. `reconcile` repairs each case, and says
what it did, before the night goes on; no incumbent is ever filed as an orphan.
"""
from __future__ import annotations

from agent.record.events import Verdict
from agent.record.state import LoopState
from agent.workspace.repo import Workspace


def reconcile(workspace: Workspace, state: LoopState) -> list[str]:
    """Bring the branch and refs of `workspace` in line with `state`; the messages of what
    was repaired (empty when nothing was)."""
    notes: list[str] = []
    known = {e.commit: e for e in state.experiments.values() if e.commit}
    pending = workspace.pending_refs()
    head = workspace.head()
    if head != state.incumbent:
        if head in known or head == state.base_commit or _descends(workspace, state.incumbent, head):
            # a keep recorded before the branch moved, or (an older harness) the candidate
            # that was being measured sat on the branch: the ledger says where it belongs
            workspace.reset_to(state.incumbent)
            notes.append(f"branch moved from {head[:8]} to the incumbent {state.incumbent[:8]}")
        else:
            notes.append(f"branch head {head[:8]} was not in the ledger; kept it under "
                         f"{file_orphan_head(workspace, head, state.incumbent)}")
    for name, sha in pending.items():
        experiment = state.experiments.get(name)
        if experiment is None or experiment.commit != sha:
            workspace.discard(sha, f"orphan-{sha[:8]}", state.incumbent)
            workspace.release(name)
            notes.append(f"candidate {sha[:8]} was committed but never recorded; kept it under "
                         f"refs/nightshift/{workspace.tag}/discarded/orphan-{sha[:8]}")
        elif experiment.decided:
            _settle(workspace, state, experiment.id, sha)
            notes.append(f"{experiment.id}: its recorded {experiment.verdict} is now in git too")
    for experiment in state.pending_experiments():
        if experiment.commit and experiment.id not in pending:
            workspace.hold(experiment.commit, experiment.id)   # an older harness held it on the branch
    return notes


def file_orphan_head(workspace: Workspace, head: str, incumbent: str) -> str:
    """A branch head the night did not make (a commit behind its back, an older harness's
    leftover) filed under a discarded ref, never lost and never a candidate, and the branch back
    at `incumbent`. Returns the ref it is kept under."""
    name = f"orphan-{head[:8]}"
    workspace.discard(head, name, head)
    workspace.reset_to(incumbent)
    return f"refs/nightshift/{workspace.tag}/discarded/{name}"


def _settle(workspace: Workspace, state: LoopState, experiment_id: str, sha: str) -> None:
    if state.experiments[experiment_id].verdict == Verdict.KEEP:
        workspace.release(experiment_id)   # the branch already points at it (above)
    else:
        workspace.discard(sha, experiment_id, state.incumbent)


def _descends(workspace: Workspace, descendant: str | None, ancestor: str) -> bool:
    return descendant is not None and workspace.is_ancestor(ancestor, descendant)
