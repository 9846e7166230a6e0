"""`nightshift serve`: the live page; and the same beside a night (`run --serve`)."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from agent.cli.common import ProgramOpt, console, fail, load
from agent.program import Program

HOST_HELP = ("Address to listen on. 127.0.0.1 (the default) is this machine only; any other "
             "address needs the token printed at start, on every request.")
PORT_HELP = "Port to listen on (0: any free port; the address printed says which)."


def serve(
    tag: list[str] = typer.Option([], "--tag", help="A tag to show (repeatable). Default: every "
                                  "tag of results/, including those that start later."),
    host: str = typer.Option("127.0.0.1", help=HOST_HELP),
    port: int = typer.Option(8765, min=0, max=65535, help=PORT_HELP),
    program: Path = ProgramOpt,
) -> None:
    """A live web page of one or more nights: the report's panels, the runs in flight with their
    learning curves, each experiment's view, updating as the ledger grows (no reload).

    Read-only and offline: it writes nothing, loads nothing from the network, and serves only
    the tags' ledgers, transcripts and run logs. Ctrl-C stops it."""
    from agent.review.serve.server import ServeError

    prog = load(program, {})
    try:
        serving = prepare_site(prog, tuple(tag) or None, host, port)
    except ServeError as error:
        raise fail(str(error)) from None
    for name in tag:
        if not (prog.root / "results" / name / "ledger.jsonl").exists():
            console.print(f"[dim]{escape(name)}: no ledger yet; its page appears once its night "
                          f"starts[/dim]")
    console.print(f"serving {escape(serving.url)} (read-only; Ctrl-C stops)")
    if serving.token:
        console.print("[yellow]bound beyond loopback: every request needs the token in that "
                      "address (it is set as a cookie on first use)[/yellow]")
    if host in ("0.0.0.0", "::"):
        console.print(f"[dim]{host} is every address of this machine: from another one, put this "
                      f"machine's name or address in its place[/dim]")
    try:
        serving.run()
    except KeyboardInterrupt:
        pass
    console.print("stopped")


def prepare_site(prog: Program, tags: tuple[str, ...] | None, host: str, port: int):
    """A bound server over `tags` of `prog`'s results folder (ServeError when it cannot bind)."""
    from agent.review.serve.app import Site
    from agent.review.serve.server import prepare

    site = Site(results=prog.root / "results", tags=tags, metric=prog.metric,
                direction=prog.direction, repo=prog.root)
    return prepare(site, host, port)


def start_beside_night(prog: Program, tag: str, host: str, port: int):
    """`run --serve`: the page of `tag`, served from a thread of the night's process (it stops
    with the night). Bound now, so a taken port stops `run` before the night starts."""
    from agent.review.serve.server import ServeError

    try:
        return prepare_site(prog, (tag,), host, port)
    except ServeError as error:
        raise fail(f"--serve: {error}") from None


def page_url(serving, tag: str) -> str:
    base, _, query = serving.url.partition("?")
    return f"{base}t/{tag}/" + (f"?{query}" if query else "")
