"""Whether a process still runs, by its PID: for the leftovers of a killed harness (stale
tripwire folders, a night's lock, sandboxed processes to wait out)."""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs: it exists and is not a zombie (a zombie has exited and only
    waits to be reaped). Without /proc, whether a signal could reach it."""
    fields = _stat(pid)
    if fields is not None:
        return fields[0] != "Z"
    if os.path.isdir("/proc/self"):
        return False   # /proc works, and has no such process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process
        return True
    return True


def process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot (Linux), else None: with the
    PID it tells a process from a later one that reused the number."""
    fields = _stat(pid)
    return fields[19] if fields is not None else None   # field 22 of stat(5)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after "pid (comm)", or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return fields if len(fields) > 19 else None
    except (OSError, IndexError):
        return None
