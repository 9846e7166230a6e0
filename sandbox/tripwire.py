"""Tripwires: empty stand-ins laid over the data a run must not read, and watched.

A backend that can mount inside the run (the local sandbox's mount namespace, a Docker
container) covers each hidden thing with a stand-in of the run's own, bound read-only over
the real one:
- each `RunSpec.hidden` file of the data folder (the splits the step may not see) with an
  empty file;
- each source of the held-out bytes (`RunSpec.held_out`, found on this machine by
  sandbox.held_out: the standard-library packages val and test were cut from, in every Python
  installation; a corpus's val and test files) with an empty file, or a folder of empty files
  of the same names.
The run then sees empty files where the bytes were, and the harness watches the stand-ins
with inotify: an open of one, from inside a namespace or a container, is an open of the same
inode, so it is seen here. That makes "the training step read the held-out bytes" an
observation, not a guess from a traceback, and a run that catches the error and trains on
anyway is still caught.
"""
from __future__ import annotations

import glob
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sandbox.held_out import Cover
from sandbox.pids import pid_alive
from sandbox.protocol import HiddenFile


@dataclass(frozen=True)
class Laid:
    """One stand-in: `wire` (made here) goes over `target`; `data_path` is the target's path
    inside the data folder, for a backend that mounts the data elsewhere, else None."""

    wire: Path
    target: Path
    data_path: str | None = None


class Tripwires:
    """The tripwires of one run: `laid` to mount, `read()` for the labels opened so far."""

    def __init__(self, run_dir: Path, data_dir: Path, hidden: tuple[HiddenFile, ...],
                 sources: list[Cover] = ()) -> None:
        from inotify_simple import INotify, flags   # Linux only; imported where it is used

        self.folder, self._scratch = _folder(Path(run_dir))
        self._inotify = INotify()
        self._open, self._is_dir = flags.OPEN, flags.ISDIR
        self._labels: dict[int, str] = {}
        self._read: list[str] = []
        self.laid: list[Laid] = []
        for index, item in enumerate(hidden):
            target = Path(data_dir) / item.path
            if target.is_file():      # nothing there to read: nothing to hide
                wire = self._file(self.folder / f"{index}-{Path(item.path).name}", item.label)
                self.laid.append(Laid(wire, target, item.path))
        for index, cover in enumerate(sources):
            place = self.folder / "sources" / f"{index}-{Path(cover.target).name}"
            wire = self._tree(place, cover) if cover.is_dir else self._file(place, cover.label)
            self.laid.append(Laid(wire, Path(cover.target)))

    def _file(self, wire: Path, label: str) -> Path:
        wire.parent.mkdir(parents=True, exist_ok=True)
        wire.write_bytes(b"")
        os.chmod(wire, 0o444)
        self._labels[self._inotify.add_watch(str(wire), self._open)] = label
        return wire

    def _tree(self, root: Path, cover: Cover) -> Path:
        """A folder of empty files named as the cover's, every folder of it watched (a watch on
        a folder reports the opens of the files in it). Laid twice a run (training and
        evaluation) for thousands of files, so in plain strings and one call per file: with
        pathlib and a chmod each it took about a second a step (benchmarks/overhead)."""
        base = str(root)
        folders = {base}
        for rel in cover.files:
            parent = os.path.dirname(rel)
            while parent and os.path.join(base, parent) not in folders:
                folders.add(os.path.join(base, parent))
                parent = os.path.dirname(parent)
        for folder in sorted(folders):     # parents first
            os.makedirs(folder, exist_ok=True)
        for rel in cover.files:            # created read-only (0o444 under any usual umask)
            os.close(os.open(os.path.join(base, rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444))
        for folder in folders:
            self._labels[self._inotify.add_watch(folder, self._open)] = cover.label
        return root

    def read(self) -> list[str]:
        """The labels whose tripwire was opened, each once, in the order first seen (a folder
        listed is not a read: only an open of a file in it)."""
        for event in self._inotify.read(timeout=0):
            label = self._labels.get(event.wd)
            if (label is not None and event.mask & self._open and not event.mask & self._is_dir
                    and label not in self._read):
                self._read.append(label)
        return list(self._read)

    def close(self) -> list[str]:
        """Stop watching and remove the stand-ins from memory; the labels read (stand-ins in
        the run folder are left for its cleanup)."""
        read = self.read()
        self._inotify.close()
        if self._scratch:
            shutil.rmtree(self.folder, ignore_errors=True)
        return read


# The stand-ins live in memory (tmpfs) where the machine has it: the held-out sources are
# thousands of files (6,111 in this machine's Python installations), laid twice a run, and on
# disk that took 0.7 to 5 s a step as the disk was busy, in memory 0.09 s. A harness
# killed mid-run leaves its folder; the next one sweeps it.
SCRATCH = Path("/dev/shm")
PREFIX = "nightshift-tripwires-"


def _folder(run_dir: Path) -> tuple[Path, bool]:
    """(where this run's stand-ins go, whether that is the in-memory scratch)."""
    if SCRATCH.is_dir() and os.access(SCRATCH, os.W_OK | os.X_OK):
        _sweep()
        try:
            return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=SCRATCH)), True
        except OSError:
            pass
    folder = run_dir / "tripwires"
    folder.mkdir(parents=True, exist_ok=True)
    return folder, False


def _sweep() -> None:
    """Remove the scratch folders of harnesses that are gone (killed before their close)."""
    for folder in glob.glob(str(SCRATCH / f"{PREFIX}*")):
        pid = os.path.basename(folder)[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def open_tripwires(run_dir: Path, data_dir: Path, hidden: tuple[HiddenFile, ...],
                   can_mount: str | None, sources: list[Cover] = ()) -> tuple[Tripwires | None, str]:
    """The run's tripwires and how hiding is enforced: (None, "none hidden") with nothing to
    hide, (None, "not enforced: <why>") when the backend cannot mount (`can_mount` is the
    reason it cannot, or None when it can), else (tripwires, "tripwires")."""
    if not hidden and not sources:
        return None, "none hidden"
    if can_mount is not None:
        return None, f"not enforced: {can_mount}"
    try:
        wires = Tripwires(run_dir, data_dir, hidden, sources)
    except (ImportError, OSError) as error:   # no inotify here (not Linux, watches exhausted)
        return None, f"not enforced: cannot watch files here ({error})"
    return wires, "tripwires"
