"""Nightshift's harness. The stages are its subpackages (docs/architecture.md).

One thing is done here, before any stage runs, because it concerns the whole process:
on Python 3.11 `ast.parse` is not thread-safe. Its C converter keeps one recursion
counter per interpreter, not per thread, so two threads parsing at once (a garbage
collection inside one lets the other run) can fail with "SystemError: AST constructor
recursion depth mismatch" (CPython gh-106905; not seen on 3.10 or 3.12). A night parses on several
threads: the loop and the researcher read the target's knobs, and a tracker's SDK parses
its own source while it imports (pydantic reads its models' docstrings). A failed parse
there made a W&B night lose its runs, and could make a knob unreadable. So on 3.11
every `ast.parse` of the process, the libraries' included, takes one lock.
"""
import sys

if sys.version_info[:2] == (3, 11):
    import ast
    import functools
    import threading

    if not getattr(ast.parse, "nightshift_serialised", False):
        _parse, _parsing = ast.parse, threading.RLock()

        @functools.wraps(_parse)
        def _serialised_parse(*args, **kwargs):
            with _parsing:
                return _parse(*args, **kwargs)

        _serialised_parse.nightshift_serialised = True    # type: ignore[attr-defined]
        ast.parse = _serialised_parse    # ast.literal_eval and inspect call it through the module
