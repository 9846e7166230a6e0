"""While a candidate's model is read and runs in the evaluator, nothing runs that nobody
planned. Protected, like evaluate.py, which arms it.

schema.py validates every string of the archive and graph.py's interpreter reads none of them
as code; this is the second line, for a route nobody has found yet. A Python audit hook
(`sys.addaudithook`, PEP 578) sees every `compile` and `exec`, every file opened, every
process, socket and ctypes call of the process. While the guard is armed it refuses:

- `compile`/`exec`, except parsing to a tree (`PLANNED`: schema.py parses size expressions
  without evaluating them). The interpreter generates no code, so nothing else compiles;
- processes, signals, sockets, ctypes, pickles, new code objects, tracing, environment and
  file-system changes;
- an open for writing, or of anything outside the interpreter's own files and the artifact
  (the data is loaded before the guard is armed).

A module imported while armed runs its body from the interpreter's own files, which is
allowed. A refusal raises `Refused` where it happens, and is remembered, since library code
may swallow the exception: `Guard.__exit__` then raises schema.Rejected naming the first
refusal, and the run is `bad_artifact`.
"""
from __future__ import annotations

import ast
import os
import site
import sys
import sysconfig
import threading
from pathlib import Path

from schema import Rejected

# (the end of the calling code's file, its function): where code may be compiled while armed,
# with the check its source must pass. Measured on torch 2.13 (tests/train/test_artifact.py).
PLANNED = {("ast.py", "parse"): lambda source: True}   # to a tree (schema.py's size grammar): nothing runs
IMPORT_FRAMES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
REFUSED_EVENTS = ("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                  "os.forkpty", "os.kill", "os.killpg", "pty.spawn", "socket.", "ctypes.", "pickle.",
                  "marshal.", "code.__new__", "function.__new__", "sys.settrace", "sys.setprofile",
                  "sys.monitoring", "os.remove", "os.unlink", "os.rename", "os.rmdir", "os.mkdir",
                  "os.chmod", "os.chown", "os.symlink", "os.link", "os.truncate", "os.putenv",
                  "os.unsetenv", "os.chdir", "shutil.", "urllib.", "http.", "webbrowser.", "sqlite3.",
                  "builtins.input", "builtins.breakpoint", "cpython.run_", "mmap.", "syslog.",
                  "setopencodehook", "sys.addaudithook", "_posixsubprocess.")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Refused(RuntimeError):
    """The guard refused an event; the evaluation is over for this artifact."""


def interpreter_roots() -> list[str]:
    """The folders the interpreter reads code from: its prefixes and site-packages."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values(), *sys.path}
    with _quiet():
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    return sorted({os.path.realpath(r) for r in roots if r and os.path.isdir(r)} - {"/"})


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return isinstance(exc[1], (AttributeError, OSError))


class Guard:
    """Arm with `with Guard(readable=[folder]) as guard:`; one guard at a time per process."""

    _active: "Guard | None" = None
    _installed = False
    _lock = threading.Lock()

    def __init__(self, readable: list[Path] = ()) -> None:
        self.readable = tuple(interpreter_roots()) + tuple(os.path.realpath(p) for p in readable)
        self.refusals: list[str] = []
        self._inside = threading.local()

    def __enter__(self) -> "Guard":
        warm_up()
        with Guard._lock:
            if not Guard._installed:
                sys.addaudithook(_hook)   # for the life of the process; inert while unarmed
                Guard._installed = True
            Guard._active = self
        return self

    def __exit__(self, kind, error, trace) -> bool:
        Guard._active = None
        if self.refusals:
            raise Rejected(f"loading or running the model tried to {self.refusals[0]}: refused "
                           f"(an artifact is data; only tensor arithmetic runs here)") from None
        return False

    # -- the policy

    def judge(self, event: str, args: tuple, caller) -> str | None:
        """None when `caller` (the frame that raised the event) may go on, else what it tried."""
        if _importing(caller):   # a module's body from the interpreter's files, run by an import
            return None
        if event in ("compile", "exec"):
            return self._code(event, args, caller)
        if event == "open":
            return self._open(*args[:3])
        if event in ("os.listdir", "os.scandir"):
            path = args[0] if args else "."
            if isinstance(path, int) or not os.path.exists(path) or self._inside_roots(path):
                return None   # an import's path entries, some of them not folders at all
            return f"list {os.fsdecode(path)}"
        if event.startswith(REFUSED_EVENTS):
            return f"call {event} ({_show(args)})"
        return None

    def _code(self, event: str, args: tuple, caller) -> str | None:
        where = (caller.f_code.co_filename.replace(os.sep, "/"), caller.f_code.co_name)
        check = next((test for (path, function), test in PLANNED.items()
                      if where[0].endswith("/" + path) and where[1] == function), None)
        if check is None:
            return f"{event} code at {where[0]}:{where[1]}"
        if event == "compile":
            source = args[0] if args else None
            if isinstance(source, (bytes, str)) and not check(source.decode() if isinstance(source, bytes) else source):
                return f"compile unexpected source at {where[0]}:{where[1]}: {_show(source)}"
            if not isinstance(source, (bytes, str, ast.AST)):
                return f"compile {type(source).__name__} at {where[0]}:{where[1]}"
        return None

    def _open(self, path, mode=None, flags=0) -> str | None:
        if isinstance(path, int):
            return f"open file descriptor {path}"
        writes = ("w" in mode or "a" in mode or "+" in mode or "x" in mode) if isinstance(mode, str) \
            else bool((flags or 0) & WRITE_FLAGS)
        if writes:
            return f"open {os.fsdecode(path)} for writing"
        if not os.path.exists(path) or self._inside_roots(path):
            return None   # nothing there to read, or the interpreter's own files
        return f"read {os.fsdecode(path)}"

    def _inside_roots(self, path) -> bool:
        real = os.path.realpath(os.fsdecode(path))
        return any(real == root or real.startswith(root + os.sep) for root in self.readable)


def _hook(event: str, args: tuple) -> None:
    guard = Guard._active
    if guard is None or getattr(guard._inside, "busy", False):
        return
    guard._inside.busy = True   # the policy's own calls raise events too (sys._getframe)
    try:
        refused = guard.judge(event, args, sys._getframe(1))
    finally:
        guard._inside.busy = False
    if refused is not None:
        guard.refusals.append(refused)
        raise Refused(refused)


def _importing(frame, depth: int = 64) -> bool:
    """Whether an import is running below `frame` on the stack (a module body executing)."""
    while frame is not None and depth:
        if frame.f_code.co_filename in IMPORT_FRAMES:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


_warm = False


def warm_up() -> None:
    """Start the accelerator before arming (its driver opens device files for writing); the
    armed path is then the one every evaluation takes."""
    global _warm
    if _warm:
        return
    import torch
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.zeros(1, device="cuda").add_(1)
    _warm = True


def _show(value, limit: int = 120) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."
