"""Digests of files and folders.

- `digest_files(root, paths)` before and after a run, `tampered(before, after)` for what
  changed: protected files, so a run that changed one is caught (status `tampered`). A folder
  digests its whole tree, a link its target text (never followed), a FIFO or device its type
  (never opened: reading one would block); a missing path digests as "missing".
- `folder_facts(path)`: files, bytes and a digest of every file's name, size and mtime, cheap
  (no reads), following links as a run reading the folder would: which data a run saw, and
  whether a staged copy is stale.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Iterable, Mapping

MISSING = "missing"


def digest_files(root: Path, paths: Iterable[str]) -> dict[str, str]:
    """sha256 of each path under `root` ("missing" when absent). A folder digests its whole
    content (relative names, file kinds and bytes), so adding, removing or editing any file
    inside it changes the digest. Symlinks are digested by their target, never followed."""
    root = Path(root)
    return {path: _digest(root / path) for path in paths}


def tampered(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """Paths whose digest differs between two `digest_files` results (or is in only one)."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def _digest(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return MISSING
    hasher = hashlib.sha256()
    if stat.S_ISDIR(mode):
        for current, dirs, files in os.walk(path):
            dirs.sort()
            linked = [d for d in dirs if os.path.islink(os.path.join(current, d))]
            for name in sorted(files + linked):
                full = os.path.join(current, name)
                rel = os.path.relpath(full, path).replace(os.sep, "/")
                hasher.update(f"{rel}\0{_digest(Path(full))}\0".encode())
        return "dir:" + hasher.hexdigest()
    if stat.S_ISLNK(mode):
        hasher.update(os.readlink(path).encode())
        return "link:" + hasher.hexdigest()
    if not stat.S_ISREG(mode):  # a FIFO would block the reader forever
        return f"special:{stat.S_IFMT(mode):o}"
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


def folder_facts(path: Path, max_files: int = 100_000) -> dict:
    """{"files", "bytes", "stat_digest"} (and "truncated" past `max_files`) of the folder or
    file at `path`: names, sizes and mtimes, links followed."""
    digest, files, size = hashlib.sha256(), 0, 0
    entries = [(Path(path).name, str(path))] if Path(path).is_file() else _walk(path)
    for rel, full in entries:
        try:
            info = os.stat(full)
        except OSError:
            continue
        files += 1
        size += info.st_size
        digest.update(f"{rel}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
        if files >= max_files:
            return {"files": files, "bytes": size, "stat_digest": digest.hexdigest()[:16], "truncated": True}
    return {"files": files, "bytes": size, "stat_digest": digest.hexdigest()[:16]}


def _walk(path: Path):
    for current, dirs, names in os.walk(path, followlinks=True):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(current, name)
            yield os.path.relpath(full, path), full
