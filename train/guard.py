"""While a candidate's model loads and runs in the evaluator, nothing runs that nobody planned.
Protected, like evaluate.py, which arms it.

artifact.py validates every string of the archive before torch reads it; this is the second
line, for a route nobody has found yet. A Python audit hook (`sys.addaudithook`, PEP 578) sees
every `compile` and `exec`, every file opened, every process, socket and ctypes call of the
process. While the guard is armed it refuses:

- `compile`/`exec` except at the few places where torch and the interpreter generate code to
  load a model (`PLANNED`), and there only source of the planned shape: sympy parses a size
  expression of the artifact's grammar, torch.fx and the export's guards write Python with no
  imports, no dunder names and no builtins that reach the interpreter (`generated_code`);
- processes, signals, sockets, ctypes, pickles, new code objects, tracing, environment and
  file-system changes;
- an open for writing, or of anything outside the interpreter's own files and the
  canonical copy of the artifact (the data is loaded before the guard is armed).

Modules torch imports on first use are imported before arming (`warm_up`), so the armed load
is the steady-state path. A refusal raises `Refused` where it happens, and is remembered,
since library code may swallow the exception: `Guard.__exit__` then raises artifact.Rejected
naming the first refusal, and the run is `bad_artifact`.
"""
from __future__ import annotations

import ast
import importlib
import os
import site
import sys
import sysconfig
import threading
from pathlib import Path

from schema import Rejected, sym_expression

# (the end of the calling code's file, its function): where code is generated on the way
# in, with the check its source must pass. Measured on torch 2.13 (tests/train/test_guard.py
# loads an honest model armed, cold and warm).
PLANNED = {
    ("sympy/parsing/sympy_parser.py", "parse_expr"): lambda source: source == "from sympy import *",
    ("sympy/parsing/sympy_parser.py", "eval_expr"): lambda source: sym_expression(source),
    ("torch/fx/graph_module.py", "_exec_with_source"): lambda source: generated_code(source),
    ("torch/export/_unlift.py", "_convert_guards_code_to_fn"): lambda source: generated_code(source),
    ("typing.py", "__init__"): lambda source: type_expression(source),        # ForwardRef
    ("typing.py", "_evaluate"): lambda source: True,                          # runs what __init__ checked
    ("torch/fx/operator_schemas.py", "_torchscript_type_to_python_type"): lambda source: type_expression(source),
    ("ast.py", "parse"): lambda source: True,                                 # to a tree: nothing runs
    ("collections/__init__.py", "namedtuple"): lambda source: True,           # identifiers, checked by namedtuple
    ("dataclasses.py", "_create_fn"): lambda source: True,                    # from class definitions on disk
}
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
WARM = ("torch.export", "torch._export.serde.serialize", "torch.export.pt2_archive._package",
        "torch.export._unlift", "torch.fx.experimental.symbolic_shapes", "torch._higher_order_ops",
        "torch._subclasses.fake_tensor", "torch._inductor.ops_handler", "torch._inductor.sizevars",
        "torch._inductor.virtualized", "torch.fx.experimental.validator", "sympy",
        "sympy.parsing.sympy_parser", "sympy.assumptions.wrapper", "encodings.cp437")
DENIED_NAMES = {"eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars",
                "setattr", "delattr", "breakpoint", "input", "exit", "quit", "help",
                "memoryview", "type", "object", "builtins", "os", "sys", "subprocess"}


class Refused(RuntimeError):
    """The guard refused an event; the evaluation is over for this artifact."""


def generated_code(source: str | bytes) -> bool:
    """Python that torch writes from a graph: calls of operators and names, no imports, no
    dunder names (the way out of any sandboxed expression), no builtins that reach the
    interpreter, getattr only with a plain constant name."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Lambda, ast.AsyncFunctionDef)):
            return False
        if isinstance(node, ast.Name) and (node.id.startswith("__") or node.id in DENIED_NAMES):
            return False
        if isinstance(node, ast.Attribute) and node.attr.startswith("__") and ast.unparse(node.value) not in (
                "torch.ops.aten", "torch.ops.prims"):   # aten's own dunder ops: torch.ops.aten.__and__
            return False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and not (
                len(node.args) == 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str) and not node.args[1].value.startswith("__")):
            return False   # fx reads numbered submodules as getattr(self.blocks, "0"); nothing else
    return True


def type_expression(source: str | bytes) -> bool:
    """An annotation such as `Optional[List[int]]` or `'Graph'`: names, dots and brackets."""
    text = source.decode() if isinstance(source, bytes) else source
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return False
    allowed = (ast.Expression, ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.Load, ast.Constant,
               ast.BinOp, ast.BitOr, ast.List)
    return len(text) < 500 and all(isinstance(node, allowed) for node in ast.walk(tree)) and not any(
        isinstance(node, ast.Name) and node.id.startswith("__") or isinstance(node, ast.Attribute)
        and node.attr.startswith("__") for node in ast.walk(tree))


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
    """Import what torch imports on its first load, and start the accelerator, before arming:
    the armed load is then the path every load takes."""
    global _warm
    if _warm:
        return
    for module in WARM:
        importlib.import_module(module)
    import torch
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.zeros(1, device="cuda").add_(1)
    _warm = True


def _show(value, limit: int = 120) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."
