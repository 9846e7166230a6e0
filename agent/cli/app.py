"""The `nightshift` command line: the app and its commands.

Exit codes scripts can rely on (`agent.record.events.ExitCode`):
  0  finished: a stop rule held (--max-experiments, --hours)
  1  bad input: program.md, a flag, the repository (the message names the fix)
  2  usage error (unknown flag, missing argument)
  3  the researcher stopped the loop (cost cap reached, API unavailable, script exhausted)
  4  the loop could not go on (the incumbent fails to run, the sandbox is unavailable, a full
     disk, a git error); the message says which, and `run --tag` resumes once it is fixed
  5  the tag is busy: its loop runs in another process (named by PID and host)
  6  `nightshift wait`: no verdict within --timeout (wait again)
  130 interrupted with Ctrl-C (the ledger is closed cleanly; `run --tag` resumes)
"""
from __future__ import annotations

import inspect
from typing import Callable

import typer

from agent.cli import agents, check, export, morning, night, serve, show

app = typer.Typer(
    help="Nightshift: an autonomous ML research loop you can trust with your GPUs overnight.\n\n"
         "It edits one training script under git, runs time-budgeted experiments in a sandbox, "
         "keeps a commit only when the improvement is statistically real, and records "
         "everything in results/<tag>/.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)



def reflowed(doc: str | None) -> str:
    """A docstring as --help shows it: each paragraph on one line, for the terminal to wrap.
    Typer keeps the line breaks of every paragraph after the first, so a terminal narrower
    than the source broke each line in two, mid-sentence."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in inspect.cleandoc(doc or "").split("\n\n"))


def command(function: Callable[..., None]) -> None:
    app.command(help=reflowed(function.__doc__))(function)


# before the night
command(check.check)
# the night
command(night.run)
command(night.seed)
command(night.noise)
# an agent driving the night (--researcher external)
command(agents.checkout)
command(agents.propose)
command(agents.wait)
command(agents.done)
command(agents.skill)
command(agents.mcp)
# the morning
command(morning.status)
command(show.show)
command(morning.replay)
command(morning.ablate)
command(morning.report)
command(export.export)
command(serve.serve)


def main() -> None:  # pragma: no cover - the console script calls `app`
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
