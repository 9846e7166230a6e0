"""The tag's lock (agent/preflight/lock.py): one live holder, named when another comes; a lock
whose holder died (kill -9) is taken over, with a note saying whose it was."""
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from agent.preflight.lock import LOCK_FILE, Holder, TagLock, TagLocked, live_holder, read_holder
from tests.loop_helpers import PROJECT

HOLD = f'''
import sys, time
sys.path.insert(0, {str(PROJECT)!r})
from pathlib import Path
from agent.preflight.lock import TagLock
lock = TagLock.acquire(Path(sys.argv[1]), "t")
print("held", flush=True)
time.sleep(120)
'''


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of tmp_path/t."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "t")], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def test_a_second_taker_is_refused_naming_the_holders_pid_and_host(tmp_path, holder):
    with pytest.raises(TagLocked) as caught:
        TagLock.acquire(tmp_path / "t", "t")
    message = str(caught.value)
    assert f"PID {holder.pid} on {socket.gethostname()}" in message
    assert "tag t is in use" in message and "another --tag" in message
    assert caught.value.holder.pid == holder.pid
    assert live_holder(tmp_path / "t").pid == holder.pid


def test_a_dead_holders_lock_is_taken_over_with_a_note(tmp_path, holder):
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert read_holder(tmp_path / "t").pid == holder.pid       # the file still names it...
    assert live_holder(tmp_path / "t") is None                  # ...but it is not alive
    lock = TagLock.acquire(tmp_path / "t", "t")
    assert f"from PID {holder.pid}" in lock.note and "no longer running" in lock.note
    assert read_holder(tmp_path / "t").pid == os.getpid()
    lock.release()


def test_release_empties_the_file_so_the_next_taker_has_nothing_to_say(tmp_path):
    first = TagLock.acquire(tmp_path / "t", "t")
    record = json.loads((tmp_path / "t" / LOCK_FILE).read_text())
    assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
    first.release()
    first.release()      # idempotent
    assert (tmp_path / "t" / LOCK_FILE).read_text() == ""
    second = TagLock.acquire(tmp_path / "t", "t")
    assert second.note is None
    second.release()


def test_a_reused_pid_is_not_mistaken_for_the_holder(tmp_path):
    # the record names this very PID, but a process that started at another time
    (tmp_path / LOCK_FILE).write_text(json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "since": "earlier", "process_start": "1"}))
    assert not Holder(**json.loads((tmp_path / LOCK_FILE).read_text())).alive()
    assert live_holder(tmp_path) is None
