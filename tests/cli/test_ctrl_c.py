"""A Ctrl-C that lands inside a finalizer (a weakref callback: importing torch or scipy runs
many) is remembered and ends the command with 130 and one line, no traceback printed."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import signal, weakref
    import typer
    from agent.cli.common import CTRL_C, interruptible

    @interruptible
    def command():
        class Thing:
            pass
        thing = Thing()
        # the SIGINT handler runs inside the callback: Python drops what it raises there
        keep = weakref.ref(thing, lambda ref: CTRL_C(signal.SIGINT, None))
        del thing
        print("still running", flush=True)
        CTRL_C.check()          # the loop's next safe point
        print("not reached", flush=True)

    app = typer.Typer()
    app.command()(command)
    app()
""")


def test_a_ctrl_c_dropped_in_a_finalizer_exits_130_without_a_traceback():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "still running" in done.stdout and "not reached" not in done.stdout
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.stderr.strip() == "interrupted"


def test_other_exceptions_in_finalizers_are_still_printed():
    script = SCRIPT.replace("lambda ref: CTRL_C(signal.SIGINT, None)", "lambda ref: 1 / 0")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ZeroDivisionError" in done.stderr and "Exception ignored" in done.stderr
