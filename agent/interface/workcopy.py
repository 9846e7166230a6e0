"""The agent's working copy: where an agent outside the harness edits the target.

`nightshift checkout` makes (or resets) a detached git worktree of the user's repository at the
night's incumbent, by default `results/<tag>/agent/` (several agents: one folder each). The
commit it was checked out at is the proposal's base, kept in the worktree's own git folder
(invisible to the agent's `git status`), so `nightshift propose` knows what the edit is an edit
of even after the incumbent moved on, and the night rebases it (agent/night/admission.py).

The night's own worktree is never the agent's: the loop commits with plumbing and resets its
worktree on resume, so an agent's edits there would be lost or taken for tampering.

What may change is the night's rule, checked here before anything is filed: the target only
(program.md's `target:`), in the working tree or in commits made in the copy. A change to any
other tracked file refuses the proposal, naming the files and how to undo them; untracked
files are reported, not sent (a proposal is the target's text).
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

_GIT = ("git", "-c", "core.hooksPath=/dev/null", "-c", "core.quotePath=false",
        "-c", "advice.detachedHead=false")
_BASE_FILE = "nightshift-base.json"


class WorkCopyError(RuntimeError):
    """The working copy cannot be made or read; the message says how to fix it."""


@dataclass(frozen=True)
class WorkCopy:
    path: Path
    tag: str
    base: str          # the commit it was checked out at: the base of its proposals
    target: str        # repo-relative path of the file a proposal changes

    @property
    def target_path(self) -> Path:
        return self.path / self.target

    def changes(self) -> tuple[list[str], list[str]]:
        """(tracked paths that differ from the base, untracked paths), the target included."""
        changed = _git(self.path, "diff", "--name-only", "--no-renames", self.base, "--").split("\n")
        untracked = _git(self.path, "ls-files", "--others", "--exclude-standard").split("\n")
        return sorted(p for p in changed if p), sorted(p for p in untracked if p)

    def proposal_source(self) -> str:
        """The target's text as the agent left it, once nothing else changed (else
        WorkCopyError naming what did and how to undo it)."""
        changed, _ = self.changes()
        others = [p for p in changed if p != self.target]
        if others:
            listed = " ".join(others)
            raise WorkCopyError(
                f"only {self.target} may change (program.md's target), but {self.path} also "
                f"changes {', '.join(others)}; undo that with `git -C {self.path} checkout "
                f"{self.base[:12]} -- {listed}` and propose again")
        if self.target not in changed:
            raise WorkCopyError(f"{self.target_path} is unchanged since the checkout at "
                                f"{self.base[:8]}: edit it, then propose")
        try:
            return self.target_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise WorkCopyError(f"cannot read {self.target_path}: {error}") from None


    def base_source(self) -> str | None:
        """The target's text at the base (None where the base has no such file)."""
        try:
            return _git(self.path, "cat-file", "blob", f"{self.base}:{self.target}", strip=False)
        except WorkCopyError:
            return None


def checkout(repo_root: Path, tag: str, commit: str, target: str, dest: Path) -> WorkCopy:
    """A working copy of `commit` at `dest`, made, or reset when it is one already (the
    agent's edits there are dropped: a checkout starts a new proposal)."""
    dest = Path(dest).absolute()
    if dest.exists() and any(dest.iterdir()):
        if not _is_worktree_of(dest, repo_root):
            raise WorkCopyError(f"{dest} exists and is not a working copy of {repo_root}: "
                                f"choose another --dir, or remove it")
        _git(dest, "checkout", "--quiet", "--detach", "--force", commit)
        _git(dest, "reset", "--quiet", "--hard", commit)
    else:
        _git(repo_root, "worktree", "prune")
        dest.parent.mkdir(parents=True, exist_ok=True)
        _git(repo_root, "worktree", "add", "--quiet", "--detach", "--force", str(dest), commit)
    (_git_dir(dest) / _BASE_FILE).write_text(json.dumps({"tag": tag, "base": commit, "target": target}))
    return WorkCopy(dest, tag, commit, target)


def open_copy(path: Path, tag: str) -> WorkCopy:
    """The working copy at `path` (any folder inside one) made by `checkout` for `tag`."""
    path = Path(path).absolute()
    if not path.exists():
        raise WorkCopyError(f"{path} does not exist: `nightshift checkout --tag {tag}` makes the "
                            f"working copy first")
    try:
        top = Path(_git(path, "rev-parse", "--show-toplevel"))
        record = json.loads((_git_dir(top) / _BASE_FILE).read_text())
    except (WorkCopyError, OSError, ValueError):
        raise WorkCopyError(f"{path} is not a working copy made by `nightshift checkout`: run "
                            f"`nightshift checkout --tag {tag}` and edit the copy it prints") from None
    if record.get("tag") != tag:
        raise WorkCopyError(f"{top} was checked out for tag {record.get('tag')!r}, not {tag!r}")
    return WorkCopy(top, tag, record["base"], record["target"])


def _is_worktree_of(path: Path, repo_root: Path) -> bool:
    try:
        common = Path(_git(path, "rev-parse", "--path-format=absolute", "--git-common-dir"))
        ours = Path(_git(repo_root, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    except WorkCopyError:
        return False
    return common.resolve() == ours.resolve()


def _git_dir(path: Path) -> Path:
    return Path(_git(path, "rev-parse", "--path-format=absolute", "--git-dir"))


def _git(cwd: Path, *args: str, strip: bool = True) -> str:
    done = subprocess.run([*_GIT, "-C", str(cwd), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise WorkCopyError(f"git {' '.join(args)} in {cwd}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip() if strip else done.stdout
