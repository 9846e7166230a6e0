"""Two `nightshift run`s on one tag, started 0.3 s apart: one night runs, the other exits at
once with exit 5 naming the first's PID and writes nothing; `seed` and `status` still work
on the running tag; the night's records count every run once."""
import signal
import subprocess
import sys
import time

import pytest

from agent.record.events import ExitCode
from tests.breakit.common import check_night, ledger_lines, sleepy_repo
from tests.breakit.test_kill_sweep import loop_starts
from tests.loop_helpers import cli_env, loop_state, nightshift

pytestmark = pytest.mark.breakit


def start(repo, env):
    return subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "both", "--workers", "2"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_runs_on_one_tag_one_runs_and_the_other_is_refused_naming_its_pid(tmp_path):
    repo = sleepy_repo(tmp_path / "user")
    env = cli_env(tmp_path / "data")
    first = start(repo, env)
    time.sleep(0.3)
    second = start(repo, env)
    procs = {first.pid: first, second.pid: second}
    deadline = time.monotonic() + 60
    loser = None
    while loser is None and time.monotonic() < deadline:
        loser = next((p for p in procs.values() if p.poll() is not None), None)
        time.sleep(0.05)
    assert loser is not None, "both runs kept going on one tag"
    winner = next(p for p in procs.values() if p is not loser)
    try:
        out, err = loser.communicate()
        message = " ".join(err.split())
        assert loser.returncode == ExitCode.BUSY, out + err
        assert f"tag both is in use: its loop runs as PID {winner.pid} on" in message
        assert "Traceback" not in err and "started tag" not in out and "resuming" not in out

        # while it runs: another run is refused at once, seed queues, status answers
        while loop_starts(repo, "both") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = len(ledger_lines(repo, "both"))
        began = time.monotonic()
        third = nightshift(repo, "run", "--tag", "both", "--max-experiments", "1", env=env)
        assert third.returncode == ExitCode.BUSY and f"PID {winner.pid}" in " ".join(third.stderr.split())
        assert time.monotonic() - began < 20
        seeded = nightshift(repo, "seed", "--tag", "both", "try LEVEL=1.5", env=env)
        assert seeded.returncode == 0 and "queued h001" in seeded.stdout
        status = nightshift(repo, "status", "--tag", "both", env=env)
        assert status.returncode == 0 and "both:" in status.stdout
        assert "interrupted (no loop runs" not in status.stdout
        assert len(ledger_lines(repo, "both")) >= lines + 1       # the hypothesis, and the night's lines
    finally:
        winner.send_signal(signal.SIGINT)
        winner.communicate(timeout=90)
    assert winner.returncode in (130, -signal.SIGINT)
    state = loop_state(repo, "both")
    kinds = [line.split('"event": "')[1].split('"')[0] for line in ledger_lines(repo, "both")]
    assert kinds.count("loop_started") == 1 and kinds.count("loop_resumed") == 0
    assert "h001" in state.hypotheses
    check_night(repo, "both", closed=True)
