"""sandbox/pids.py: a process that runs, one that exited and waits to be reaped, one gone."""
from __future__ import annotations

import os
import subprocess
import time

from sandbox.pids import pid_alive, process_start


def test_a_running_process_is_alive_and_a_zombie_or_a_reaped_one_is_not():
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert pid_alive(child.pid)
        child.kill()
        deadline = time.monotonic() + 10
        while pid_alive(child.pid) and time.monotonic() < deadline:   # killed, not yet reaped
            time.sleep(0.05)
        assert not pid_alive(child.pid) and child.poll() is not None
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid)


def test_a_process_start_tells_this_process_from_another():
    mine = process_start(os.getpid())
    assert mine is not None and mine == process_start(os.getpid())
    child = subprocess.Popen(["sleep", "30"])
    try:
        theirs = process_start(child.pid)
        assert theirs is not None and int(theirs) > int(mine)   # clock ticks since boot: started later
    finally:
        child.kill()
        child.wait()
    assert process_start(child.pid) is None
