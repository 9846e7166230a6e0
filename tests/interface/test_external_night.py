"""A night driven by an agent outside the harness (--researcher external), end to end: the real
CLI, a real git repository, the real sandbox, and the agent a process of its own
(tests/interface/agent_player.py) that edits files and calls the documented commands."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.interface.toy_target import PROGRAM, toy_files
from tests.loop_helpers import PROJECT, cli_env, end_detached_night, git_out, loop_state, make_repo, nightshift
from tests.needs import needs

PLAYER = Path(__file__).with_name("agent_player.py")


def start_night(repo: Path, tag: str, env: dict, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", tag, *extra],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for_start(repo: Path, tag: str, night: subprocess.Popen, timeout: float = 120) -> None:
    """Until the night recorded its start (the agent's checkout needs an incumbent)."""
    ledger = repo / "results" / tag / "ledger.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ledger.exists() and '"loop_started"' in ledger.read_text():
            return
        if night.poll() is not None:
            pytest.fail(f"the night ended before it started: {night.communicate()}")
        time.sleep(0.2)
    pytest.fail("the night did not start")


def play(repo: Path, tag: str, env: dict, tmp_path: Path) -> dict:
    log = tmp_path / "agent.json"
    done = subprocess.run([sys.executable, str(PLAYER), str(repo), tag, str(log)], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr + (log.read_text() if log.exists() else "")
    return json.loads(log.read_text())


@pytest.mark.parametrize("sandbox", ["local", pytest.param("docker", marks=needs("docker"))])
def test_an_agent_process_drives_a_whole_night(tmp_path, sandbox, request):
    program = PROGRAM.replace("sandbox: local", f"sandbox: {sandbox}")
    if sandbox == "docker":
        from sandbox.docker import connect
        from sandbox.image import build_host_image

        build_host_image(connect(timeout_s=3), "nightshift:test-agent")
        program = program.replace("researcher:", "image: nightshift:test-agent\nresearcher:")
    repo = make_repo(tmp_path / "user", toy_files(program))
    env = cli_env(tmp_path / "data")
    night = start_night(repo, "ag", env, "--agent-silence", "5m")
    try:
        wait_for_start(repo, "ag", night)
        seen = play(repo, "ag", env, tmp_path)
        out, err = night.communicate(timeout=300)
    finally:
        if night.poll() is None:
            night.kill()
    # the agent ended the night: a normal end, with the reason, once all was decided
    assert night.returncode == 0, out + err
    assert "stopped: the agent ended the night" in out

    # a protected file in the edit: refused before filing, naming the file and the undo
    assert seen["refused"]["rc"] == 1 and "helper.py" in seen["refused"]["stderr"]
    assert "checkout" in seen["refused"]["stderr"]

    state = loop_state(repo, "ag")
    by_proposal = {e.extra.get("proposal"): e for e in state.experiments.values()}
    good = by_proposal[seen["p_good"]]
    # the decisive edit is kept, and recorded with what the agent registered before the run
    assert good.verdict == "keep", good
    assert good.prediction.direction == "improve" and good.researcher == "external"
    assert seen["verdicts"][seen["p_good"]]["verdict"] == "keep"
    # the garbage file: an invalid experiment that says why; the night went on
    garbage = by_proposal[seen["p_garbage"]]
    assert garbage.verdict == "invalid" and "unreadable" in garbage.invalid_reason
    assert seen["verdicts"][seen["p_garbage"]]["verdict"] == "invalid"
    # the second agent's proposal: decided (measured against the incumbent of its admission)
    assert by_proposal[seen["p_second"]].decided
    assert by_proposal[seen["p_second"]].extra["agent"] == "second"
    # the copy checked out after the keep holds the kept change; the last edit was rebased on it
    assert seen["checkout_again"]["base"] == good.commit
    assert "LR = 0.3" in seen["incumbent_source"]
    assert by_proposal[seen["p_last"]].parent == state.incumbent or by_proposal[seen["p_last"]].verdict == "keep"
    # the commit sneaked onto the night's branch: filed, never lost, never a candidate
    refs = git_out(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/nightshift/ag/discarded")
    assert f"refs/nightshift/ag/discarded/orphan-{seen['sneaked'][:8]} {seen['sneaked']}" in refs
    assert git_out(repo, "rev-parse", "refs/heads/nightshift/ag").strip() == state.incumbent
    assert all(e.commit != seen["sneaked"] for e in state.experiments.values())
    # every proposal filed became exactly one experiment (or was superseded and re-applied)
    filed = {seen[k] for k in ("p_good", "p_second", "p_garbage", "p_last")}
    assert set(by_proposal) == filed


def test_a_silent_agent_stops_the_night_with_the_reason(tmp_path):
    repo = make_repo(tmp_path / "user", toy_files())
    done = nightshift(repo, "run", "--tag", "quiet", "--agent-silence", "4s",
                      env=cli_env(tmp_path / "data"), timeout=300)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "no proposal from the agent" in done.stderr
    state = loop_state(repo, "quiet")
    assert state.stopped_reason.startswith("ResearcherError") and not state.experiments


def test_a_killed_night_takes_each_proposal_once_when_it_resumes(tmp_path):
    repo = make_repo(tmp_path / "user", toy_files())
    env = cli_env(tmp_path / "data")
    night = start_night(repo, "kill", env, "--agent-silence", "5m")
    try:
        wait_for_start(repo, "kill", night)
        copy = json.loads(nightshift(repo, "checkout", "--tag", "kill", "--json", env=env).stdout)
        toy = Path(copy["target_path"])
        toy.write_text(toy.read_text().replace("LR = 1.0", "LR = 0.3"))
        args = ("--tag", "kill", "--hypothesis", "h", "--predict", "improve", "--delta", "-0.4",
                "--interval", "-0.6,-0.2", "--json")
        first = json.loads(nightshift(repo, "propose", "-m", "first", *args, env=env).stdout)["proposal"]
        ledger = repo / "results" / "kill" / "ledger.jsonl"
        deadline = time.monotonic() + 120
        while '"experiment_proposed"' not in ledger.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        night.send_signal(signal.SIGKILL)      # taken and committed, not decided
        night.wait(30)
    finally:
        if night.poll() is None:
            night.kill()
    # while no night runs: a proposal is filed all the same, and `wait` says nobody decides it
    toy.write_text(toy.read_text().replace("LR = 0.3", "LR = 0.29"))
    second = json.loads(nightshift(repo, "propose", "-m", "second", *args, env=env).stdout)
    assert second["night_running"] is False
    waited = nightshift(repo, "wait", "--tag", "kill", second["proposal"], "--timeout", "5s", env=env)
    assert waited.returncode == 4 and "no night runs" in waited.stderr
    nightshift(repo, "done", "--tag", "kill", env=env)    # said to the dead night: not to the next
    # resumed in the background, as an agent starts it: back once the night holds the tag
    resumed = nightshift(repo, "run", "--tag", "kill", "--agent-silence", "5m", "--detach", env=env)
    assert resumed.returncode == 0 and "runs in the background" in resumed.stdout, resumed.stderr
    try:
        for proposal in (first, second["proposal"]):
            verdict = nightshift(repo, "wait", "--tag", "kill", proposal, "--timeout", "4m", "--json", env=env)
            assert verdict.returncode == 0, verdict.stderr
        nightshift(repo, "done", "--tag", "kill", env=env)
        ledger = repo / "results" / "kill" / "ledger.jsonl"
        deadline = time.monotonic() + 300
        # the killed night wrote no loop_stopped: the first one is the resumed night's end
        while '"loop_stopped"' not in ledger.read_text() and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        end_detached_night(repo, "kill")
    state = loop_state(repo, "kill")
    proposals = [e.extra.get("proposal") for e in state.experiments.values()]
    assert sorted(proposals) == sorted([first, second["proposal"]]), proposals
    assert all(e.decided for e in state.experiments.values())
