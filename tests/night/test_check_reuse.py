"""The night that follows `nightshift check` takes check's baseline runs instead of running the
same commit on the same seeds again; a changed plan, or a failed check, measures afresh."""
import json

from agent.record.events import Role
from agent.record.ledger import read_events
from agent.record.events import RunFinished
from tests.loop_helpers import cli_env, loop_state, make_repo, nightshift
from tests.night.test_compute_night import PROGRAM, TRAIN


def check_runs(repo):
    return [e for e in read_events(repo / "results" / "nightshift-check" / "ledger.jsonl")
            if isinstance(e, RunFinished)]


def test_a_night_right_after_check_reuses_its_baseline_runs(tmp_path):
    repo = make_repo(tmp_path / "user", {"train.py": TRAIN, "program.md": PROGRAM})
    env = cli_env(tmp_path / "data")
    checked = nightshift(repo, "check", env=env)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    script = tmp_path / "proposals.json"
    script.write_text(json.dumps([{"replace": ["LR = 0.01", "LR = 0.02"], "description": "lr"}]))

    done = nightshift(repo, "run", "--tag", "r1", "--script", str(script), "-n", "1", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "runs `nightshift check` made" in " ".join(done.stdout.split())
    state = loop_state(repo, "r1")
    baseline = [r for r in state.runs if r.commit == state.base_commit and r.role == Role.REFERENCE]
    reused = {r.run_id: r for r in check_runs(repo)}
    assert [r.run_id for r in baseline[:2]] == list(reused)           # the check's own runs, first
    assert [r.metric for r in baseline[:2]] == [r.metric for r in reused.values()]
    for run in baseline[:2]:                                          # with their folders
        assert (repo / "results" / "r1" / run.log).is_file()

    # A budget the check did not run with: the night measures its baseline itself.
    done = nightshift(repo, "run", "--tag", "r2", "--script", str(script), "-n", "1",
                      "--budget", "25s", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "runs `nightshift check` made" not in " ".join(done.stdout.split())
    mine = {r.run_id for r in loop_state(repo, "r2").runs}
    assert not mine & set(reused)
