"""Questions about the user's repository asked before a workspace is opened, changing
nothing: what a path is at HEAD, which paths have uncommitted changes, which refs a tag
left behind, which git lock files would make the night's git commands fail.

`archive_tag` is the one writer here: it moves a tag's refs aside (see `nightshift run --fresh`).
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

STALE_LOCK_S = 10.0      # a git lock file older than this is not a git command at work
ARCHIVE = "refs/nightshift-archive"


class RepositoryError(RuntimeError):
    """The repository cannot be asked (not a repository, no commit); says the fix."""


@dataclass(frozen=True)
class PathAtHead:
    """What `path` is in the HEAD commit."""

    path: str
    kind: str                  # file | folder | link | submodule | missing
    link: str | None = None    # the link (the path itself or a folder above it), when kind is link


def _git(root: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(root), "-c", "core.quotePath=false", *args],
                          capture_output=True, text=True, errors="replace")
    if check and done.returncode != 0:
        raise RepositoryError(f"git {' '.join(args[:2])} failed in {root}: {done.stderr.strip()}")
    return done.stdout


def head_commit(root: Path) -> str:
    """HEAD's sha, or RepositoryError saying how to make one."""
    if not (Path(root) / ".git").exists():
        raise RepositoryError(f"{root} is not the top of a git repository; run `git init` and "
                              f"commit your code there first")
    sha = _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False).strip()
    if not sha:
        raise RepositoryError(f"{root} has no commits yet; commit your code first "
                              f"(git add -A && git commit -m 'initial')")
    return sha


def path_at_head(root: Path, path: str) -> PathAtHead:
    """The kind of `path` (repo-relative) at HEAD; a link anywhere on the way makes it `link`."""
    parts = PurePosixPath(path).parts
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    modes = {}
    for prefix in prefixes:   # one at a time: given a folder and a file in it, ls-tree lists only the file
        for record in filter(None, _git(root, "ls-tree", "-z", "HEAD", "--", prefix).split("\0")):
            meta, name = record.split("\t", 1)
            modes[name] = meta.split(" ")[0]
    for prefix in prefixes:
        mode = modes.get(prefix)
        if mode is None:
            return PathAtHead(path, "missing")
        if mode == "120000":
            return PathAtHead(path, "link", link=prefix)
        if mode == "160000":
            return PathAtHead(path, "submodule")
        if mode != "040000" and prefix != path:
            return PathAtHead(path, "missing")      # a file where a folder should be
    return PathAtHead(path, "folder" if modes[path] == "040000" else "file")


def uncommitted(root: Path, paths: list[str]) -> list[str]:
    """Which of `paths` (files or folders) differ from HEAD in the user's checkout: edited,
    staged, deleted or new."""
    if not paths:
        return []
    # --no-optional-locks: a question must not write (status refreshes the index otherwise,
    # which fails on a full disk and races the user's own git)
    out = _git(root, "--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all",
               "--", *paths)
    changed = []
    entries = out.split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        if len(entry) > 3:
            changed.append(entry[3:])
            if entry[0] in "RC":   # a rename's source follows it
                i += 1
        i += 1
    return sorted(set(changed))


def tag_refs(root: Path, tag: str) -> dict[str, str]:
    """Every ref of tag `tag`: its branch and refs/nightshift/<tag>/* -> sha."""
    out = _git(root, "for-each-ref", "--format=%(objectname) %(refname)",
               f"refs/heads/nightshift/{tag}", f"refs/nightshift/{tag}/")
    refs = {}
    for line in out.splitlines():
        sha, ref = line.split(" ", 1)
        if ref == f"refs/heads/nightshift/{tag}" or ref.startswith(f"refs/nightshift/{tag}/"):
            refs[ref] = sha
    return refs


def is_ancestor(root: Path, ancestor: str, descendant: str) -> bool:
    done = subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", ancestor, descendant],
                          capture_output=True)
    return done.returncode == 0


def stale_git_locks(root: Path, tag: str, worktree: Path) -> list[Path]:
    """Git lock files that would make the night's ref updates or resets fail: under the tag's
    refs, the branch's, packed-refs', and the tag worktree's index and HEAD. Only locks older
    than STALE_LOCK_S count (a git command at work holds one for moments)."""
    common = Path(_git(root, "rev-parse", "--git-common-dir").strip())
    common = common if common.is_absolute() else (Path(root) / common)
    found = [common / "packed-refs.lock", common / "refs" / "heads" / "nightshift" / f"{tag}.lock"]
    tag_dir = common / "refs" / "nightshift" / tag
    if tag_dir.is_dir():
        found += [p for p in tag_dir.rglob("*.lock")]
    for admin in (common / "worktrees").glob("*"):
        try:
            points_at = Path((admin / "gitdir").read_text().strip()).parent
        except OSError:
            continue
        if os.path.abspath(points_at) == os.path.abspath(worktree):
            found += [admin / "index.lock", admin / "HEAD.lock"]
    now = time.time()
    stale = []
    for path in found:
        try:
            if now - path.stat().st_mtime >= STALE_LOCK_S:
                stale.append(path)
        except OSError:
            continue
    return sorted(set(stale))


def archive_tag(root: Path, tag: str, stamp: str) -> str:
    """Move every ref of `tag` under refs/nightshift-archive/<tag>-<stamp>/ (the branch as
    `branch`, the rest by their names under refs/nightshift/<tag>/), forget the branch's
    worktree, and return the archive's prefix. Nothing is deleted: every commit stays
    reachable from the archive."""
    prefix = f"{ARCHIVE}/{tag}-{stamp}"
    refs = tag_refs(root, tag)
    branch = f"refs/heads/nightshift/{tag}"
    _unregister_worktree(root, branch)
    for ref, sha in refs.items():
        name = "branch" if ref == branch else ref[len(f"refs/nightshift/{tag}/"):]
        _git(root, "update-ref", "-m", "nightshift --fresh", f"{prefix}/{name}", sha, "")
        _git(root, "update-ref", "-d", ref, sha)
    return prefix


def _unregister_worktree(root: Path, branch: str) -> None:
    """Remove the worktree that has `branch` checked out (it belongs to Nightshift)."""
    _git(root, "worktree", "prune", check=False)
    where = None
    for line in _git(root, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            where = line[len("worktree "):]
        elif line == f"branch {branch}" and where:
            _git(root, "worktree", "remove", "--force", where, check=False)
            _git(root, "worktree", "prune", check=False)
