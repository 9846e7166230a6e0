"""kill -9 at random moments of a two-worker night, twenty times, then a clean resume.

Whenever the harness dies (starting up, taking the lock, launching runs, recording them,
committing a candidate, deciding, moving git), the next invocation must resume with: every
ledger line parsing, no run or decision recorded twice, the branch at the ledger's
incumbent, every discarded commit under its ref, results.tsv agreeing with the ledger, and
none of the killed harness's runs still going.
"""
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.breakit.common import check_night, leftovers, pgrep, sleepy_repo
from tests.loop_helpers import cli_env, events, git_out, loop_state, nightshift

pytestmark = pytest.mark.breakit

KILLS = 20


def loop_starts(repo, tag: str = "sweep") -> int:
    """How many invocations reached the loop (their loop_started or loop_resumed line)."""
    path = repo / "results" / tag / "ledger.jsonl"
    text = path.read_text() if path.exists() else ""
    return text.count('"loop_started"') + text.count('"loop_resumed"')


def test_twenty_kill_9s_at_random_moments_then_a_resume_lose_and_duplicate_nothing(tmp_path):
    repo = sleepy_repo(tmp_path / "user")
    env = cli_env(tmp_path / "data")
    rng = random.Random(14)
    figures = {"kills": 0, "resumes": 0, "events_checked": 0, "leftovers": 0, "moments": []}
    for kill in range(KILLS):
        starts = loop_starts(repo)
        proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "sweep",
                                 "--workers", "2"], cwd=repo, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        began = time.monotonic()
        if kill % 2 == 1:      # while it starts up: the lock, the checks, the workspace, git
            time.sleep(rng.uniform(0.2, 3.0))
        else:                  # while the loop runs: launching, recording, committing, deciding
            while loop_starts(repo) == starts and proc.poll() is None and time.monotonic() - began < 60:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 2.0))
        moment = time.monotonic() - began
        if proc.poll() is not None:
            pytest.fail(f"the night ended by itself ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
        figures["kills"] += 1
        figures["moments"].append(round(moment, 2))
        left = leftovers(repo, "sweep")
        figures["leftovers"] += len(left)
        assert left == [], f"runs outlived their killed harness: {left}"
        figures["events_checked"] += check_night(repo, "sweep", closed=False) if (
            repo / "results" / "sweep" / "ledger.jsonl").exists() else 0
    done = nightshift(repo, "run", "--tag", "sweep", "--workers", "2", "--max-experiments", "2", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    final = check_night(repo, "sweep", closed=True)
    figures["events_checked"] += final
    state = loop_state(repo, "sweep")
    kinds = [e["event"] for e in events(repo, "sweep")]
    orphans = git_out(repo, "for-each-ref", "refs/nightshift/sweep/discarded/orphan-*")
    figures.update(ledger_events=final, loop_started=kinds.count("loop_started"),
                   resumes=kinds.count("loop_resumed"), experiments=len(state.experiments),
                   decided=len(state.decisions), runs=len(state.runs),
                   interrupted=len(state.interrupted), orphans=len(orphans.splitlines()))
    # half the kills wait for the loop to start: each of those is a loop_started or _resumed
    assert figures["loop_started"] + figures["resumes"] >= KILLS // 2 and state.decisions
    assert leftovers(repo, "sweep") == [] and not [p for p in pgrep("sleepy.py") if str(repo) in p]
    print(f"\nkill -9 sweep: {figures}")
