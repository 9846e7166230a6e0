"""A resume ends what an older harness left running before it runs anything; a git error in
the middle of a night ends it with one message, a loop_stopped and exit 4 (no traceback)."""
import json
import os
import subprocess
import sys
import time

from tests.loop_helpers import cli_env, events, loop_state, nightshift
from tests.preflight.test_prestart import repo_with


def test_a_resume_ends_the_runs_an_older_harness_left_running(tmp_path):
    repo = repo_with(tmp_path)
    env = cli_env(tmp_path / "data")
    assert nightshift(repo, "run", "--tag", "old", "--max-experiments", "1", env=env).returncode == 0
    # what a harness of an older version, killed with kill -9, left behind: a run in its own
    # session, marked as a run, writing under the tag's runs folder
    out = repo / "results" / "old" / "runs" / "e0009-s3-cand" / "out"
    out.mkdir(parents=True)
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                                env={"PATH": os.environ["PATH"], "NIGHTSHIFT_RUN_ID": "deadbeef",
                                     "NIGHTSHIFT_OUT": str(out)}, start_new_session=True)
    try:
        done = nightshift(repo, "run", "--tag", "old", "--max-experiments", "1", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        text = " ".join(done.stdout.split())
        assert f"ended 1 process an earlier harness of tag old left running: {leftover.pid} (run e0009-s3-cand)" in text
        assert leftover.wait(timeout=5) == -9
    finally:
        leftover.kill()
        leftover.wait()


def test_a_git_error_mid_night_records_loop_stopped_and_exits_4(tmp_path):
    repo = repo_with(tmp_path)
    env = cli_env(tmp_path / "data")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"knobs": {"DELAY": delay}, "description": f"DELAY {delay}: no change"}
                                  for delay in (0.2, 0.15, 0.12, 0.11)]))
    assert nightshift(repo, "run", "--tag", "g", "--max-experiments", "1",
                      "--researcher", "scripted", "--script", str(script), env=env).returncode in (0, 3)
    state = loop_state(repo, "g")
    next_id = f"e{state.next_index:04d}"
    # a lock git left moments ago (too young for the start checks to call it stale): the discard
    # of the next experiment cannot take its ref
    lock = repo / ".git" / "refs" / "nightshift" / "g" / "discarded" / f"{next_id}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    started = time.monotonic()
    done = nightshift(repo, "run", "--tag", "g", "--max-experiments", "1", "--researcher", "scripted",
                      "--script", str(script), env=env)
    assert done.returncode == 4, done.stdout + done.stderr
    assert time.monotonic() - started < 120
    assert "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert "loop stopped:" in message and f"{next_id}.lock" in message and "resumes" in message
    stopped = [e for e in events(repo, "g") if e["event"] == "loop_stopped"][-1]
    assert stopped["exit_code"] == 4 and f"{next_id}.lock" in stopped["reason"]
    lock.unlink()
    again = nightshift(repo, "run", "--tag", "g", "--max-experiments", "1", "--researcher", "scripted",
                       "--script", str(script), env=env)
    assert again.returncode in (0, 3), again.stdout + again.stderr
    assert loop_state(repo, "g").experiments[next_id].decided
