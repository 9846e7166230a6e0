"""Folders made read-only and removed again, whatever a run or a read-only snapshot left their
permissions: one copy for the workspace's snapshots, the sandbox's working directories and the
clusters' staging areas. Links are never followed (a chmod through a link would change a file
outside the tree)."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path


def read_only_tree(root: Path) -> None:
    """Every regular file of `root` read-only (executables keep their x bits), then every
    folder, bottom-up, so a folder loses its write bit only after everything inside it."""
    for current, dirs, files in os.walk(root, topdown=False):
        for name in files:
            full = os.path.join(current, name)
            mode = os.lstat(full).st_mode
            if stat.S_ISREG(mode):
                os.chmod(full, 0o555 if mode & stat.S_IXUSR else 0o444)
        for name in dirs:
            full = os.path.join(current, name)
            if not os.path.islink(full):
                os.chmod(full, 0o555)
    os.chmod(root, 0o555)


def remove_tree(path: Path) -> None:
    """Remove a file, a link or a whole folder, first giving back the write bits a read-only
    snapshot, a run or an overlay took away. Nothing there is not an error; what cannot be
    removed is left (a cleanup never fails the work it cleans up after)."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return
    _writable(path)
    for current, dirs, _ in os.walk(path):   # top-down: each folder opened before it is entered
        for name in dirs:
            _writable(os.path.join(current, name))
    shutil.rmtree(path, ignore_errors=True)


def _writable(folder: str | Path) -> None:
    if not os.path.islink(folder):
        try:
            os.chmod(folder, 0o700)
        except OSError:
            pass
