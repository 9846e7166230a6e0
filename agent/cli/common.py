"""What the commands share: the consoles, exit codes, loading program.md, finding a tag."""
from __future__ import annotations

import functools
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape

from agent.program import Program, ProgramError, load_program
from agent.record.events import ExitCode
from agent.record.ledger import LEDGER_FILE

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


def load(program_path: Path, overrides: dict[str, Any]) -> Program:
    """program.md with the command line's overrides (None values skipped), or exit 1 naming
    the file, line and field."""
    try:
        return load_program(program_path, {k: v for k, v in overrides.items() if v is not None})
    except FileNotFoundError:
        raise fail(f"{program_path}: no such file. Run from the repository that holds "
                   "program.md, or pass --program PATH.") from None
    except ProgramError as error:
        raise fail(str(error)) from None


def existing_loop(program: Program, tag: Optional[str]) -> Path:
    """The results folder of a loop that has started, or exit 1 naming the tags that exist."""
    from agent.night.session import default_tag
    from agent.run.plan import results_dir

    tag = tag or default_tag()
    folder = results_dir(program, tag)
    if not (folder / LEDGER_FILE).exists():
        known = sorted(p.parent.name for p in (program.root / "results").glob(f"*/{LEDGER_FILE}"))
        raise fail(f"no loop at {folder}; start one with `nightshift run --tag {tag}`. "
                   f"Known tags: {', '.join(known) or 'none'}.")
    return folder
