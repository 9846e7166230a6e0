"""Replay re-runs kept commits and says whether they reproduce, what their effect is at the
new scale, and whether the environment changed since the night."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.record import load
from agent.record.events import (Decision, DecisionMade, ExperimentProposed, LoopStarted,
                                 Prediction, Verdict)
from agent.program import load_program
from agent.record.ledger import Ledger, read_events
from agent.record.records import Direction
from agent.record.state import fold
from agent.review.replay import (FullScaleRuns, build_replayer, paired_effect, plan_targets,
                          reproduction, spearman)
from agent.run.data import prepare_data
from agent.run.data import data_cache
from agent.run.executor import RunExecutor
from agent.run.plan import RunPlan
from agent.workspace.repo import Workspace
from sandbox.local import LocalRunner

PROGRAM = """---
target: train.py
protected: []
command: python train.py
prepare: null
metric: score
direction: minimize
budget: 5s
grace: 30s
sandbox: local
researcher: scripted
full_scale: {budget: 7s, seeds: 3}
---
A deterministic toy: the score is LEVEL plus a seed-dependent offset.
"""

SCRIPT = """import json, os
LEVEL = {level}
seed = int(os.environ["NIGHTSHIFT_SEED"])
budget = float(os.environ["NIGHTSHIFT_BUDGET_S"])
# deterministic per seed; a longer budget helps the candidate more (scale-dependent effect)
value = LEVEL + 0.01 * ((seed * 7919) % 13) / 13 - 0.001 * budget * (1.0 - LEVEL)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as f:
    json.dump({{"score": value}}, f)
print("score:", value)
"""


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def make_night(root: Path, tag: str = "toy") -> dict:
    """A real repository and a real (tiny) night: base measured on seeds 0-2, one candidate
    run on 0-2, kept, then measured as the new incumbent, all through RunExecutor."""
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@t"); git(root, "config", "user.name", "t")
    (root / "program.md").write_text(PROGRAM)
    (root / "train.py").write_text(SCRIPT.format(level=1.0))
    git(root, "add", "."); git(root, "commit", "-qm", "base")
    program = load_program(root / "program.md", {})
    tag_dir = root / "results" / tag
    ledger = Ledger(tag_dir)
    workspace = Workspace.open(root, tag, tag_dir / "worktree")
    base = workspace.head()
    data = prepare_data(None, root, data_cache())   # what the replay will use too
    plan = RunPlan.from_program(program)
    executor = RunExecutor(plan=plan, runner=LocalRunner(), workspace=workspace, ledger=ledger,
                           data=data, results_dir=tag_dir)
    ledger.append(LoopStarted(tag=tag, base_commit=base, program=program.to_dict(), budget_s=5.0))
    for seed in range(3):
        executor.run(base, seed, "reference", None)
    candidate = workspace.commit_candidate("train.py", SCRIPT.format(level=0.9), "level down\n")
    ledger.append(ExperimentProposed(id="e0001", commit=candidate, parent=base,
                                     description="LEVEL 1.0 -> 0.9", hypothesis="lower is better",
                                     prediction=Prediction("improve", -0.1, (-0.2, 0.0), 0.8),
                                     researcher="scripted"))
    for seed in range(3):
        executor.run(candidate, seed, "candidate", "e0001")
    ledger.append(DecisionMade(id="e0001", commit=candidate, incumbent=base, verdict=Verdict.KEEP,
                               decision=Decision(verdict=Verdict.KEEP, effect=0.1,
                                                 interval=(0.09, 0.11), p_value=0.001,
                                                 seeds=(0, 1, 2)), reason="significant"))
    for seed in range(3):
        executor.run(candidate, seed, "reference", None)
    workspace.close()
    return {"root": root, "program": program, "tag": tag, "tag_dir": tag_dir, "base": base,
            "candidate": candidate}


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    return make_night(tmp_path_factory.mktemp("replay") / "repo")


def replay(night, settings, kept=True, commits=()):
    replayer, workspace = build_replayer(night["program"], night["tag"], settings, sandbox="local")
    try:
        targets = plan_targets(replayer.state, kept=kept, commits=commits, parent_of=workspace.parent)
        return replayer.replay(targets, settings).to_dict(), replayer
    finally:
        workspace.close()


def recorded(night, kind, replay_id):
    """The replay's `kind` events as the ledger file holds them (JSON)."""
    return [e.to_dict() for e in read_events(night["tag_dir"])
            if e.kind == "replay" and e.replay_kind == kind and e.replay_id == replay_id]


def commit_events(night, replay_id):
    return {e["commit"]: e for e in recorded(night, "commit", replay_id)}


def test_plan_targets_puts_the_base_first_and_adds_parents(night):
    state = fold(read_events(night["tag_dir"]))
    targets = plan_targets(state, kept=True)
    assert [(t.commit, t.role) for t in targets] == [(night["base"], "base"),
                                                      (night["candidate"], "kept")]
    assert targets[1].parent == night["base"] and targets[1].experiment == "e0001"
    given = plan_targets(state, kept=False, commits=[night["candidate"]], with_parents=False)
    assert [t.commit for t in given] == [night["candidate"]]


def test_replay_at_the_same_scale_reproduces_a_deterministic_night(night):
    summary, replayer = replay(night, FullScaleRuns(budget_s=5.0, seeds=(0, 1, 2)))
    assert summary["reproduce"] is True
    assert set(summary["reproduced"]) == {night["base"], night["candidate"]}
    assert summary["not_reproduced"] == [] and summary["env_changed"] is False
    events = commit_events(night, summary["replay_id"])
    kept = events[night["candidate"]]
    assert kept["reproduce"]["reproduced"] is True
    assert kept["reproduce"]["difference"] == pytest.approx(0.0, abs=1e-12)
    assert kept["original"]["kind"] == "reference" and kept["original"]["n"] == 3
    # the effect measured again, paired on seeds, next to the one the night decided on
    assert kept["full_effect"] == pytest.approx(0.1 + 0.005 * 0.1, abs=1e-9)
    assert kept["proxy_effect"] == 0.1
    runs = recorded(night, "run", summary["replay_id"])
    assert len(runs) == 6 and all(r["status"] == "ok" and r["env_diff"] == [] for r in runs)
    # the replay's own runs live in their own ledger, never in the night's measurements
    assert not [r for r in fold(read_events(night["tag_dir"])).runs if r.role == "replay"]
    replay_ledger = replayer.executor.ledger.path
    assert sum(e.kind == "run_finished" for e in read_events(replay_ledger)) == 6


def test_scale_up_reports_proxy_and_full_effects_and_no_reproduction_verdict(night):
    summary, _ = replay(night, FullScaleRuns(budget_s=7.0, seeds=(0, 1), split="val"))
    assert summary["reproduce"] is False
    kept = commit_events(night, summary["replay_id"])[night["candidate"]]
    assert kept["reproduce"]["reproduced"] is None
    assert kept["full_effect"] == pytest.approx(0.1 + 0.007 * 0.1, abs=1e-9)
    assert kept["budget_s"] == 7.0
    frames = load(night["tag_dir"])
    replays = frames["replays"]
    assert {"replay_id", "commit", "mean", "proxy_effect", "full_effect", "reproduced"} <= set(replays.columns)
    assert len(frames["replay_runs"]) >= 4


def test_a_changed_environment_is_flagged_with_the_fields_that_differ(night):
    state = fold(read_events(night["tag_dir"]))
    for run in state.runs:   # pretend the night ran on another torch and another corpus
        path = night["tag_dir"] / "runs" / run.run_id / "provenance.json"
        record = json.loads(path.read_text())
        record["environment"]["torch"] = "1.0.0-night"
        record["data_meta"]["corpus_hash"] = "deadbeef"
        path.write_text(json.dumps(record))
    summary, _ = replay(night, FullScaleRuns(budget_s=5.0, seeds=(0,)), kept=False,
                        commits=[night["candidate"]])
    assert summary["env_changed"] is True
    event = commit_events(night, summary["replay_id"])[night["candidate"]]
    fields = {d["field"]: d for d in event["env_diff"]}
    assert set(fields) == {"torch", "data_hash"}
    assert fields["torch"]["original"] == "1.0.0-night"
    assert fields["data_hash"]["current"] is None   # the toy has no prepared corpus


def test_reproduction_interval_and_edge_cases():
    done = reproduction([1.0, 1.1, 0.9], [1.05, 0.95, 1.0], noise_sd=0.1, noise_dof=10)
    assert done["reproduced"] is True and done["interval"][0] < 0 < done["interval"][1]
    far = reproduction([1.0, 1.1, 0.9], [2.0, 2.1, 1.9], noise_sd=0.1, noise_dof=10)
    assert far["reproduced"] is False
    assert reproduction([], [1.0], 0.1, 3)["reproduced"] is None
    assert reproduction([1.0], [1.0], None, 0)["reproduced"] is None


def test_paired_effect_is_positive_when_better_in_the_program_direction():
    parent, child = {0: 2.0, 1: 2.2}, {0: 1.9, 1: 2.0, 2: 5.0}
    assert paired_effect(child, parent, Direction.MINIMIZE)["effect"] == pytest.approx(0.15)
    assert paired_effect(child, parent, Direction.MAXIMIZE)["effect"] == pytest.approx(-0.15)
    assert paired_effect(child, {}, Direction.MINIMIZE) is None


def test_spearman_shows_an_inverted_ranking():
    assert spearman([0.1, 0.2, 0.3], [0.3, 0.2, 0.1])["rho"] == pytest.approx(-1.0)
    assert spearman([0.1, 0.2, 0.3], [1, 2, 3])["rho"] == pytest.approx(1.0)
    assert spearman([0.1], [0.2])["rho"] is None


def test_cli_replay_kept(night):
    done = subprocess.run([sys.executable, "-m", "agent.cli", "replay", "--tag", night["tag"], "--kept",
                           "--budget", "5s", "--seeds", "2", "--program", str(night["root"] / "program.md")],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reproduced" in done.stdout


def test_cli_replay_refuses_a_split_the_command_cannot_pass_on(night):
    """The toy reads NIGHTSHIFT_SEED, _BUDGET_S and _OUT, never NIGHTSHIFT_SPLIT, and its
    command has no {split}: `--split test` would re-measure the night's split labelled test."""
    before = len(list(read_events(night["tag_dir"])))
    done = subprocess.run([sys.executable, "-m", "agent.cli", "replay", "--tag", night["tag"], "--kept",
                           "--split", "test", "--program", str(night["root"] / "program.md")],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 1, done.stdout + done.stderr
    message = " ".join(done.stderr.split())
    assert "--split test: the command has no {split} and no file of the commit reads NIGHTSHIFT_SPLIT" in message
    assert "Add {split} to command where the script takes its split (e.g. --split={split})" in message
    assert len(list(read_events(night["tag_dir"]))) == before and "Traceback" not in done.stderr


def test_what_a_replay_asks_for_is_checked_against_what_the_command_passes_on():
    from agent.review.replay import unexpressed_changes

    nothing = lambda name: False                     # noqa: E731 - no file reads the variables
    test_split = FullScaleRuns(budget_s=600.0, seeds=(0,), split="test")
    refusals, warnings = unexpressed_changes("python train.py", test_split, 60.0, nothing)
    assert len(refusals) == 1 and refusals[0].startswith("--split test:")
    assert len(warnings) == 1 and warnings[0].startswith("--budget 600s: the command has no {budget_s}")
    assert "train as long as the night's (60 s budget)" in warnings[0]
    assert unexpressed_changes("python train.py --split {split} --time {budget_s}", test_split, 60.0,
                               nothing) == ([], [])
    assert unexpressed_changes("python train/train.py", test_split, 60.0,
                               lambda name: name.startswith("NIGHTSHIFT_")) == ([], [])   # the bundled one
    same = FullScaleRuns(budget_s=60.0, seeds=(0,))
    assert unexpressed_changes("python train.py", same, 60.0, nothing) == ([], [])
