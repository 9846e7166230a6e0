"""Several runs in flight: real workers, sleep-based scripts, the real CLI and sandbox.

What must hold: runs really overlap; no (commit, seed, role) runs twice; a candidate kept
while others are in flight supersedes them (never kept on evidence against a gone incumbent)
and re-applies their diffs when they merge; a kill -9 with four runs in flight resumes with
nothing lost or duplicated and nothing left running; Ctrl-C exits 130 with every run closed;
each worker gets its own device (fake GPU lists) or its own cores.
"""
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from agent.cli.display import RichObserver
from agent.night.loop import StopRules
from agent.night.session import build_session
from agent.program import load_program
from agent.record.events import Role, Verdict
from sandbox import Status
from tests.loop_helpers import cli_env, events, git_out, loop_state, make_repo, nightshift

SLEEPY = '''\
import json, os, random, time
LEVEL = 2.0         # search: float(1.0, 3.0)
OFFSET = 0.0        # search: float(-0.2, 0.2)
DELAY = 0.5         # search: float(0.1, 5.0)
seed = int(os.environ["NIGHTSHIFT_SEED"])
time.sleep(DELAY)
value = LEVEL + OFFSET + random.Random(seed).gauss(0.0, 0.01)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as f:
    json.dump({"val_bpb": value, "affinity": sorted(os.sched_getaffinity(0)),
               "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}, f)
'''

PROGRAM = '''\
---
target: sleepy.py
protected: []
command: python sleepy.py
prepare: null
budget: 20s
grace: 30s
seeds: {baseline: 4, screen: 1, max: 4}
sandbox: local
researcher: optuna
metric: val_bpb
---
Sleep-based runs: DELAY is how long a run takes, LEVEL + OFFSET its metric.
'''


def repo_with(tmp_path, delay="0.5"):
    return make_repo(tmp_path / "user", {"sleepy.py": SLEEPY.replace("DELAY = 0.5", f"DELAY = {delay}"),
                                         "program.md": PROGRAM})


def finished_runs(state):
    return [r for r in state.runs if r.status != Status.INTERRUPTED]


def assert_no_run_twice(state):
    """No (commit, seed, role, experiment) ran twice, but for the night's one same-seed repeat
    of a baseline seed (the rule's repeat_seeds), which the fold records as a repeat. (A
    bracket, the incumbent run again on a seed for one candidate, is a reference recorded for
    that experiment: its own measurement.)"""
    keys = [(r.commit, r.seed, r.role, r.experiment) for r in finished_runs(state)]
    repeated = [key for key, n in Counter(keys).items() if n > 1]
    assert len(repeated) <= 1 and all(n <= 2 for n in Counter(keys).values()), \
        f"a (commit, seed, role, experiment) ran twice: {repeated}"
    for commit, seed, role, _ in repeated:
        assert role == Role.REFERENCE and seed == 0
        assert [(r.commit, r.seed) for r in state.repeats] == [(commit, seed)]


def most_at_once(runs) -> int:
    edges = sorted([(r.started, 1) for r in runs] + [(r.ended, -1) for r in runs])
    now = best = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def leftovers(repo) -> list[int]:
    """Processes still working in this repository's run folders or snapshots (only ours:
    other people's runs on a shared machine do not count)."""
    results = str(repo / "results")
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/cwd").startswith(results):
                    found.append(int(name))
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_four_workers_overlap_and_no_seed_runs_twice(tmp_path):
    repo = repo_with(tmp_path)
    done = nightshift(repo, "run", "--tag", "w4", "--workers", "4", "--max-experiments", "6",
                      env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    state = loop_state(repo, "w4")
    runs = finished_runs(state)
    assert most_at_once(runs) >= 3                      # the baseline's four seeds at least
    assert_no_run_twice(state)
    assert {r.worker for r in runs} == {0, 1, 2, 3}
    # two cores, four workers: each run is pinned to one core, as its worker's device says
    for run in runs:
        assert run.device == f"cpu:{run.metrics['affinity'][0]}" and len(run.metrics["affinity"]) == 1
    started = next(e for e in events(repo, "w4") if e["event"] == "loop_started")
    assert started["workers"] == 4 and started["records_looks"] is True
    assert len([e for e in state.decisions]) >= 6
    assert git_out(repo, "rev-parse", "nightshift/w4") == state.incumbent


@pytest.mark.slow
def test_a_keep_supersedes_the_candidates_in_flight_and_reapplies_their_diffs(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"knobs": {"LEVEL": 1.5}, "description": "much better, fast"},
        {"knobs": {"OFFSET": -0.05, "DELAY": 4.0}, "description": "a little better, slow"},
        {"knobs": {"DELAY": 4.5}, "description": "no change, slow"},
        {"knobs": {"LEVEL": 2.5, "DELAY": 4.0}, "description": "worse, slow, on LEVEL's line"},
    ]))
    repo = repo_with(tmp_path)
    done = nightshift(repo, "run", "--tag", "k", "--workers", "4", "--researcher", "scripted",
                      "--script", str(script), "--max-experiments", "6",
                      env=cli_env(tmp_path / "data"))
    state = loop_state(repo, "k")
    assert done.returncode in (0, 3), done.stdout + done.stderr
    first = state.experiments["e0001"]
    assert first.verdict == Verdict.KEEP
    superseded = [e for e in state.experiments.values() if e.verdict == Verdict.SUPERSEDED]
    assert superseded, "the slow candidates were still in flight when e0001 was kept"
    for experiment in superseded:       # each names the keep that made its incumbent stale
        keeper = state.experiments[experiment.decision.reason.split()[0]]
        assert "was kept while this ran" in experiment.decision.reason
        assert keeper.verdict == Verdict.KEEP and keeper.parent == experiment.parent
    # never kept on evidence against an incumbent that is gone
    for decision in state.decisions:
        if decision.verdict == Verdict.KEEP:
            assert decision.incumbent == state.experiments[decision.id].parent
    # a superseded diff that merges comes back as a new candidate on the new incumbent...
    reapplied = [e for e in state.experiments.values() if e.rebased and e.rebased.source]
    assert reapplied and all(e.parent == first.commit for e in reapplied)
    for experiment in reapplied:
        source = git_out(repo, "show", f"{experiment.commit}:sleepy.py")
        assert "LEVEL = 1.5" in source and ("DELAY = 4" in source)
    # ...and one that changes the kept line is dropped with the reason in the ledger
    conflicts = [r for r in state.rebases if r.outcome == "conflict" and r.source]
    assert all("does not apply" in state.experiments[r.source].decision.reason for r in conflicts)
    assert_no_run_twice(state)


@pytest.mark.slow
def test_a_keep_recorded_just_before_a_kill_supersedes_its_stale_candidates_on_resume(tmp_path):
    """A kill (or Ctrl-C) between a keep's ledger line and the supersedes that follow it left a
    candidate pending against the old incumbent; the resume used to judge it on that evidence
    and refuse the keep in git ("does not descend from the branch head"). It is superseded now,
    as it would have been."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"knobs": {"LEVEL": 1.5}, "description": "much better, fast"},
        {"knobs": {"LEVEL": 1.4, "DELAY": 4.0}, "description": "better still, slow"},
    ]))
    repo = repo_with(tmp_path)
    env = cli_env(tmp_path / "data")
    done = nightshift(repo, "run", "--tag", "k", "--workers", "4", "--researcher", "scripted",
                      "--script", str(script), "--max-experiments", "2", env=env)
    assert done.returncode in (0, 3), done.stdout + done.stderr
    ledger = repo / "results" / "k" / "ledger.jsonl"
    lines = ledger.read_text().splitlines(keepends=True)
    keep = next(i for i, line in enumerate(lines)
                if json.loads(line)["event"] == "decision" and json.loads(line)["verdict"] == "keep")
    assert any(json.loads(line).get("verdict") == "superseded" for line in lines[keep + 1:])
    ledger.write_text("".join(lines[:keep + 1]))       # killed right after the keep's line
    resumed = nightshift(repo, "run", "--tag", "k", "--workers", "4", "--researcher", "scripted",
                         "--script", str(script), "--max-experiments", "1", env=env)
    assert resumed.returncode in (0, 3), resumed.stdout + resumed.stderr
    assert "superseded (the keep of its incumbent's successor was recorded" in resumed.stdout
    state = loop_state(repo, "k")
    stale = state.experiments["e0002"]
    assert stale.verdict == Verdict.SUPERSEDED and "was kept while this ran" in stale.decision.reason
    for decision in state.decisions:                   # never kept against a gone incumbent
        if decision.verdict == Verdict.KEEP:
            assert decision.incumbent == state.experiments[decision.id].parent
    assert_no_run_twice(state)


@pytest.mark.slow
def test_kill_9_with_four_runs_in_flight_resumes_with_nothing_lost_or_duplicated(tmp_path):
    repo = repo_with(tmp_path, delay="3.0")
    env = cli_env(tmp_path / "data")
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "kill", "--workers",
                             "4", "--max-experiments", "4"], cwd=repo, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ledger = repo / "results" / "kill" / "ledger.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        started = {json.loads(l)["run_id"] for l in lines if '"run_started"' in l}
        ended = {json.loads(l)["run_id"] for l in lines if '"run_finished"' in l}
        if len(started - ended) >= 4:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("four runs were never in flight at once")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    gone_by = time.monotonic() + 10.0    # the parent-death signal; the kernel, on busy cores
    while leftovers(repo) and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert leftovers(repo) == [], "a run outlived its killed harness"
    again = nightshift(repo, "run", "--tag", "kill", "--workers", "4", "--max-experiments", "4", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    state = loop_state(repo, "kill")
    assert len(state.interrupted) >= 4 and not state.in_flight       # closed by the resume
    assert_no_run_twice(state)
    assert all(e.decided for e in state.experiments.values())
    assert git_out(repo, "rev-parse", "nightshift/kill") == state.incumbent
    for experiment in state.experiments.values():
        if experiment.commit and experiment.verdict != Verdict.KEEP:
            ref = f"refs/nightshift/kill/discarded/{experiment.id}"
            assert git_out(repo, "rev-parse", ref) == experiment.commit
    assert git_out(repo, "for-each-ref", "refs/nightshift/kill/pending") == ""


@pytest.mark.slow
def test_ctrl_c_with_runs_and_a_proposal_in_flight_exits_130_and_leaves_nothing(tmp_path):
    repo = repo_with(tmp_path, delay="4.0")
    env = cli_env(tmp_path / "data")
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "int", "--workers",
                             "3"], cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    ledger = repo / "results" / "int" / "ledger.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if ledger.exists() and '"role": "candidate"' in ledger.read_text():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    state = loop_state(repo, "int")
    assert state.stopped_reason == "interrupted" and not state.in_flight
    assert state.interrupted and all(r.status == Status.INTERRUPTED for r in state.interrupted)
    assert leftovers(repo) == []
    resumed = nightshift(repo, "run", "--tag", "int", "--workers", "3", "--max-experiments", "1", env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr


def test_each_worker_gets_its_own_gpu_from_a_fake_device_list(tmp_path, monkeypatch):
    monkeypatch.setenv("NIGHTSHIFT_DATA_ROOT", str(tmp_path / "data"))
    repo = repo_with(tmp_path, delay="0.2")
    program = load_program(repo / "program.md", {"seeds.baseline": 3, "workers": "auto"})
    session = build_session(program, "gpu", researcher="optuna", sandbox="local",
                            observer=RichObserver(), gpus=[5, 7, 9])
    session.loop.run(StopRules(max_experiments=1))
    session.close()
    runs = finished_runs(session.loop.state)
    assert {r.device for r in runs} <= {"cuda:5", "cuda:7", "cuda:9"} and len(runs) >= 3
    for run in runs:
        assert run.metrics["cuda"] == run.device.removeprefix("cuda:")
        assert run.worker == {"cuda:5": 0, "cuda:7": 1, "cuda:9": 2}[run.device]
