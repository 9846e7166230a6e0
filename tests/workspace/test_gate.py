"""Specification of agent/workspace/gate.py: what a candidate may change, and tamper detection."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agent.workspace.gate import GateResult, check_changes, check_edit, check_source
from sandbox.digest import digest_files, tampered
from agent.workspace.repo import Workspace

TARGET = "train/train.py"
OLD = "LR = 0.1\n"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=User", "-c", "user.email=user@example.com",
                           *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "repo"
    (root / "train").mkdir(parents=True)
    (root / TARGET).write_text(OLD)
    (root / "train/prepare.py").write_text("DATA = 'fixed'\n")
    git(tmp_path, "init", "-q", "-b", "main", str(root))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return Workspace.open(root, "g", root / "results/g/worktree")


# ---- source rules, before any commit ----

def test_a_changed_parsable_source_passes() -> None:
    result = check_source(TARGET, OLD, "LR = 0.2\n")
    assert result == GateResult(True, "") and result


@pytest.mark.parametrize("new", ["", "   \n\n"])
def test_empty_source_is_invalid(new: str) -> None:
    result = check_source(TARGET, OLD, new)
    assert not result.ok and "empty" in result.reason


def test_identical_source_is_no_change() -> None:
    result = check_source(TARGET, OLD, OLD)
    assert not result.ok and "no change" in result.reason


def test_syntax_error_names_the_line_and_message(tmp_path: Path, monkeypatch) -> None:
    # Another train/train.py in the cwd must not be quoted instead of the candidate's line.
    (tmp_path / "train").mkdir()
    (tmp_path / TARGET).write_text("a\nb\nsome other version\n")
    monkeypatch.chdir(tmp_path)
    result = check_source(TARGET, OLD, "LR = 0.2\n\ndef f(:\n    pass\n")
    assert not result.ok
    assert "line 3" in result.reason and TARGET in result.reason and "def f(:" in result.reason


def test_compile_errors_beyond_the_parser_are_caught() -> None:
    result = check_source(TARGET, OLD, "LR = 0.2\nreturn LR\n")
    assert not result.ok and "line 2" in result.reason and "outside function" in result.reason


def test_targets_of_other_kinds_are_not_parsed() -> None:
    assert check_source("conf/run.sh", "a=1\n", "a=(\n").ok


def test_a_new_target_has_no_old_source() -> None:
    assert check_source(TARGET, None, "LR = 0.2\n").ok


def test_only_the_target_may_change() -> None:
    result = check_changes([TARGET, "train/prepare.py", "extra.py"], TARGET, OLD, "LR = 0.2\n")
    assert not result.ok
    assert "extra.py, train/prepare.py" in result.reason


# ---- commits, on a real repository ----

def test_check_edit_passes_a_clean_candidate(ws: Workspace) -> None:
    base = ws.head()
    sha = ws.commit_candidate(TARGET, "LR = 0.2\n", "try")
    assert check_edit(ws, base, sha, TARGET) == GateResult(True, "")


def test_check_edit_names_other_changed_added_and_deleted_paths(ws: Workspace) -> None:
    base = ws.head()
    (ws.path / TARGET).write_text("LR = 0.2\n")
    (ws.path / "train/prepare.py").unlink()
    (ws.path / "notes.md").write_text("sneaky\n")
    git(ws.path, "add", "-A")
    git(ws.path, "commit", "-q", "-m", "touches too much")

    result = check_edit(ws, base, ws.head(), TARGET)
    assert not result.ok
    assert "notes.md" in result.reason and "train/prepare.py" in result.reason


def test_check_edit_rejects_a_committed_syntax_error(ws: Workspace) -> None:
    base = ws.head()
    sha = ws.commit_candidate(TARGET, "LR = = 0.2\n", "broken")
    result = check_edit(ws, base, sha, TARGET)
    assert not result.ok and "line 1" in result.reason


def test_check_edit_rejects_deleting_the_target(ws: Workspace) -> None:
    base = ws.head()
    git(ws.path, "rm", "-q", TARGET)
    git(ws.path, "commit", "-q", "-m", "delete it")
    result = check_edit(ws, base, ws.head(), TARGET)
    assert not result.ok and "deletes" in result.reason


def test_check_edit_of_the_same_commit_is_no_change(ws: Workspace) -> None:
    result = check_edit(ws, ws.head(), ws.head(), TARGET)
    assert not result.ok and "no change" in result.reason


# ---- protected files ----

def test_digests_detect_a_change_and_a_deletion(tmp_path: Path) -> None:
    (tmp_path / "prepare.py").write_text("fixed\n")
    (tmp_path / "eval.py").write_text("also fixed\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data/val.bin").write_bytes(b"\x00\x01")
    paths = ["prepare.py", "eval.py", "data", "never_existed.py"]
    before = digest_files(tmp_path, paths)
    assert before["never_existed.py"] == "missing"
    assert tampered(before, digest_files(tmp_path, paths)) == []

    (tmp_path / "prepare.py").write_text("fixed, then edited\n")
    (tmp_path / "eval.py").unlink()
    (tmp_path / "data/extra.bin").write_bytes(b"")

    after = digest_files(tmp_path, paths)
    assert after["eval.py"] == "missing"
    assert tampered(before, after) == ["data", "eval.py", "prepare.py"]


def test_digests_see_a_file_swapped_for_a_symlink_or_fifo(tmp_path: Path) -> None:
    (tmp_path / "real.py").write_text("x\n")
    (tmp_path / "prepare.py").write_text("x\n")
    before = digest_files(tmp_path, ["prepare.py"])
    (tmp_path / "prepare.py").unlink()
    os.symlink(tmp_path / "real.py", tmp_path / "prepare.py")
    assert tampered(before, digest_files(tmp_path, ["prepare.py"])) == ["prepare.py"]
    (tmp_path / "prepare.py").unlink()
    os.mkfifo(tmp_path / "prepare.py")  # must not hang the harness
    assert tampered(before, digest_files(tmp_path, ["prepare.py"])) == ["prepare.py"]


def test_tampered_counts_paths_present_on_one_side_only() -> None:
    assert tampered({"a": "1"}, {"a": "1", "b": "2"}) == ["b"]


@pytest.mark.parametrize("target, text", [("conf/train.yaml", "lr: [1, 2\n"), ("args.json", '{"lr": 1e-3,}')])
def test_a_config_target_must_still_parse(target, text):
    result = check_source(target, "lr: 1\n", text)
    assert not result.ok and f"{target} does not parse" in result.reason
    assert check_source(target, "lr: 1\n", '{"lr": 2}').ok
