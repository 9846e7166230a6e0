"""Filesystem and git errors in words a person acts on: what is wrong, and where.

A full disk mid-night surfaces as an OSError from the ledger, a run's folder or the TSV,
or as a git command's stderr (WorkspaceError); either way the night ends with one line
saying which (see `ResearchLoop.run`), never a traceback.
"""
from __future__ import annotations

import errno

_WHAT = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
         errno.EROFS: "the filesystem is read-only", errno.EACCES: "permission denied",
         errno.EIO: "the disk reported an I/O error"}


def describe_error(error: BaseException) -> str:
    """`error` as one line: for an OSError what went wrong and at which file."""
    if isinstance(error, OSError):
        what = _WHAT.get(error.errno or 0, error.strerror or str(error))
        where = f" at {error.filename}" if error.filename else ""
        return f"{what}{where} ([Errno {error.errno}] {error.strerror or type(error).__name__})"
    return str(error)
