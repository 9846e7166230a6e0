"""What the commands share: the consoles, exit codes, loading program.md, finding a tag (the
last two as agent/interface/operations.py does them, for the MCP server too)."""
from __future__ import annotations

import contextlib
import functools
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import typer
from rich.console import Console
from rich.markup import escape

from agent.interface.operations import OperationError, existing_night, open_program
from agent.program import Program
from agent.record.events import ExitCode

# Logs and pipes get a wide console: rich's 80-column default folds every table row.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
# An error's line is never folded by rich: a folded path (".../pr\nogram.md") cannot be copied
# or searched for; the terminal wraps a long line where it must.
err = Console(stderr=True, highlight=False, soft_wrap=True)

ProgramOpt = typer.Option(Path("program.md"), "--program", "-p",
                          help="The research program: YAML front matter + prose.")


class CtrlC:
    """Remembers a Ctrl-C as well as raising it. Python drops an exception raised inside a
    finalizer or weakref callback ("Exception ignored in ..."), and importing torch runs
    many: a Ctrl-C landing there would be lost, so `check()` raises it again at safe points."""

    def __init__(self) -> None:
        self.pressed = False
        self.reported = False   # "interrupted" was printed

    def report(self) -> None:
        self.reported = True
        err.print("\ninterrupted")

    def __call__(self, signum: int, frame: Any) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.pressed:
            raise KeyboardInterrupt

    @staticmethod
    def unraisable(report: Any) -> None:
        """sys.unraisablehook: a Ctrl-C dropped inside a finalizer is not a crash to print
        ("Exception ignored in ... Traceback ... KeyboardInterrupt" under "interrupted"): it
        was remembered, and `check()` or the next bytecode raises it. Anything else as before."""
        if isinstance(report.exc_value, KeyboardInterrupt):
            return
        sys.__unraisablehook__(report)


def interruptible(command: Callable[..., Any]) -> Callable[..., Any]:
    """Ctrl-C anywhere in `command` exits 130 with a line, not click's "Aborted!" and 1.
    The command gets the CtrlC in force as `ctrl_c` in its module (see CtrlC)."""
    @functools.wraps(command)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        previous = signal.getsignal(signal.SIGINT)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, CTRL_C)
        previous_hook, sys.unraisablehook = sys.unraisablehook, CtrlC.unraisable
        CTRL_C.pressed = False
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            CTRL_C.report()
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        except Exception:
            # A Ctrl-C inside a C extension's import comes out as that import's error
            # (scipy: "ImportError: initialization failed" caused by KeyboardInterrupt):
            # once Ctrl-C was pressed, whatever it broke is the interruption.
            if not CTRL_C.pressed:
                raise
            CTRL_C.report()
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, previous)
            if not CTRL_C.pressed:   # else kept: finalizers that run as the process exits
                sys.unraisablehook = previous_hook
    return wrapped


CTRL_C = CtrlC()


def fail(message: str, code: ExitCode = ExitCode.BAD_INPUT) -> typer.Exit:
    """Print `message` as an error and return the Exit to raise."""
    err.print(f"[red]error:[/red] {escape(message)}")   # a message's [brackets] are text, not markup
    return typer.Exit(code)


def mlflow_flag(uri: str) -> str:
    """--mlflow's URI, checked as program.md's tracking.mlflow.uri is (no credentials in it)."""
    from agent.program.values import Invalid, tracking_uri

    try:
        return tracking_uri(uri)
    except Invalid as bad:
        raise fail(f"--mlflow: {bad}") from None


def load(program_path: Path, overrides: dict[str, Any]) -> Program:
    """program.md with the command line's overrides (None values skipped), or exit 1 naming
    the file, line and field."""
    with reported():
        return open_program(program_path, overrides)


def existing_loop(program: Program, tag: Optional[str]) -> Path:
    """The results folder of a loop that has started, or exit 1 naming the tags that exist."""
    with reported():
        return existing_night(program, tag)


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """An operation's refusal (agent/interface/operations.py) as this command line's error:
    its message after `error:`, its exit code."""
    try:
        yield
    except OperationError as error:
        raise fail(error.message, error.code) from None
