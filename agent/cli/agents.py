"""The commands an agent drives a night with: `checkout`, `propose`, `wait` and `done`;
`skill`, which installs the instructions that teach a coding agent to use them; and `mcp`,
which serves the same operations as MCP tools (agent/interface/mcp_server.py). The operations
themselves are agent/interface/operations.py: here are their flags and their text.

The night runs with `--researcher external` (agent/researchers/external.py); the agent edits a
working copy (agent/interface/workcopy.py), files each edit in the tag's inbox
(agent/researchers/inbox.py) and reads the verdicts. Every command takes `--json`: one JSON
document on stdout and nothing else there (docs/json.md), so an agent parses instead of
scraping; errors go to stderr with the exit codes of `nightshift --help`.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from agent.cli.common import ProgramOpt, console, fail, load, reported
from agent.interface import operations
from agent.interface.operations import PROPOSAL_FIELDS

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
    prog = load(program, {})
    with reported():
        copy = operations.checkout(prog, tag, directory)
    _emit(as_json, copy, f"{copy['target_path']}\n(the incumbent {copy['base'][:8]}; edit this file "
          f"only, then `nightshift propose --tag {copy['tag']}`)")


def propose(
    message: str = typer.Option(..., "--message", "-m", help=PROPOSAL_FIELDS["message"]),
    hypothesis: str = typer.Option(..., "--hypothesis", help=PROPOSAL_FIELDS["hypothesis"]),
    predict: str = typer.Option(..., "--predict", help=PROPOSAL_FIELDS["predict"]),
    delta: float = typer.Option(..., "--delta", help=PROPOSAL_FIELDS["delta"]),
    interval: str = typer.Option(..., "--interval", help="LO,HI: where the measured delta will "
                                 "fall, in metric units, e.g. -0.03,0.0."),
    confidence: float = typer.Option(0.8, "--confidence", help=PROPOSAL_FIELDS["confidence"]),
    rationale: str = typer.Option("", "--rationale", help=PROPOSAL_FIELDS["rationale"]),
    agent_name: str = typer.Option("agent", "--agent", help=PROPOSAL_FIELDS["agent"]),
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
    prog = load(program, {})
    try:
        low, high = (float(v) for v in interval.split(","))
    except ValueError as error:
        raise fail(f"not filed: the prediction: {error} (--interval is LO,HI, e.g. -0.03,0.0)") from None
    waited = _duration(timeout) if wait else 0.0
    with reported():
        filed = operations.propose(prog, tag, message=message, hypothesis=hypothesis,
                                   predict=predict, delta=delta, interval=(low, high),
                                   confidence=confidence, rationale=rationale, agent=agent_name,
                                   directory=directory)
    if wait:
        _print_verdict(prog, filed["tag"], filed["proposal"], waited, as_json)
        return
    tag_ = filed["tag"]
    note = "" if filed["night_running"] else (f"; no night runs on tag {tag_} now: it is taken "
                                              f"when `nightshift run --tag {tag_} --researcher "
                                              f"external` runs")
    _emit(as_json, filed, f"{filed['proposal']} filed ({filed['queued_ahead']} ahead of it){note}; "
          f"`nightshift wait --tag {tag_} {filed['proposal']}` prints its verdict")


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
    prog = load(program, {})
    _print_verdict(prog, tag, proposal, _duration(timeout), as_json)


def done(
    reason: str = typer.Option("", "--reason", help="Why, recorded with the night's stop."),
    tag: Optional[str] = TagOpt,
    as_json: bool = JsonOpt,
    program: Path = ProgramOpt,
) -> None:
    """End the night once it has taken every proposal filed (what runs is decided first)."""
    prog = load(program, {})
    with reported():
        ended = operations.done(prog, tag, reason)
    _emit(as_json, ended, f"the night of tag {ended['tag']} stops once every proposal filed was "
          f"taken and decided")


def mcp(program: Path = ProgramOpt) -> None:
    """Serve the agent's commands to a coding agent as an MCP server, on stdin and stdout.

    The tools (start_night, checkout, propose, wait, status, show, done) do what the commands
    of the same names do and return the documents their --json prints (docs/json.md). Register
    it once, from the repository: `claude mcp add nightshift -- nightshift mcp` (Claude Code),
    `codex mcp add nightshift -- nightshift mcp` (Codex). Needs the MCP SDK:
    pip install -e '.\\[mcp]'.
    """
    try:
        from agent.interface.mcp_server import serve
    except ImportError as error:
        raise fail(f"nightshift mcp needs the MCP SDK ({error}): pip install -e '.[mcp]'") from None
    serve(program)          # a missing or broken program.md: each tool says so, as each command does


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

def _print_verdict(prog: Any, tag: Optional[str], wanted: str, timeout_s: float, as_json: bool) -> None:
    """Wait for `wanted`'s verdict and print its experiment, as `nightshift show` prints it."""
    from agent.cli.show import print_document, print_experiment

    with reported():
        view = operations.wait(prog, tag, wanted, timeout_s)
    if as_json:
        print_document(view)
        return
    if wanted != view["id"]:
        console.print(f"{wanted} is {view['id']}", highlight=False, markup=False)
    print_experiment(console, view)


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
