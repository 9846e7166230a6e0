"""What `run` checks before it writes anything (agent/preflight/prestart.py), through the real
CLI on real repositories: the target is a committed file of the repository, nothing named
in program.md leaves it through a link, uncommitted edits are not silently ignored, a tag
reused after its results were deleted is caught before the baseline, a night that never
measured anything starts again at the new HEAD, and stale git locks are named."""
import os
import subprocess
import time

import pytest

from tests.loop_helpers import (cli_env, events, git_out, loop_state, make_repo, nightshift,
                                set_front_matter)
from tests.night.test_scheduler import PROGRAM, SLEEPY

FAST = SLEEPY.replace("DELAY = 0.5", "DELAY = 0.1")
SMALL = set_front_matter(PROGRAM, seeds="{baseline: 2, screen: 1, max: 2}")


def repo_with(tmp_path, files=None, program=SMALL):
    return make_repo(tmp_path / "user", {"sleepy.py": FAST, "program.md": program, **(files or {})})


def commit_all(repo, message="change"):
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@l", "commit",
                    "-qm", message], check=True)


def assert_nothing_written(repo, tag):
    assert not (repo / "results" / tag).exists(), "a results folder was created"
    assert git_out(repo, "for-each-ref", f"refs/heads/nightshift/{tag}", f"refs/nightshift/{tag}") == ""
    assert "results" not in git_out(repo, "worktree", "list")


def test_a_target_that_is_a_folder_is_refused_naming_line_and_field(tmp_path):
    repo = repo_with(tmp_path, {"model/net.py": "x = 1\n"},
                     program=set_front_matter(SMALL, target="model"))
    done = nightshift(repo, "run", "--tag", "t", env=cli_env(tmp_path / "data"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "program.md:2: field 'target': model is a folder" in " ".join(done.stderr.split())
    assert_nothing_written(repo, "t")


@pytest.mark.parametrize("setup, fragment", [
    ("target-outside", "sleepy.py is a symbolic link"),
    ("folder-link", "code/sleepy.py sits under code, a symbolic link"),
    ("protected-link", "field 'protected': guard.py is a symbolic link"),
    ("target-uncommitted", "it exists but is not committed"),
])
def test_paths_that_leave_the_repository_or_are_not_committed_are_refused(tmp_path, setup, fragment):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "sleepy.py").write_text(FAST)
    repo = make_repo(tmp_path / "user", {"program.md": SMALL, "keep.txt": "x\n"})
    program = SMALL
    if setup == "target-outside":
        os.symlink(outside / "sleepy.py", repo / "sleepy.py")
    elif setup == "folder-link":
        os.symlink(outside, repo / "code")
        program = set_front_matter(SMALL, target="code/sleepy.py")
    elif setup == "protected-link":
        (repo / "sleepy.py").write_text(FAST)
        os.symlink(outside / "sleepy.py", repo / "guard.py")
        program = set_front_matter(SMALL, protected="[guard.py]")
    (repo / "program.md").write_text(program)
    if setup != "target-uncommitted":
        commit_all(repo)
    else:
        (repo / "sleepy.py").write_text(FAST)
    before = (outside / "sleepy.py").read_text()
    done = nightshift(repo, "run", "--tag", "t", "--max-experiments", "1", env=cli_env(tmp_path / "data"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert fragment in " ".join(done.stderr.split())
    assert "program.md:" in done.stderr
    assert_nothing_written(repo, "t")
    assert (outside / "sleepy.py").read_text() == before


def test_uncommitted_edits_to_the_target_stop_run_and_allow_dirty_runs_the_commit(tmp_path):
    repo = repo_with(tmp_path)
    env = cli_env(tmp_path / "data")
    (repo / "sleepy.py").write_text(FAST.replace("LEVEL = 2.0", "LEVEL = 1.0"))
    refused = nightshift(repo, "run", "--tag", "d", "--max-experiments", "1", env=env)
    assert refused.returncode == 1
    message = " ".join(refused.stderr.split())
    assert "uncommitted changes to sleepy.py" in message and "--allow-dirty" in message
    assert_nothing_written(repo, "d")
    ran = nightshift(repo, "run", "--tag", "d", "--max-experiments", "1", "--allow-dirty", env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "the uncommitted changes to sleepy.py are not used" in " ".join(ran.stdout.split())
    baseline = loop_state(repo, "d").reference(git_out(repo, "rev-parse", "HEAD"))
    assert all(1.9 < value < 2.1 for value in baseline.values())   # LEVEL 2.0: the commit ran


def test_a_tag_reused_after_its_results_were_deleted_is_caught_before_the_baseline(tmp_path):
    repo = repo_with(tmp_path)
    env = cli_env(tmp_path / "data")
    first = nightshift(repo, "run", "--tag", "nov30", "--max-experiments", "2", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    old = {ref: sha for sha, ref in (line.split() for line in git_out(
        repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/nightshift/nov30",
        "refs/nightshift/nov30").splitlines())}
    assert any("/discarded/" in ref for ref in old)
    subprocess.run(["rm", "-rf", str(repo / "results" / "nov30")], check=True)

    started = time.monotonic()
    again = nightshift(repo, "run", "--tag", "nov30", "--max-experiments", "1", env=env)
    assert again.returncode == 1 and time.monotonic() - started < 20
    message = " ".join(again.stderr.split())
    assert "tag nov30 was used before" in message and "--fresh" in message
    assert not (repo / "results" / "nov30").exists()      # no baseline ran

    fresh = nightshift(repo, "run", "--tag", "nov30", "--max-experiments", "1", "--fresh", env=env)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    archive = [line.split() for line in git_out(repo, "for-each-ref", "--format=%(objectname) %(refname)",
                                                 "refs/nightshift-archive/").splitlines()]
    kept = {ref.split("/", 3)[3]: sha for sha, ref in archive}
    assert sorted(kept.values()) == sorted(old.values())   # every old ref, by sha, archived
    assert kept["branch"] == old["refs/heads/nightshift/nov30"]
    state = loop_state(repo, "nov30")
    assert state.base_commit == git_out(repo, "rev-parse", "HEAD")
    assert git_out(repo, "rev-parse", "nightshift/nov30") == state.incumbent


def test_a_night_that_never_measured_anything_starts_again_at_the_new_head(tmp_path):
    broken = FAST.replace('json.dump({"val_bpb": value', 'json.dump({"val_bp": value')
    repo = make_repo(tmp_path / "user", {"sleepy.py": broken, "program.md": SMALL})
    env = cli_env(tmp_path / "data")
    failed = nightshift(repo, "run", "--tag", "fix", "--max-experiments", "1", env=env)
    assert failed.returncode == 4, failed.stdout + failed.stderr
    (repo / "sleepy.py").write_text(FAST)
    commit_all(repo, "report val_bpb")
    fixed = git_out(repo, "rev-parse", "HEAD")
    done = nightshift(repo, "run", "--tag", "fix", "--max-experiments", "1", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"starts again at HEAD {fixed[:8]}" in done.stdout
    state = loop_state(repo, "fix")
    assert state.base_commit == fixed and state.reference(fixed)
    assert git_out(repo, "rev-parse", "nightshift/fix") == state.incumbent
    assert [e["event"] for e in events(repo, "fix")].count("loop_started") == 2


def test_a_stale_git_lock_under_the_discarded_refs_is_named_before_the_night(tmp_path):
    repo = repo_with(tmp_path)
    env = cli_env(tmp_path / "data")
    assert nightshift(repo, "run", "--tag", "lk", "--max-experiments", "1", env=env).returncode == 0
    lock = repo / ".git" / "refs" / "nightshift" / "lk" / "discarded" / "e0002.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    os.utime(lock, (time.time() - 600, time.time() - 600))
    lines = len(events(repo, "lk"))
    done = nightshift(repo, "run", "--tag", "lk", "--max-experiments", "1", env=env)
    assert done.returncode == 4, done.stdout + done.stderr
    message = " ".join(done.stderr.split())
    assert str(lock) in message and "rm " in message and "Traceback" not in done.stderr
    assert len(events(repo, "lk")) == lines          # nothing appended
