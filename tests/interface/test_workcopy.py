"""The agent's working copy: a detached worktree at the incumbent whose base survives the
agent's commits, and the rule that only the target may change, said with the fix."""
from __future__ import annotations

import subprocess

import pytest

from agent.interface.workcopy import WorkCopyError, checkout, open_copy
from tests.loop_helpers import make_repo

GIT = ["git", "-c", "user.name=A", "-c", "user.email=a@localhost"]


def head(repo) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "user", {"train.py": "LR = 1\n", "evaluate.py": "SCORE = 1\n"})


def test_only_the_target_may_change_and_the_refusal_says_how_to_undo(repo, tmp_path):
    base = head(repo)
    copy = checkout(repo, "t", base, "train.py", tmp_path / "copy")
    with pytest.raises(WorkCopyError, match="unchanged since the checkout"):
        copy.proposal_source()
    (copy.path / "train.py").write_text("LR = 2\n")
    (copy.path / "evaluate.py").write_text("SCORE = 99\n")
    (copy.path / "notes.txt").write_text("scratch")          # untracked: not part of a proposal
    with pytest.raises(WorkCopyError) as refused:
        copy.proposal_source()
    assert "evaluate.py" in str(refused.value) and f"checkout {base[:12]} -- evaluate.py" in str(refused.value)
    subprocess.run(["git", "-C", str(copy.path), "checkout", base, "--", "evaluate.py"], check=True)
    assert copy.proposal_source() == "LR = 2\n"
    assert copy.changes() == (["train.py"], ["notes.txt"])


def test_the_base_survives_commits_in_the_copy_and_a_new_checkout_resets_it(repo, tmp_path):
    base = head(repo)
    checkout(repo, "t", base, "train.py", tmp_path / "copy")
    inside = tmp_path / "copy"
    (inside / "train.py").write_text("LR = 3\n")
    subprocess.run([*GIT, "-C", str(inside), "commit", "-qam", "agent's own commit"], check=True)
    copy = open_copy(inside, "t")
    assert copy.base == base and copy.proposal_source() == "LR = 3\n"
    (repo / "train.py").write_text("LR = 5\n")
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qam", "a new incumbent"], check=True)
    again = checkout(repo, "t", head(repo), "train.py", inside)
    assert again.base == head(repo) and (inside / "train.py").read_text() == "LR = 5\n"
    assert open_copy(inside, "t").base == head(repo)
    with pytest.raises(WorkCopyError, match="checked out for tag 't'"):
        open_copy(inside, "other")


def test_a_folder_that_is_not_a_copy_is_refused(repo, tmp_path):
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "file").write_text("mine")
    with pytest.raises(WorkCopyError, match="not a working copy"):
        checkout(repo, "t", head(repo), "train.py", stranger)
    with pytest.raises(WorkCopyError, match="nightshift checkout"):
        open_copy(stranger, "t")
    assert (stranger / "file").read_text() == "mine"
