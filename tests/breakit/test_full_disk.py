"""A full disk, for real: the repository and its results on a small tmpfs (needs root to
mount; skipped otherwise, saying why). A night that starts on a full disk is refused before
it writes anything; a disk that fills mid-night ends it with one message and exit 4, never
a traceback, nothing of what was recorded lost; with room again the night resumes."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from agent.record.events import ExitCode
from tests.breakit.common import check_night, ledger_lines, leftovers, sleepy_repo
from tests.loop_helpers import cli_env, loop_state, nightshift

pytestmark = pytest.mark.breakit

SIZE_MB = 24


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root); not root here")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk, name="ballast"):
    """Write zeros until the disk is full; returns the file. Unbuffered: a buffered file
    keeps what a short write left over and raises ENOSPC again as it closes."""
    path = disk / name
    with open(path, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 16))
        except OSError:
            pass
    return path


def test_a_full_disk_refuses_the_start_and_a_disk_that_fills_mid_night_exits_4(small_disk, tmp_path):
    repo = sleepy_repo(small_disk / "user")
    env = cli_env(tmp_path / "data")

    ballast = fill(small_disk)
    refused = nightshift(repo, "run", "--tag", "full", "--max-experiments", "1", env=env)
    assert refused.returncode == ExitCode.LOOP, refused.stdout + refused.stderr
    assert "MB free on the disk" in " ".join(refused.stderr.split()) and "Traceback" not in refused.stderr
    assert not (repo / "results" / "full").exists()
    ballast.unlink()

    night = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "full", "--workers", "2"],
                             cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and '"experiment_proposed"' not in "".join(ledger_lines(repo, "full")):
        time.sleep(0.05)
    ballast = fill(small_disk)
    try:
        out, err = night.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        night.send_signal(signal.SIGKILL)
        out, err = night.communicate()
        pytest.fail(f"the night went on with a full disk: {out[-2000:]}{err[-2000:]}")
    assert night.returncode == ExitCode.LOOP, out + err
    assert "Traceback" not in err, err
    message = " ".join(err.split())
    assert "loop stopped:" in message and ("disk is full" in message or "No space left" in message), message
    print(f"\nfull disk mid-night: {message}")
    assert leftovers(repo, "full") == []
    check_night(repo, "full", closed=False)       # every line that made it parses, none twice
    recorded = ledger_lines(repo, "full")
    stopped = [line for line in recorded if '"loop_stopped"' in line]
    if stopped:
        assert '"exit_code": 4' in stopped[-1]
    else:   # the disk had no room for it either: the message says so
        assert "could not be recorded" in message

    ballast.unlink()
    resumed = nightshift(repo, "run", "--tag", "full", "--workers", "2", "--max-experiments", "1", env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    check_night(repo, "full", closed=True)
    assert ledger_lines(repo, "full")[:len(recorded)] == recorded     # nothing recorded was lost
    assert loop_state(repo, "full").decisions
    shutil.rmtree(repo / "results", ignore_errors=True)
