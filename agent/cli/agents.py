"""The commands an agent drives a night with: `checkout`, `propose`, `wait` and `done`, and
`skill`, which installs the instructions that teach a coding agent to use them.

The night runs with `--researcher external` (agent/researchers/external.py); the agent edits a
working copy (agent/interface/workcopy.py), files each edit in the tag's inbox
(agent/researchers/inbox.py) and reads the verdicts. Every command takes `--json`: one JSON
document on stdout and nothing else there (docs/json.md), so an agent parses instead of
scraping; errors go to stderr with the exit codes of `nightshift --help`.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer

from agent.cli.common import ProgramOpt, console, existing_loop, fail, load
from agent.record.events import ExitCode

WAIT_POLL_S = 0.5
LAUNCH_S = 10.0
STARTING_S = 600.0    # a night's start: its data prepared, its view scanned, then loop_started

TagOpt = typer.Option(None, help="The night's tag (default: today's).")
DirOpt = typer.Option(None, "--dir", help="The working copy (default: results/<tag>/agent).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout (docs/json.md).")


def checkout(
    tag: Optional[str] = TagOpt,
    directory: Optional[Path] = DirOpt,
    as_json: bool = JsonOpt,
    program: Path = ProgramOpt,
) -> None:
    """Make or reset the agent's working copy at the night's incumbent.

    Edit the target there (program.md's `target:`, nothing else), then `nightshift propose`.
    Checking out again drops the edits in the copy and moves it to the incumbent of the
    moment: do it after each verdict. Several agents: one --dir each.
    """
    from agent.interface.workcopy import WorkCopyError, checkout as make_copy

    prog, folder, state = _night(program, tag, started_within=STARTING_S)
    if state.incumbent is None:
        raise fail(f"the night of tag {folder.name} has no incumbent yet: wait until its "
                   f"`nightshift run` printed `started`", ExitCode.LOOP)
    dest = directory or folder / "agent"
    try:
        copy = make_copy(prog.root, folder.name, state.incumbent, prog.target, dest)
    except WorkCopyError as error:
        raise fail(str(error)) from None
    _emit(as_json, {"schema": "nightshift.checkout/1", "tag": folder.name, "dir": str(copy.path),
                    "base": copy.base, "target": copy.target, "target_path": str(copy.target_path)},
          f"{copy.target_path}\n(the incumbent {copy.base[:8]}; edit this file only, then "
          f"`nightshift propose --tag {folder.name}`)")


def propose(
    message: str = typer.Option(..., "--message", "-m", help="One line: what the change is "
                                "(results.tsv and the commit subject)."),
    hypothesis: str = typer.Option(..., "--hypothesis", help="Why it should move the metric."),
    predict: str = typer.Option(..., "--predict", help="improve | worsen | same: the direction "
                                "you expect, registered before the run."),
    delta: float = typer.Option(..., "--delta", help="Expected candidate minus incumbent, in "
                                "metric units (negative improves a minimised metric)."),
    interval: str = typer.Option(..., "--interval", help="LO,HI: where the measured delta will "
                                 "fall, in metric units, e.g. -0.03,0.0."),
    confidence: float = typer.Option(0.8, "--confidence", help="Your probability that the "
                                     "interval holds the measured delta, in (0, 1)."),
    rationale: str = typer.Option("", "--rationale", help="What the prediction rests on."),
    agent_name: str = typer.Option("agent", "--agent", help="Who proposes, when several agents "
                                   "share a night."),
    tag: Optional[str] = TagOpt,
    directory: Optional[Path] = DirOpt,
    wait: bool = typer.Option(False, "--wait", help="Wait for the verdict and print it (as "
                              "`nightshift wait`)."),
    timeout: str = typer.Option("2h", "--timeout", help="With --wait: how long to wait."),
    as_json: bool = JsonOpt,
    program: Path = ProgramOpt,
) -> None:
    """Hand the night the edit in the working copy, with its pre-registered prediction.

    Checked before it is filed: only the target changed, it parses, the prediction is
    well-formed (and, with `edits: knobs`, only declared knobs moved). Prints the proposal's
    id (p0001); `nightshift wait ID` prints its verdict. Proposals queue: file several, the
    night's workers take them in order.
    """
    from agent.researchers.inbox import AgentProposal, Inbox
    from agent.interface.workcopy import WorkCopyError, open_copy
    from agent.record.records import Prediction
    from agent.target.knobs import KnobError, knob_edit
    from agent.workspace.gate import check_source

    prog, folder, state = _night(program, tag)
    try:
        copy = open_copy(directory or folder / "agent", folder.name)
        source = copy.proposal_source()
    except WorkCopyError as error:
        raise fail(str(error)) from None
    base_source = _read_at(prog.root, copy.base, copy.target)
    gate = check_source(copy.target, base_source, source)
    if not gate.ok:
        raise fail(f"not filed: {gate.reason}")
    if prog.edits == "knobs":
        try:
            knob_edit(base_source or "", source, path=copy.target, declared=dict(prog.knobs))
        except KnobError as error:
            raise fail(f"not filed: {error}") from None
    try:
        low, high = (float(v) for v in interval.split(","))
        prediction = Prediction(predict, delta, (low, high), confidence, rationale)
    except ValueError as error:
        raise fail(f"not filed: the prediction: {error} (--interval is LO,HI, e.g. -0.03,0.0)") from None
    if not message.strip():
        raise fail("not filed: --message is empty")
    inbox = Inbox(folder)
    proposal_id = inbox.submit(AgentProposal(base=copy.base, source=source, description=message,
                                             hypothesis=hypothesis, prediction=prediction,
                                             agent=agent_name))
    queued = _queued_ahead(inbox, state, proposal_id)
    running = _night_running(folder)
    note = "" if running else (f"; no night runs on tag {folder.name} now: it is taken when "
                               f"`nightshift run --tag {folder.name} --researcher external` runs")
    if wait:
        _wait_for(prog, folder, proposal_id, _duration(timeout), as_json)
        return
    _emit(as_json, {"schema": "nightshift.proposed/1", "tag": folder.name, "proposal": proposal_id,
                    "base": copy.base, "queued_ahead": queued, "night_running": running},
          f"{proposal_id} filed ({queued} ahead of it){note}; `nightshift wait --tag "
          f"{folder.name} {proposal_id}` prints its verdict")


def wait(
    proposal: str = typer.Argument(..., help="A proposal id (p0001) or an experiment id (e0007)."),
    tag: Optional[str] = TagOpt,
    timeout: str = typer.Option("2h", "--timeout", help="How long to wait, e.g. 30m."),
    as_json: bool = JsonOpt,
    program: Path = ProgramOpt,
) -> None:
    """Wait until a proposal (or experiment) is decided, then print the verdict.

    Follows a candidate that a keep superseded to the candidate its diff became. Exits 0 with
    the verdict; 4 when no night runs on the tag to decide it; 6 when the timeout passed first.
    """
    prog, folder, _ = _night(program, tag)
    _wait_for(prog, folder, proposal, _duration(timeout), as_json)


def done(
    reason: str = typer.Option("", "--reason", help="Why, recorded with the night's stop."),
    tag: Optional[str] = TagOpt,
    as_json: bool = JsonOpt,
    program: Path = ProgramOpt,
) -> None:
    """End the night once it has taken every proposal filed (what runs is decided first)."""
    from agent.researchers.inbox import Inbox

    _, folder, _ = _night(program, tag)
    Inbox(folder).end(reason)
    _emit(as_json, {"schema": "nightshift.done/1", "tag": folder.name, "reason": reason},
          f"the night of tag {folder.name} stops once every proposal filed was taken and decided")


def skill(
    to: Path = typer.Option(Path("."), "--to", help="The repository to install into."),
    show: bool = typer.Option(False, "--print", help="Print the skill instead of installing it."),
) -> None:
    """Install the skill that teaches a coding agent to drive a night (Claude Code, Codex).

    One text, installed where each agent looks: `.claude/skills/nightshift/SKILL.md` and a
    pointer in CLAUDE.md for Claude Code, `.agents/skills/nightshift/SKILL.md` and a pointer in
    AGENTS.md for Codex. Running it again updates them; the rest of CLAUDE.md and AGENTS.md
    is left as it is.
    """
    from agent.interface.skill import install, skill_text

    if show:
        sys.stdout.write(skill_text())
        return
    if not to.is_dir():
        raise fail(f"--to {to}: no such folder")
    for path, what in install(to):
        console.print(f"{what}: {path}", highlight=False, markup=False)


# ---- helpers ------------------------------------------------------------------------------

def _night(program: Path, tag: Optional[str], started_within: float = 0.0):
    """(program, the tag's results folder, the ledger's state) or exit 1 naming the tags.
    `started_within`: how long to wait for a night that holds the tag's lock to record its
    start (an agent's first checkout, right after it launched the night)."""
    from agent.night.session import default_tag
    from agent.preflight.lock import live_holder
    from agent.record.ledger import read_snapshot
    from agent.run.plan import results_dir

    prog = load(program, {})
    folder = results_dir(prog, tag or default_tag())
    began = time.monotonic()
    while True:
        snapshot = read_snapshot(folder)
        if snapshot is not None and snapshot.state.incumbent is not None:
            return prog, folder, snapshot.state
        waited = time.monotonic() - began
        # a night launched a moment ago may not hold the lock yet: LAUNCH_S of grace for that
        starting = live_holder(folder) is not None or waited < min(LAUNCH_S, started_within)
        if waited >= started_within or not starting:
            break
        time.sleep(WAIT_POLL_S)
    folder = existing_loop(prog, tag)      # exits naming the tags when there is no ledger
    return prog, folder, read_snapshot(folder).state


def _wait_for(prog: Any, folder: Path, wanted: str, timeout_s: float, as_json: bool) -> None:
    from agent.researchers.inbox import taken_proposals
    from agent.record.ledger import read_snapshot

    deadline = time.monotonic() + timeout_s
    while True:
        state = read_snapshot(folder).state
        experiment_id = (taken_proposals(state.experiments).get(wanted) if wanted.startswith("p")
                         else wanted)
        if wanted.startswith("e") and wanted not in state.experiments:
            raise fail(f"no experiment {wanted} on tag {folder.name}: it has "
                       f"{', '.join(state.experiments) or 'none yet'}")
        if wanted.startswith("p") and experiment_id is None and not (folder / "inbox" / f"{wanted}.json").exists():
            raise fail(f"no proposal {wanted} on tag {folder.name}")
        experiment = state.experiments.get(experiment_id or "")
        if experiment is not None and experiment.decided:
            _print_verdict(prog, folder, experiment.id, wanted, as_json)
            return
        if not _night_running(folder):
            raise fail(f"{wanted} is not decided and no night runs on tag {folder.name}: "
                       f"`nightshift run --tag {folder.name} --researcher external` goes on",
                       ExitCode.LOOP)
        if time.monotonic() >= deadline:
            raise fail(f"{wanted} is not decided yet (waited {timeout_s:g}s); wait again",
                       ExitCode.TIMEOUT)
        time.sleep(WAIT_POLL_S)


def _print_verdict(prog: Any, folder: Path, experiment_id: str, asked: str, as_json: bool) -> None:
    """The decided experiment, as `nightshift show` prints it."""
    from agent.cli.show import print_document, print_experiment
    from agent.interface.reading import git_diff, read_night
    from agent.interface.views import experiment_view

    view = experiment_view(read_night(prog, folder), experiment_id, git_diff(prog.root))
    if as_json:
        print_document(view)
        return
    if asked != experiment_id:
        console.print(f"{asked} is {experiment_id}", highlight=False, markup=False)
    print_experiment(console, view)


def _queued_ahead(inbox: Any, state: Any, proposal_id: str) -> int:
    from agent.researchers.inbox import taken_proposals

    taken = taken_proposals(state.experiments)
    return sum(1 for other in inbox.ids() if other < proposal_id and other not in taken)


def _night_running(folder: Path) -> bool:
    from agent.preflight.lock import live_holder

    return live_holder(folder) is not None


def _read_at(root: Path, commit: str, path: str) -> str | None:
    import subprocess

    done = subprocess.run(["git", "-C", str(root), "cat-file", "blob", f"{commit}:{path}"],
                          capture_output=True)
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def _duration(text: str) -> float:
    from agent.program import parse_duration

    try:
        return parse_duration(text)
    except Exception:
        raise fail(f"--timeout {text!r}: expected a duration like 30m or 2h.") from None


def _emit(as_json: bool, document: dict[str, Any], text: str) -> None:
    """`document` on stdout with --json (its schema: agent/interface/schemas/), else `text`."""
    if as_json:
        from agent.cli.show import print_document

        print_document(document)
    else:
        console.print(text, highlight=False, markup=False)
