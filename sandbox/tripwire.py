"""Tripwires: empty files laid over the data a run must not read, and watched.

A backend that can mount inside the run (the local sandbox's mount namespace, a Docker
container) covers each `RunSpec.hidden` file with an empty file of the run's own and binds
it read-only over the real one. The run then sees an empty file where the hidden split was,
and the harness watches the tripwire with inotify: an open of it, from inside a namespace or
a container, is an open of the same inode, so it is seen here. That makes "the training step
read the validation split" an observation, not a guess from a traceback, and a run that
catches the error and trains on anyway is still caught.

Reads through another path to the same bytes are not covered (the default corpus is the
standard library, which every Python process can read; see docs/integrity.md for what
catches that).
"""
from __future__ import annotations

import os
from pathlib import Path

from sandbox.protocol import HiddenFile


class Tripwires:
    """The tripwires of one run: `covers` to mount, `read()` for the labels opened so far."""

    def __init__(self, run_dir: Path, data_dir: Path, hidden: tuple[HiddenFile, ...]) -> None:
        from inotify_simple import INotify, flags   # Linux only; imported where it is used

        self.folder = Path(run_dir) / "tripwires"
        self.folder.mkdir(parents=True, exist_ok=True)
        self._inotify = INotify()
        self._open = flags.OPEN
        self._labels: dict[int, str] = {}
        self._read: list[str] = []
        self.covers: list[tuple[Path, Path, str]] = []   # (tripwire, the file it covers, relative path)
        for index, item in enumerate(hidden):
            target = Path(data_dir) / item.path
            if not target.is_file():      # nothing there to read: nothing to hide
                continue
            wire = self.folder / f"{index}-{Path(item.path).name}"
            wire.write_bytes(b"")
            os.chmod(wire, 0o444)
            self._labels[self._inotify.add_watch(str(wire), self._open)] = item.label
            self.covers.append((wire, target, item.path))

    def read(self) -> list[str]:
        """The labels whose tripwire was opened, each once, in the order first seen."""
        for event in self._inotify.read(timeout=0):
            label = self._labels.get(event.wd)
            if label is not None and event.mask & self._open and label not in self._read:
                self._read.append(label)
        return list(self._read)

    def close(self) -> list[str]:
        """Stop watching; the labels read (the files are left for the run folder's cleanup)."""
        read = self.read()
        self._inotify.close()
        return read


def open_tripwires(run_dir: Path, data_dir: Path, hidden: tuple[HiddenFile, ...],
                   can_mount: str | None) -> tuple[Tripwires | None, str]:
    """The run's tripwires and how hiding is enforced: (None, "none hidden") with nothing to
    hide, (None, "not enforced: <why>") when the backend cannot mount (`can_mount` is the
    reason it cannot, or None when it can), else (tripwires, "tripwires")."""
    if not hidden:
        return None, "none hidden"
    if can_mount is not None:
        return None, f"not enforced: {can_mount}"
    try:
        wires = Tripwires(run_dir, data_dir, hidden)
    except (ImportError, OSError) as error:   # no inotify here (not Linux, watches exhausted)
        return None, f"not enforced: cannot watch files here ({error})"
    return wires, "tripwires"
