"""One loop per tag: `results/<tag>/lock`, held for as long as a `run` (or `noise`) of the
tag lives.

Two loops on one tag count runs twice, record runs after their decision and fight over
the branch, so the second is refused at once, naming the holder. The lock is an advisory
`flock` on the file, which the kernel drops when its holder dies however it dies (kill -9
included), so a lock is never stuck; the file also says who holds it (PID, host, process
start time, since when, the command), for the refusal's message and for `status`, which
reads it without taking the lock. A lock left by a dead holder is taken over with a note
saying whose it was.

The file is emptied, never deleted, on release: deleting a flock'ed file lets a waiting
process lock the old inode while a third creates a new one, and both would hold "the" lock.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from sandbox.pids import pid_alive, process_start

LOCK_FILE = "lock"
READ_TRIES = 20          # a holder writes who it is just after locking: wait that long for it


class TagLocked(RuntimeError):
    """Another live process holds the tag's lock. The message names it and the fix."""

    def __init__(self, message: str, holder: "Holder | None") -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a tag's lock."""

    pid: int
    host: str
    since: str                     # ISO time it took the lock
    command: str = ""
    process_start: str | None = None   # /proc/<pid>/stat start time: tells a reused PID apart

    def alive(self) -> bool:
        """Whether this holder still runs. A holder on another host (a shared filesystem) is
        presumed alive: its processes cannot be seen from here."""
        if self.host != socket.gethostname():
            return True
        started = process_start(self.pid)
        if started is None:
            return pid_alive(self.pid)
        return self.process_start is None or started == self.process_start

    def describe(self) -> str:
        return f"PID {self.pid} on {self.host} (since {self.since}: {self.command or '?'})"


def read_holder(folder: Path) -> Holder | None:
    """What the lock file of `folder` says (None when it is absent, empty or unreadable)."""
    try:
        text = (Path(folder) / LOCK_FILE).read_text(encoding="utf-8")
        data = json.loads(text) if text.strip() else None
        return Holder(**data) if isinstance(data, dict) else None
    except (OSError, ValueError, TypeError):
        return None


def live_holder(folder: Path) -> Holder | None:
    """The live process that holds the tag's lock, if any (what `status` asks)."""
    holder = read_holder(folder)
    return holder if holder is not None and holder.alive() else None


def refuse_if_locked(folder: Path, tag: str) -> None:
    """TagLocked when a live process holds the tag's lock; reads only (writes nothing)."""
    holder = live_holder(folder)
    if holder is not None and holder.pid != os.getpid():
        raise TagLocked(_locked_message(tag, holder), holder)


def _locked_message(tag: str, holder: Holder | None) -> str:
    who = holder.describe() if holder else "a process that is starting"
    return (f"tag {tag} is in use: its loop runs as {who}. One loop per tag: wait for it, stop "
            f"it (Ctrl-C, or kill {holder.pid if holder else '<pid>'}), or pick another --tag. "
            f"`nightshift seed` and `nightshift status` work while it runs.")


class TagLock:
    """The held lock of one tag. `TagLock.acquire(folder)`; `release()` when done (also at
    exit: the kernel drops a dead process's flock)."""

    def __init__(self, folder: Path, fd: int, note: str | None) -> None:
        self.folder, self._fd, self.note = folder, fd, note

    @classmethod
    def acquire(cls, folder: Path, tag: str) -> "TagLock":
        """Take the lock of the tag whose results folder is `folder` (created if missing), or
        raise TagLocked naming the live holder. `note` says whose stale lock was taken over."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _wait_for_holder(folder)
            raise TagLocked(_locked_message(tag, holder), holder) from None
        previous = read_holder(folder)
        note = None
        if previous is not None and previous.pid != os.getpid():
            note = (f"took over the lock of tag {tag} from {previous.describe()}, which is no "
                    f"longer running")
        me = Holder(pid=os.getpid(), host=socket.gethostname(),
                    since=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300],
                    process_start=process_start(os.getpid()))
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(asdict(me)) + "\n").encode("utf-8"), 0)
        os.fsync(fd)
        return cls(folder, fd, note)

    def release(self) -> None:
        """Empty the file and unlock. Idempotent."""
        if self._fd < 0:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass   # a full or gone disk: the flock still goes with the descriptor
        os.close(self._fd)
        self._fd = -1


def _wait_for_holder(folder: Path) -> Holder | None:
    """The holder's record, waiting briefly for a holder that has locked but not written."""
    holder = None
    for _ in range(READ_TRIES):
        holder = read_holder(folder)
        if holder is not None and holder.alive():
            return holder
        time.sleep(0.01)
    return holder
