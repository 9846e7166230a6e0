"""The research loop end to end, through the real CLI, with the real train.py.

A throw-away user repository, a tiny budget, the local sandbox and the optuna researcher:
the branch, the refs of discarded commits, the ledger and results.tsv must agree, and a
second `run` must resume rather than start over.
"""
import signal
import subprocess
import sys
import time

import pytest

from tests.loop_helpers import cli_env, events, git_out, loop_state, nightshift, project_repo

pytestmark = pytest.mark.slow

FAST = dict(budget="2s", grace="90s", sandbox="local", researcher="optuna",
            seeds="{baseline: 2, screen: 1, max: 2}")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def test_loop_runs_records_and_resumes(tmp_path, data_root):
    repo = project_repo(tmp_path / "user", **FAST)
    env = cli_env(data_root)
    user_head = git_out(repo, "rev-parse", "HEAD")

    first = nightshift(repo, "run", "--tag", "e2e", "--max-experiments", "2", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    state = loop_state(repo, "e2e")
    assert len(state.experiments) == 2 and state.pending is None
    # honest knob changes are judged by the keep rule, never flagged; the evaluator measured them
    assert not any(e.verdict.is_integrity for e in state.experiments.values()), \
        [(e.id, e.verdict, e.decision.reason) for e in state.experiments.values()]
    assert all(r.measured_by == "evaluator" and r.hidden == "tripwires" for r in state.runs if r.ok)
    baseline_refs = state.reference(state.base_commit)
    assert len(baseline_refs) >= 2      # the baseline seeds, plus any paired reference seeds

    # The branch ends at the incumbent; every discarded commit is kept under its ref.
    assert git_out(repo, "rev-parse", "nightshift/e2e") == state.incumbent
    for experiment in state.experiments.values():
        if experiment.verdict != "keep" and experiment.commit:
            ref = f"refs/nightshift/e2e/discarded/{experiment.id}"
            assert git_out(repo, "rev-parse", ref) == experiment.commit
    # Each candidate commit touches only the target and carries its hypothesis.
    for experiment in state.experiments.values():
        if experiment.commit:
            changed = git_out(repo, "diff", "--name-only", experiment.parent, experiment.commit)
            assert changed == "train/train.py"
            assert "Hypothesis:" in git_out(repo, "log", "-1", "--format=%B", experiment.commit)

    tsv = (repo / "results" / "e2e" / "results.tsv").read_text().splitlines()
    assert tsv[0].split("\t") == ["commit", "val_bpb", "memory_gb", "status", "description"]
    assert tsv[1].split("\t")[0] == user_head[:7] and tsv[1].endswith("\tkeep\tbaseline")
    assert len(tsv) == 4
    # The user's checkout is untouched, and results/ does not show up in it.
    assert git_out(repo, "rev-parse", "HEAD") == user_head
    assert git_out(repo, "status", "--porcelain") == ""

    second = nightshift(repo, "run", "--tag", "e2e", "--max-experiments", "1", env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    all_events = events(repo, "e2e")
    assert sum(e["event"] == "loop_started" for e in all_events) == 1
    assert sum(e["event"] == "loop_resumed" for e in all_events) == 1
    resumed = loop_state(repo, "e2e")
    assert list(resumed.experiments) == ["e0001", "e0002", "e0003"]
    again = resumed.reference(resumed.base_commit)
    assert {s: again[s] for s in baseline_refs} == baseline_refs   # not measured again

    status = nightshift(repo, "status", "--tag", "e2e", env=env)
    assert status.returncode == 0 and "3 experiments" in status.stdout


def test_interrupted_loop_finishes_its_pending_experiment_on_resume(tmp_path, data_root):
    repo = project_repo(tmp_path / "user", **FAST)
    env = cli_env(data_root)
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "kill",
                             "--max-experiments", "3"], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ledger = repo / "results" / "kill" / "ledger.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if ledger.exists() and '"role": "candidate"' in ledger.read_text():
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("no candidate run started")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    interrupted = loop_state(repo, "kill")
    assert interrupted.stopped_reason == "interrupted"
    pending = interrupted.pending
    assert pending is not None and not interrupted.in_flight

    again = nightshift(repo, "run", "--tag", "kill", "--max-experiments", "1", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = loop_state(repo, "kill")
    assert list(resumed.experiments) == [pending.id]          # finished, not replaced
    assert resumed.experiments[pending.id].decided

