"""Specification of agent/workspace/repo.py, on real git repositories in tmp_path."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from agent.researchers.base import Prediction
from agent.workspace.repo import Workspace, WorkspaceError, candidate_message, remove_snapshot

TARGET = "train/train.py"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=User", "-c", "user.email=user@example.com",
                           *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A user's repository: a training script, a protected file, results/ ignored."""
    root = tmp_path / "repo"
    (root / "train").mkdir(parents=True)
    (root / TARGET).write_text("LR = 0.1\nprint('train')\n")
    (root / "train/prepare.py").write_text("DATA = 'fixed'\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / ".gitignore").write_text("results/\n")
    git(tmp_path, "init", "-q", "-b", "main", str(root))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def open_ws(repo: Path, tag: str = "night1") -> Workspace:
    return Workspace.open(repo, tag, repo / "results" / tag / "worktree")


def user_state(repo: Path) -> tuple[str, str, str, str, str]:
    """Everything of the user's checkout that Nightshift must leave alone."""
    return (git(repo, "rev-parse", "HEAD"), git(repo, "symbolic-ref", "HEAD"),
            git(repo, "diff", "--cached"), git(repo, "status", "--porcelain"),
            (repo / TARGET).read_text())


# ---- opening ----

def test_open_creates_branch_and_worktree_at_user_head(repo: Path) -> None:
    ws = open_ws(repo)
    assert ws.head() == git(repo, "rev-parse", "HEAD").strip()
    assert git(ws.path, "symbolic-ref", "HEAD").strip() == "refs/heads/nightshift/night1"
    assert (ws.path / TARGET).read_text() == "LR = 0.1\nprint('train')\n"
    assert ws.repo_root == repo


def test_users_checkout_is_never_touched(repo: Path, tmp_path: Path) -> None:
    (repo / "train/prepare.py").write_text("DATA = 'staged edit'\n")
    git(repo, "add", "train/prepare.py")
    (repo / TARGET).write_text("LR = 0.5  # the user's uncommitted work\n")
    (repo / "notes.txt").write_text("untracked\n")
    before = user_state(repo)

    ws = open_ws(repo)
    base = ws.head()
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", "try 0.2")
    ws.snapshot(sha, tmp_path / "snap")
    ws.discard(sha, "e1", base)
    ws.commit_candidate(TARGET, "LR = 0.3\n", "try 0.3")

    assert user_state(repo) == before
    assert (repo / "notes.txt").read_text() == "untracked\n"


def test_resume_continues_at_branch_head_and_drops_uncommitted_edits(repo: Path) -> None:
    ws = open_ws(repo)
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", "try 0.2", name="e1")
    ws.keep(sha, "e1")
    (repo / "results/night1/worktree" / TARGET).write_text("half-written by a crash")

    again = open_ws(repo)
    assert again.head() == sha
    assert (again.path / TARGET).read_text() == "LR = 0.2\n"


def test_candidates_wait_side_by_side_under_pending_refs(repo: Path) -> None:
    ws = open_ws(repo)
    incumbent = ws.head()
    first = ws.commit_candidate(TARGET, "LR = 0.2\n", "first", name="e1")
    second = ws.commit_candidate(TARGET, "LR = 0.3\n", "second", name="e2")
    assert ws.head() == incumbent                     # the branch waits at the incumbent
    assert (ws.path / TARGET).read_text() == "LR = 0.1\nprint('train')\n"
    assert ws.parent(first) == ws.parent(second) == incumbent
    assert ws.pending_refs() == {"e1": first, "e2": second}
    assert ws.changed_paths(incumbent, second) == [TARGET]
    ws.discard(first, "e1", incumbent)
    ws.keep(second, "e2")
    assert ws.pending_refs() == {} and ws.discarded_refs() == {"e1": first}
    assert ws.head() == second and (ws.path / TARGET).read_text() == "LR = 0.3\n"


def test_a_symlinked_target_is_refused_before_anything_is_written(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET = 1\n")
    (repo / "link.py").symlink_to(outside)
    (repo / "linked").symlink_to(repo / "train")
    git(repo, "add", "link.py", "linked")
    git(repo, "commit", "-qm", "links")
    ws = open_ws(repo)
    for target in ("link.py", "linked/train.py"):
        with pytest.raises(WorkspaceError, match="symbolic link"):
            ws.commit_candidate(target, "SECRET = 2\n", "through the link")
    assert outside.read_text() == "SECRET = 1\n" and ws.pending_refs() == {}


def test_deleted_worktree_folder_is_recreated(repo: Path) -> None:
    ws = open_ws(repo)
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", "try 0.2")
    ws.keep(sha)
    shutil.rmtree(ws.path)

    again = open_ws(repo)
    assert again.head() == sha
    assert (again.path / TARGET).read_text() == "LR = 0.2\n"
    assert "prunable" not in git(repo, "worktree", "list", "--porcelain")


def test_moved_repository_reconnects_its_worktree(repo: Path, tmp_path: Path) -> None:
    ws = open_ws(repo)
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", "try 0.2")
    ws.keep(sha)
    ws.close()
    moved = tmp_path / "moved"
    repo.rename(moved)

    again = open_ws(moved)
    assert again.head() == sha
    assert again.path == moved / "results/night1/worktree"
    assert git(again.path, "rev-parse", "HEAD").strip() == sha


def test_two_tags_side_by_side(repo: Path) -> None:
    a, b = open_ws(repo, "a"), open_ws(repo, "b")
    sha_a = a.commit_candidate(TARGET, "LR = 0.2\n", "a's idea")
    sha_b = b.commit_candidate(TARGET, "LR = 0.9\n", "b's idea")
    a.discard(sha_a, "e1", a.parent(sha_a))
    b.keep(sha_b)

    assert b.head() == sha_b and a.head() == b.parent(sha_b)
    assert a.discarded_refs() == {"e1": sha_a} and b.discarded_refs() == {}
    assert (b.path / TARGET).read_text() == "LR = 0.9\n"


@pytest.mark.parametrize("tag", ["", ".hidden", "a/b", "a b", "a..b", "x.lock", "ünï", "end."])
def test_unsafe_tag_is_rejected(repo: Path, tag: str) -> None:
    with pytest.raises(WorkspaceError, match="tag"):
        Workspace.open(repo, tag, repo / "results/x/worktree")


def test_not_a_repository_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="git init"):
        Workspace.open(tmp_path, "t", tmp_path / "wt")


def test_repository_without_commits_says_how_to_fix(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main", "empty")
    with pytest.raises(WorkspaceError, match="no commits.*git commit"):
        Workspace.open(tmp_path / "empty", "t", tmp_path / "wt")


def test_subfolder_instead_of_toplevel_is_rejected(repo: Path) -> None:
    with pytest.raises(WorkspaceError, match="top level"):
        Workspace.open(repo / "train", "t", repo / "results/t/worktree")


def test_branch_checked_out_by_the_user_is_an_error(repo: Path) -> None:
    open_ws(repo).remove()
    git(repo, "checkout", "-q", "nightshift/night1")
    with pytest.raises(WorkspaceError, match="already checked out"):
        open_ws(repo)


# ---- commits ----

def test_commit_message_carries_the_hypothesis_and_nightshift_identity(repo: Path) -> None:
    # A user's config that would sabotage an automated commit: hooks that fail, forced signing.
    hook = repo / ".git/hooks/pre-commit"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    git(repo, "config", "commit.gpgsign", "true")
    git(repo, "config", "user.name", "Someone Else")
    ws = open_ws(repo)
    prediction = Prediction("improve", -0.01, (-0.02, 0.0), 0.8)
    message = candidate_message("raise LR to 0.2", "faster convergence # in 60 s", prediction,
                                "e0007", {"Nightshift-Tag": "night1"})

    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", message)

    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha).strip() == \
        "Nightshift <nightshift@localhost>|Nightshift <nightshift@localhost>"
    assert git(repo, "log", "-1", "--format=%s", sha).strip() == "raise LR to 0.2"
    body = git(repo, "log", "-1", "--format=%B", sha)
    assert "Hypothesis: faster convergence # in 60 s" in body
    assert "Prediction: improve, delta -0.01 in [-0.02, +0] at 80% confidence" in body
    trailer = git(repo, "log", "-1", "--format=%(trailers:key=Nightshift-Experiment,valueonly)",
                  sha)
    assert trailer.strip() == "e0007"


def test_commit_contains_only_the_target(repo: Path) -> None:
    ws = open_ws(repo)
    (ws.path / "train/prepare.py").write_text("DATA = 'cheating'\n")
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", "try")
    assert git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", sha).split() == [TARGET]


def test_unchanged_source_is_not_committed(repo: Path) -> None:
    ws = open_ws(repo)
    with pytest.raises(WorkspaceError, match="unchanged"):
        ws.commit_candidate(TARGET, ws.read(TARGET), "nothing")


def test_read_keeps_the_exact_text_and_reports_missing_files(repo: Path) -> None:
    ws = open_ws(repo)
    base = ws.head()
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n\n\n", "trailing newlines")
    assert ws.read(TARGET, sha) == "LR = 0.2\n\n\n"
    ws.keep(sha)
    assert ws.read(TARGET) == "LR = 0.2\n\n\n"
    assert ws.read(TARGET, base) == "LR = 0.1\nprint('train')\n"
    with pytest.raises(FileNotFoundError, match="nope.py"):
        ws.read("nope.py")
    with pytest.raises(WorkspaceError, match="inside the repository"):
        ws.read("../outside.py")


# ---- keep and discard ----

def test_discard_keeps_the_commit_under_a_ref_and_resets_the_branch(repo: Path) -> None:
    ws = open_ws(repo)
    incumbent = ws.head()
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", "try 0.2")

    ws.discard(sha, "e1", incumbent)
    ws.discard(sha, "e1", incumbent)  # resumed after a crash: same call again

    assert ws.head() == incumbent
    assert (ws.path / TARGET).read_text() == "LR = 0.1\nprint('train')\n"
    assert git(repo, "rev-parse", "refs/nightshift/night1/discarded/e1").strip() == sha
    assert ws.discarded_refs() == {"e1": sha}
    assert ws.read(TARGET, sha) == "LR = 0.2\n"


def test_discard_refuses_to_move_an_unrelated_head_or_reuse_an_id(repo: Path) -> None:
    ws = open_ws(repo)
    incumbent = ws.head()
    first = ws.commit_candidate(TARGET, "LR = 0.2\n", "first")
    ws.keep(first)
    second = ws.commit_candidate(TARGET, "LR = 0.3\n", "second")
    ws.keep(second)
    with pytest.raises(WorkspaceError, match="neither"):
        ws.discard(first, "e1", incumbent)
    assert ws.head() == second
    with pytest.raises(WorkspaceError, match="already points"):
        ws.discard(second, "e1", first)


def test_keep_accepts_the_head_and_fast_forwards_a_descendant(repo: Path) -> None:
    ws = open_ws(repo)
    base = ws.head()
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", "try")
    ws.keep(sha)
    assert ws.head() == sha
    ws.reset_to(base)
    ws.keep(sha)
    assert ws.head() == sha and (ws.path / TARGET).read_text() == "LR = 0.2\n"
    with pytest.raises(WorkspaceError, match="does not descend"):
        ws.keep(base)


# ---- snapshot and diff ----

def test_snapshot_is_read_only_and_matches_the_commit(repo: Path, tmp_path: Path) -> None:
    ws = open_ws(repo)
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", "try")
    (ws.path / TARGET).write_text("LR = 'uncommitted'\n")
    (ws.path / "stray.txt").write_text("untracked\n")

    snap = ws.snapshot(sha, tmp_path / "snap")

    files = sorted(str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file())
    assert files == sorted(git(repo, "ls-tree", "-r", "--name-only", sha).split())
    assert (snap / TARGET).read_text() == "LR = 0.2\n"
    assert stat.S_IMODE((snap / TARGET).stat().st_mode) == 0o444
    assert stat.S_IMODE((snap / "run.sh").stat().st_mode) == 0o555
    assert stat.S_IMODE((snap / "train").stat().st_mode) == 0o555
    assert stat.S_IMODE(snap.stat().st_mode) == 0o555
    with pytest.raises(WorkspaceError, match="not empty"):
        ws.snapshot(sha, snap)
    remove_snapshot(snap)
    assert not snap.exists()


def test_diff_applied_to_the_parent_gives_the_commit(repo: Path, tmp_path: Path) -> None:
    ws = open_ws(repo)
    sha = ws.commit_candidate(TARGET, "LR = 0.2\nprint('train')", "no final newline")
    parent = ws.parent(sha)
    assert parent == git(repo, "rev-parse", "main").strip()
    patch = ws.diff(sha)
    assert patch == ws.diff(sha, parent) and "No newline at end of file" in patch

    work = tmp_path / "apply"
    shutil.copytree(ws.snapshot(parent, tmp_path / "parent"), work)
    for root, dirs, _ in os.walk(work):
        os.chmod(root, 0o755)
    os.chmod(work / TARGET, 0o644)
    subprocess.run(["git", "apply", "-"], cwd=work, input=patch, text=True, check=True)
    assert (work / TARGET).read_text() == ws.read(TARGET, sha)


def test_root_commit_has_no_parent(repo: Path) -> None:
    ws = open_ws(repo)
    assert ws.parent(ws.head()) is None
    assert "+LR = 0.1" in ws.diff(ws.head())


def test_remove_deletes_the_worktree_and_optionally_the_branch(repo: Path) -> None:
    ws = open_ws(repo)
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", "try")
    ws.discard(sha, "e1", ws.parent(sha))
    ws.remove(delete_branch=True)
    assert not ws.path.exists()
    assert "nightshift" not in git(repo, "for-each-ref")
