"""What an agent does to a night, each operation once: start it, check out the incumbent, propose
an edit, wait for a verdict, read the status or one experiment, end the night.

Two front ends call these: the command line (agent/cli/agents.py, `nightshift status` and
`show`, `nightshift run --detach`) and the MCP server (mcp_server.py). Each operation returns
the document `--json` prints (its JSON Schema in schemas/, docs/json.md); each refusal is an
`OperationError` carrying the message the command line prints and the exit code it exits with,
so both front ends check the same things, in the same order, and say the same words.

Nothing here prints: stdout is the caller's (the MCP server's is its protocol channel).
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from agent.program import Program, ProgramError, load_program
from agent.record.events import ExitCode
from agent.record.ledger import LEDGER_FILE

WAIT_POLL_S = 0.5
LAUNCH_S = 10.0
STARTING_S = 600.0    # a night's start: its data prepared, its view scanned, then loop_started
START_POLL_S = 0.2
NIGHT_LOG = "night.log"
LOG_TAIL_LINES = 15

CHECKOUT_SCHEMA = "nightshift.checkout/1"
PROPOSED_SCHEMA = "nightshift.proposed/1"
DONE_SCHEMA = "nightshift.done/1"
STARTED_SCHEMA = "nightshift.started/1"

# What each of a proposal's fields is: the command line's --help and the MCP tools' input
# schemas say the same.
PROPOSAL_FIELDS = {
    "message": "One line: what the change is (results.tsv and the commit subject).",
    "hypothesis": "Why it should move the metric.",
    "predict": "improve | worsen | same: the direction you expect, registered before the run.",
    "delta": "Expected candidate minus incumbent, in metric units (negative improves a "
             "minimised metric).",
    "confidence": "Your probability that the interval holds the measured delta, in (0, 1).",
    "rationale": "What the prediction rests on.",
    "agent": "Who proposes, when several agents share a night.",
}


class OperationError(Exception):
    """An operation refused or failed: `message` is what the command line prints after
    `error:` (and what an MCP tool error says), `code` the exit code (`ExitCode`)."""

    def __init__(self, message: str, code: int = ExitCode.BAD_INPUT) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# ---- the program and the tag ----------------------------------------------------------------

def open_program(path: Path, overrides: Optional[dict[str, Any]] = None) -> Program:
    """program.md with `overrides` (None values skipped), or OperationError naming the file,
    line and field."""
    try:
        return load_program(path, {k: v for k, v in (overrides or {}).items() if v is not None})
    except FileNotFoundError:
        raise OperationError(f"{path}: no such file. Run from the repository that holds "
                             "program.md, or pass --program PATH.") from None
    except ProgramError as error:
        raise OperationError(str(error)) from None


def tag_folder(program: Program, tag: Optional[str]) -> Path:
    """results/<tag>/ (default: today's tag), whether or not a night ever ran there."""
    from agent.night.session import default_tag
    from agent.run.plan import results_dir

    return results_dir(program, tag or default_tag())


def existing_night(program: Program, tag: Optional[str]) -> Path:
    """The results folder of a loop that has started, or OperationError naming the tags that
    exist."""
    folder = tag_folder(program, tag)
    if not (folder / LEDGER_FILE).exists():
        known = sorted(p.parent.name for p in (program.root / "results").glob(f"*/{LEDGER_FILE}"))
        raise OperationError(f"no loop at {folder}; start one with `nightshift run --tag "
                             f"{folder.name}`. Known tags: {', '.join(known) or 'none'}.")
    return folder


def started_night(program: Program, tag: Optional[str], started_within: float = 0.0):
    """(the tag's results folder, the ledger's state), or OperationError naming the tags.
    `started_within`: how long to wait for a night that holds the tag's lock to record its
    start (an agent's first checkout, right after it launched the night)."""
    from agent.preflight.lock import live_holder
    from agent.record.ledger import read_snapshot

    folder = tag_folder(program, tag)
    began = time.monotonic()
    while True:
        snapshot = read_snapshot(folder)
        if snapshot is not None and snapshot.state.incumbent is not None:
            return folder, snapshot.state
        waited = time.monotonic() - began
        # a night launched a moment ago may not hold the lock yet: LAUNCH_S of grace for that
        starting = live_holder(folder) is not None or waited < min(LAUNCH_S, started_within)
        if waited >= started_within or not starting:
            break
        time.sleep(WAIT_POLL_S)
    folder = existing_night(program, tag)      # refuses naming the tags when there is no ledger
    return folder, read_snapshot(folder).state


def night_running(folder: Path) -> bool:
    from agent.preflight.lock import live_holder

    return live_holder(folder) is not None


# ---- reading ----------------------------------------------------------------------------------

def status(program: Program, tag: Optional[str]) -> dict[str, Any]:
    """`nightshift status --json`: the night at a glance (nightshift.status/1)."""
    from agent.interface.reading import read_night
    from agent.interface.views import status_view

    return status_view(read_night(program, existing_night(program, tag)))


def show(program: Program, tag: Optional[str], experiment: str) -> dict[str, Any]:
    """`nightshift show ID --json`: one experiment in full (nightshift.experiment/1); `ID` may
    be `incumbent` or `base`."""
    from agent.interface.reading import git_diff, read_night
    from agent.interface.views import UnknownExperiment, experiment_view

    night = read_night(program, existing_night(program, tag))
    try:
        return experiment_view(night, experiment, git_diff(program.root))
    except UnknownExperiment as error:
        raise OperationError(str(error)) from None


# ---- driving ----------------------------------------------------------------------------------

def start_night(program: Program, tag: Optional[str], run_args: list[str]) -> dict[str, Any]:
    """`nightshift run --detach`: `python -m agent.cli run_args...` (a `run` command line
    without --detach; `--tag` is added) in a session of its own, so that the shell of the agent
    that asked, which ends its command's process group, cannot end the night; its output
    appended to results/<tag>/night.log. Returns once the night holds the tag's lock
    (nightshift.started/1); when it ended first, OperationError with its exit code and the last
    lines it wrote (a tag already held: the holder, exit 5)."""
    from agent.preflight.lock import live_holder

    folder = tag_folder(program, tag)
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / NIGHT_LOG
    argv = list(run_args)
    if "--tag" not in argv:
        argv += ["--tag", folder.name]
    with open(log, "ab") as out:
        written_before = out.tell()
        child = subprocess.Popen([sys.executable, "-m", "agent.cli", *argv], stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    while child.poll() is None:
        holder = live_holder(folder)
        if holder is not None and holder.pid == child.pid:
            return {"schema": STARTED_SCHEMA, "tag": folder.name, "pid": child.pid, "log": str(log)}
        time.sleep(START_POLL_S)
    with open(log, "rb") as written:          # its own lines, not an earlier night's
        written.seek(written_before)
        tail = written.read().decode(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    raise OperationError("\n".join(tail), child.returncode)


def checkout(program: Program, tag: Optional[str], directory: Optional[Path]) -> dict[str, Any]:
    """Make or reset the agent's working copy at the night's incumbent (nightshift.checkout/1);
    waits for a night that was just launched to record its start."""
    from agent.interface.workcopy import WorkCopyError, checkout as make_copy

    folder, state = started_night(program, tag, started_within=STARTING_S)
    if state.incumbent is None:
        raise OperationError(f"the night of tag {folder.name} has no incumbent yet: wait until "
                             f"its `nightshift run` printed `started`", ExitCode.LOOP)
    dest = directory or folder / "agent"
    try:
        copy = make_copy(program.root, folder.name, state.incumbent, program.target, dest)
    except WorkCopyError as error:
        raise OperationError(str(error)) from None
    return {"schema": CHECKOUT_SCHEMA, "tag": folder.name, "dir": str(copy.path), "base": copy.base,
            "target": copy.target, "target_path": str(copy.target_path)}


def propose(program: Program, tag: Optional[str], *, message: str, hypothesis: str, predict: str,
            delta: float, interval: tuple[float, float], confidence: float = 0.8,
            rationale: str = "", agent: str = "agent",
            directory: Optional[Path] = None) -> dict[str, Any]:
    """File the working copy's edit of the target with its pre-registered prediction
    (nightshift.proposed/1), once checked: only the target changed, it parses, the prediction
    is well formed (and, with `edits: knobs`, only declared knobs moved)."""
    from agent.interface.workcopy import WorkCopyError, open_copy
    from agent.night.admission import edit_refusal
    from agent.record.records import Prediction
    from agent.researchers.inbox import AgentProposal, Inbox

    folder, state = started_night(program, tag)
    try:
        copy = open_copy(directory or folder / "agent", folder.name)
        source = copy.proposal_source()
    except WorkCopyError as error:
        raise OperationError(str(error)) from None
    refusal = edit_refusal(copy.base_source(), source, copy.target,
                           dict(program.knobs) if program.edits == "knobs" else None)
    if refusal is not None:          # the night's own gate, asked before anything is filed
        raise OperationError(f"not filed: {refusal}")
    try:
        low, high = (float(v) for v in interval)
        prediction = Prediction(predict, delta, (low, high), confidence, rationale)
    except (TypeError, ValueError) as error:
        raise OperationError(f"not filed: the prediction: {error}") from None
    if not message.strip():
        raise OperationError("not filed: the message is empty")
    inbox = Inbox(folder)
    proposal_id = inbox.submit(AgentProposal(base=copy.base, source=source, description=message,
                                             hypothesis=hypothesis, prediction=prediction,
                                             agent=agent))
    return {"schema": PROPOSED_SCHEMA, "tag": folder.name, "proposal": proposal_id,
            "base": copy.base, "queued_ahead": _queued_ahead(inbox, state, proposal_id),
            "night_running": night_running(folder)}


def wait(program: Program, tag: Optional[str], wanted: str, timeout_s: float) -> dict[str, Any]:
    """Wait until a proposal (p0001) or experiment (e0007) is decided; its experiment
    (nightshift.experiment/1), followed from a candidate a keep superseded to the candidate its
    diff became. OperationError with ExitCode.LOOP when no night runs to decide it, TIMEOUT when
    `timeout_s` passed first."""
    from agent.record.ledger import read_snapshot
    from agent.researchers.inbox import Inbox, taken_proposals

    folder, _ = started_night(program, tag)
    if not wanted.startswith(("p", "e")):
        raise OperationError(f"{wanted!r}: expected a proposal id (p0001) or an experiment id (e0007)")
    deadline = time.monotonic() + timeout_s
    ledger, seen, state = folder / LEDGER_FILE, None, None
    while True:
        stamp = ledger.stat()
        if (stamp.st_size, stamp.st_mtime_ns) != seen:   # read again only what changed: a night's
            seen = (stamp.st_size, stamp.st_mtime_ns)     # ledger grows to megabytes
            state = read_snapshot(folder).state
        experiment_id = (taken_proposals(state.experiments).get(wanted) if wanted.startswith("p")
                         else wanted)
        if wanted.startswith("e") and wanted not in state.experiments:
            raise OperationError(f"no experiment {wanted} on tag {folder.name}: it has "
                                 f"{', '.join(state.experiments) or 'none yet'}")
        if wanted.startswith("p") and experiment_id is None and wanted not in Inbox(folder).ids():
            raise OperationError(f"no proposal {wanted} on tag {folder.name}")
        experiment = state.experiments.get(experiment_id or "")
        if experiment is not None and experiment.decided:
            return show(program, folder.name, experiment.id)
        if not night_running(folder):
            raise OperationError(f"{wanted} is not decided and no night runs on tag {folder.name}: "
                                 f"`nightshift run --tag {folder.name} --researcher external` goes on",
                                 ExitCode.LOOP)
        if time.monotonic() >= deadline:
            raise OperationError(f"{wanted} is not decided yet (waited {timeout_s:g}s); wait again",
                                 ExitCode.TIMEOUT)
        time.sleep(WAIT_POLL_S)


def done(program: Program, tag: Optional[str], reason: str = "") -> dict[str, Any]:
    """End the night once it has taken every proposal filed (nightshift.done/1)."""
    from agent.researchers.inbox import Inbox

    folder, _ = started_night(program, tag)
    Inbox(folder).end(reason)
    return {"schema": DONE_SCHEMA, "tag": folder.name, "reason": reason}


# ---- helpers ----------------------------------------------------------------------------------

def _queued_ahead(inbox: Any, state: Any, proposal_id: str) -> int:
    from agent.researchers.inbox import taken_proposals

    taken = taken_proposals(state.experiments)
    return sum(1 for other in inbox.ids() if other < proposal_id and other not in taken)

