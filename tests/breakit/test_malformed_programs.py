"""A corpus of malformed program.md files (and repositories that do not match them), each run
through the real `nightshift run`: exit 1, a message naming the file, the line and the
field, and nothing written (no branch, no refs, no results folder, no worktree).

The command runs in-process (typer's runner over the real app) so that fifty cases fit in
seconds; the code path is the one a shell gets (tests/preflight/test_prestart.py runs the same
checks through subprocesses).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.app import app
from tests.loop_helpers import git_out, make_repo, set_front_matter
from tests.night.test_scheduler import PROGRAM, SLEEPY

pytestmark = pytest.mark.breakit

BASE = set_front_matter(PROGRAM, seeds="{baseline: 2, screen: 1, max: 2}")
TARGET_LINE = 2      # where `target:` sits in BASE


def field(key: str, value: str) -> str:
    """BASE with `key: value` (replaced in place, else appended as the front matter's last line)."""
    return set_front_matter(BASE, **{key: value})


def line_of(text: str, key: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if line.startswith(f"{key}:"))


# (id, program text or bytes, expected line (None: the line of the field), field named, message fragment)
PARSE = [
    ("unknown-field", field("budjet", "60s"), None, "budjet", "did you mean 'budget'"),
    ("budget-word", field("budget", "soon"), None, "budget", "duration like 60s"),
    ("budget-zero", field("budget", "0s"), None, "budget", "positive duration"),
    ("budget-negative", field("budget", "-5s"), None, "budget", "duration"),
    ("grace-word", field("grace", "forever"), None, "grace", "duration"),
    ("direction", field("direction", "minimise"), None, "direction", "did you mean 'minimize'"),
    ("alpha-word", field("alpha", "high"), None, "alpha", "expected a number"),
    ("alpha-big", field("alpha", "0.7"), None, "alpha", "(0, 0.5]"),
    ("alpha-zero", field("alpha", "0"), None, "alpha", "(0, 0.5]"),
    ("min-effect-negative", field("min_effect", "-1"), None, "min_effect", ">= 0"),
    ("seeds-zero", field("seeds", "0"), None, "seeds.max", "at least 2"),
    ("seeds-word", field("seeds", "many"), None, "seeds.max", "whole number"),
    ("seeds-unknown-key", field("seeds", "{baseline: 2, maxx: 3}"), None, "seeds.maxx", "did you mean 'max'"),
    ("seeds-screen-over-max", field("seeds", "{screen: 4, max: 2}"), None, "seeds.screen", "exceeds max"),
    ("seeds-baseline-fraction", field("seeds", "{baseline: 1.5}"), None, "seeds.baseline", "whole number"),
    ("seeds-baseline-one", field("seeds", "{baseline: 1}"), None, "seeds.baseline", "at least 2"),
    ("seeds-max-huge", field("seeds", "{max: 100000}"), None, "seeds.max", "at most 100"),
    ("seeds-baseline-huge", field("seeds", "{baseline: 500, max: 4}"), None, "seeds.baseline", "at most 100"),
    ("full-scale-budget", field("full_scale", "{budget: later}"), None, "full_scale.budget", "duration"),
    ("full-scale-seeds-huge", field("full_scale", "{seeds: 5000}"), None, "full_scale.seeds", "at most 100"),
    ("limits-memory", field("limits", "{memory: lots}"), None, "limits.memory", "8g, 512m"),
    ("limits-pids-zero", field("limits", "{pids: 0}"), None, "limits.pids", ">= 1"),
    ("limits-cpus-negative", field("limits", "{cpus: -1}"), None, "limits.cpus", "positive"),
    ("protected-number", field("protected", "3"), None, "protected", "list of paths like [train/prepare.py]"),
    ("protected-dotdot", field("protected", "[../secrets.py]"), None, "protected", "without '..'"),
    ("command-list", field("command", "[python, x.py]"), None, "command", "string"),
    ("command-empty", field("command", "''"), None, "command", "non-empty string"),
    ("image-empty", field("image", "''"), None, "image", "non-empty string"),
    ("claude-scalar", field("claude", "fast"), None, "claude", "mapping"),
    ("sandbox", field("sandbox", "k8s"), None, "sandbox", "auto, local, docker"),
    ("researcher", field("researcher", "gpt5"), None, "researcher", "expected one of"),
    ("decision", field("decision", "bayes"), None, "decision", "expected one of"),
    ("fdr", field("fdr", "bh"), None, "fdr", "expected one of"),
    ("workers-zero", field("workers", "0"), None, "workers", "from 1 to 1024"),
    ("workers-word", field("workers", "lots"), None, "workers", "auto"),
    ("overlap", field("overlap", "maybe"), None, "overlap", "true or false"),
    ("cluster", field("cluster", "kubernetes"), None, "cluster", "expected one of"),
    ("target-absolute", field("target", "/etc/passwd"), None, "target", "relative to the repository root"),
    ("target-dotdot", field("target", "code/../../x.py"), None, "target", "'..'"),
    ("target-protected", field("protected", "[sleepy.py]"), None, "protected", "also protected"),
    ("metric-space", field("metric", "val bpb"), None, "metric", "letters, digits"),
    ("metric-colon", field("metric", "'val:bpb'"), None, "metric", "letters, digits"),
    ("field-twice", BASE.replace("grace: 30s", "grace: 30s\ngrace: 40s"), None, "grace", "given twice"),
    ("yaml-colon", field("metric", "a: b"), None, "metric", "not valid YAML"),
    ("yaml-unclosed-list", field("protected", "[a.py"), None, "protected", "not valid YAML"),
    ("not-utf8", BASE.replace("metric: val_bpb", "metric: val\udce9bpb").encode("utf-8", "surrogateescape")
     if "metric:" in BASE else field("metric", "val\udce9bpb").encode("utf-8", "surrogateescape"),
     None, "metric", "not UTF-8"),
]

# Repository-dependent: the start checks (agent/preflight/prestart.py). (id, setup(repo, outside) -> program text, field, fragment)


def _missing(repo, outside):
    return field("target", "train/nope.py")


def _folder(repo, outside):
    (repo / "model").mkdir()
    (repo / "model" / "net.py").write_text("x = 1\n")
    return field("target", "model")


def _link_out(repo, outside):
    (repo / "sleepy.py").unlink()
    os.symlink(outside / "sleepy.py", repo / "sleepy.py")
    return BASE


def _folder_link(repo, outside):
    os.symlink(outside, repo / "code")
    return field("target", "code/sleepy.py")


def _protected_link(repo, outside):
    os.symlink(outside / "sleepy.py", repo / "guard.py")
    return field("protected", "[guard.py]")


def _data_link(repo, outside):
    os.symlink(outside, repo / "datasets")
    return field("data", "datasets")


def _data_missing(repo, outside):
    return field("data", "datasets")


def _untracked(repo, outside):
    (repo / "other.py").write_text("x = 1\n")
    return field("target", "other.py")


REPOSITORY = [
    ("target-missing", _missing, "target", "is not in the HEAD commit", True),
    ("target-folder", _folder, "target", "is a folder", True),
    ("target-link-outside", _link_out, "target", "is a symbolic link", True),
    ("target-under-link", _folder_link, "target", "sits under code, a symbolic link", True),
    ("protected-link", _protected_link, "protected", "is a symbolic link", True),
    ("target-uncommitted", _untracked, "target", "exists but is not committed", False),
    ("data-link-outside", _data_link, "data", "datasets is a symbolic link", True),
    ("data-missing", _data_missing, "data", "datasets is not a folder", True),
]


@pytest.fixture(scope="module")
def shared_repo(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("corpus") / "user", {"sleepy.py": SLEEPY, "program.md": BASE})


def invoke(repo: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["run", "--tag", "m", "--program", str(repo / "program.md")],
                                env={"COLUMNS": "2000", "NIGHTSHIFT_DATA_ROOT": str(repo.parent / "data")})
    return result.exit_code, " ".join((result.stderr or result.output).split())


def assert_nothing_written(repo: Path) -> None:
    assert not (repo / "results" / "m").exists(), "a results folder was created"
    assert git_out(repo, "for-each-ref", "refs/heads/nightshift", "refs/nightshift") == ""
    assert git_out(repo, "worktree", "list").count("\n") == 0, "a worktree was added"


def test_the_corpus_is_large_enough():
    assert len(PARSE) + len(REPOSITORY) >= 40


@pytest.mark.parametrize("name, text, line, key, fragment", PARSE, ids=[case[0] for case in PARSE])
def test_a_malformed_program_exits_1_naming_file_line_and_field_and_writes_nothing(
        shared_repo, name, text, line, key, fragment):
    path = shared_repo / "program.md"
    if isinstance(text, bytes):
        path.write_bytes(text)
        shown = text.decode("utf-8", "replace")
    else:
        path.write_text(text)
        shown = text
    line = line or line_of(shown, key.split(".")[0])
    if name == "field-twice":
        line = line_of(shown, "grace") + 1
    code, message = invoke(shared_repo)
    assert code == 1, message
    assert f"{path}:{line}:" in message, message
    assert f"'{key}'" in message and "field" in message, message
    assert fragment in message, message
    assert "Traceback" not in message
    assert_nothing_written(shared_repo)
    print(f"\n{name}: {message.removeprefix('error: ' + str(path))[:110]}")


@pytest.mark.parametrize("name, setup, key, fragment, commit", REPOSITORY, ids=[c[0] for c in REPOSITORY])
def test_a_program_the_repository_does_not_match_exits_1_and_writes_nothing(tmp_path, name, setup, key,
                                                                           fragment, commit):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "sleepy.py").write_text(SLEEPY)
    repo = make_repo(tmp_path / "user", {"sleepy.py": SLEEPY, "program.md": BASE})
    text = setup(repo, outside)
    (repo / "program.md").write_text(text)
    if commit:
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@l", "commit", "-qm",
                        "setup"], check=True)
    code, message = invoke(repo)
    assert code == 1, message
    assert f"{repo / 'program.md'}:{line_of(text, key)}: field '{key}'" in message, message
    assert fragment in message and "Traceback" not in message, message
    assert_nothing_written(repo)
    assert (outside / "sleepy.py").read_text() == SLEEPY
    print(f"\n{name}: {message.removeprefix('error: ' + str(repo / 'program.md'))[:110]}")
