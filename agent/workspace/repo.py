"""The git workspace: one branch `nightshift/<tag>` in its own worktree.

Contract:
- the user's checkout (working tree, index, HEAD) is never touched; all work happens on the
  branch `nightshift/<tag>`, checked out in a separate worktree, so several loops (tags) can
  run side by side on one repository;
- every candidate is one commit on top of the incumbent that changes only the target file;
  its message carries the description, hypothesis and prediction (see `candidate_message`).
  It is made with git's plumbing (no checkout, no hooks), so several candidates can be in
  flight at once: each is held by `refs/nightshift/<tag>/pending/<id>` while it is measured,
  and the branch stays at the incumbent;
- a kept candidate becomes the branch head (a fast-forward); a discarded one moves to
  `refs/nightshift/<tag>/discarded/<id>`, so no diff is ever lost;
- runs never see the live worktree: `snapshot` exports a commit's tree into a read-only folder;
- the worktree belongs to Nightshift: opening a workspace discards uncommitted edits in it.

Git is driven through gitpython's command wrapper with a fixed identity and without the
user's hooks or signing, so a user's git config cannot reject or alter an automated commit.
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

import git

from sandbox.trees import read_only_tree, remove_tree

AUTHOR_NAME = "Nightshift"
AUTHOR_EMAIL = "nightshift@localhost"
_IDENTITY_ENV = {
    "GIT_AUTHOR_NAME": AUTHOR_NAME, "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
    "GIT_COMMITTER_NAME": AUTHOR_NAME, "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL,
}
# Hooks are for people: a user's pre-commit linter must not veto or rewrite an overnight commit,
# and a post-checkout hook must not run installers while we re-add a worktree.
_GIT_OPTIONS = ("-c", "core.hooksPath=/dev/null", "-c", "core.quotePath=false")
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_REF_COMPONENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


class WorkspaceError(RuntimeError):
    """A git operation the workspace needs could not be done; the message says how to fix it."""


def validate_component(value: str, what: str) -> str:
    """Return `value` if it is safe as one git ref component (tag, experiment id), else raise."""
    if (not isinstance(value, str) or not _REF_COMPONENT.fullmatch(value)
            or ".." in value or value.endswith((".", ".lock"))):
        raise WorkspaceError(
            f"{what} {value!r} is not usable in a git branch name: use letters, digits, '.', '_' "
            f"and '-' only, not starting with '.', without '..', not ending in '.' or '.lock' "
            f"(for example 'mar5' or 'exp-0012')")
    return value


def candidate_message(description: str, hypothesis: str, prediction: Any = None,
                      experiment_id: str | None = None,
                      trailers: Mapping[str, str] | None = None) -> str:
    """The commit message of a candidate: subject, hypothesis, prediction, trailers.

    `prediction` is an `agent.researchers.base.Prediction` (read by attribute) or None.
    Trailers are `Key: value` lines in the last paragraph, readable with
    `git log --format='%(trailers:key=Nightshift-Experiment,valueonly)'`.
    """
    subject = " ".join(description.split()) or "(no description)"
    body = [f"Hypothesis: {hypothesis.strip() or '(none given)'}"]
    if prediction is not None:
        lo, hi = prediction.interval
        body.append(f"Prediction: {prediction.direction}, delta {prediction.expected_delta:+.6g} "
                    f"in [{lo:+.6g}, {hi:+.6g}] at {prediction.confidence:.0%} confidence")
        if getattr(prediction, "rationale", ""):
            body.append(f"Rationale: {prediction.rationale.strip()}")
    lines = {} if experiment_id is None else {"Nightshift-Experiment": experiment_id}
    lines.update(trailers or {})
    tail = [f"{key}: {' '.join(str(value).split())}" for key, value in lines.items()]
    return "\n\n".join(part for part in (subject, "\n".join(body), "\n".join(tail)) if part) + "\n"


def remove_snapshot(path: Path) -> None:
    """Delete a read-only snapshot made by `Workspace.snapshot`."""
    remove_tree(Path(path))


@dataclass
class Workspace:
    """One loop's branch and worktree. Build it with `Workspace.open`, not the constructor."""

    repo_root: Path        # the user's repository (git toplevel)
    tag: str
    path: Path             # the worktree root, where the branch is checked out
    _main: git.Repo = field(repr=False, compare=False)   # the user's repository
    _tree: git.Repo = field(repr=False, compare=False)   # the worktree

    # ---- opening ----

    @classmethod
    def open(cls, repo_root: Path, tag: str, worktree_dir: Path) -> "Workspace":
        """Create, or on resume reuse, branch `nightshift/<tag>` and its worktree at `worktree_dir`.

        A new branch starts at the user's current HEAD commit. If the branch exists but its
        worktree folder is gone, stale worktree entries are pruned and the worktree re-added.
        Uncommitted changes in an existing worktree are discarded (the worktree is ours).
        """
        validate_component(tag, "tag")
        main = _open_repo(Path(repo_root))
        branch = f"nightshift/{tag}"
        worktree_dir = Path(worktree_dir).absolute()
        if _rev(main, f"refs/heads/{branch}") is None:
            _git(main, "branch", branch, _rev(main, "HEAD"))
        where = _worktree_of(main, branch)
        if (where is None or not where.exists()) and (worktree_dir / ".git").is_file():
            # The repository moved with results/ inside it: reconnect rather than re-add.
            # (Before pruning, which would forget the entry that repair needs.)
            _git(main, "worktree", "repair", str(worktree_dir), check=False)
            where = _worktree_of(main, branch)
        if where is None or not where.exists():
            _git(main, "worktree", "prune")
        if where is not None and where.exists():
            if where.resolve() != worktree_dir.resolve():
                raise WorkspaceError(
                    f"branch {branch} is already checked out at {where}; Nightshift needs it at "
                    f"{worktree_dir}. Switch that checkout to another branch, or run "
                    f"`git worktree remove {where}`, then start again")
        else:
            if _is_nonempty(worktree_dir):
                raise WorkspaceError(
                    f"{worktree_dir} exists and is not the worktree of branch {branch}; move it "
                    f"away or delete it, then start again")
            worktree_dir.parent.mkdir(parents=True, exist_ok=True)
            _git(main, "worktree", "add", str(worktree_dir), branch)
        tree = git.Repo(worktree_dir)
        _git(tree, "reset", "--hard", "--quiet", "HEAD")
        return cls(Path(main.working_tree_dir), tag, worktree_dir, main, tree)

    @property
    def branch(self) -> str:
        return f"nightshift/{self.tag}"

    @property
    def repo(self) -> git.Repo:
        """The gitpython repository of the worktree (shares objects and refs with the user's)."""
        return self._tree

    # ---- reading ----

    def head(self) -> str:
        """The sha of the branch head."""
        return self.resolve(f"refs/heads/{self.branch}")

    def resolve(self, rev: str) -> str:
        """The full sha of commit `rev`; WorkspaceError if it does not name a commit."""
        sha = _rev(self._main, rev)
        if sha is None:
            raise WorkspaceError(f"{rev!r} does not name a commit in {self.repo_root}")
        return sha

    def read(self, path: str, commit: str | None = None) -> str:
        """The text of `path` (repo-relative) at `commit` (default: the branch head)."""
        sha = self.resolve(commit or f"refs/heads/{self.branch}")
        rel = _relative(path)
        try:
            data = _git(self._main, "cat-file", "blob", f"{sha}:{rel}", raw=True)
        except WorkspaceError:
            raise FileNotFoundError(f"{rel} does not exist at commit {sha[:12]}") from None
        return data.decode("utf-8")

    def parent(self, sha: str) -> str | None:
        """The first parent of `sha`, or None for a root commit."""
        shas = _git(self._main, "rev-list", "--parents", "-n", "1", self.resolve(sha)).split()
        return shas[1] if len(shas) > 1 else None

    def diff(self, sha: str, parent: str | None = None) -> str:
        """The patch from `parent` (default: the first parent) to `sha`; `git apply`-able."""
        sha = self.resolve(sha)
        base = self.resolve(parent) if parent else (self.parent(sha) or _EMPTY_TREE)
        return _git(self._main, "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--binary",
                    "--full-index", "--no-renames", "--src-prefix=a/", "--dst-prefix=b/",
                    base, sha, raw=True).decode("utf-8", errors="replace")

    def changed_paths(self, base: str, candidate: str) -> list[str]:
        """Repo-relative paths that differ (changed, added, deleted) between two commits."""
        out = _git(self._main, "diff-tree", "-r", "-z", "--name-only", "--no-renames",
                   self.resolve(base), self.resolve(candidate), raw=True).decode("utf-8")
        return sorted(p for p in out.split("\0") if p)

    def discarded_refs(self) -> dict[str, str]:
        """Experiment id -> sha of every candidate discarded on this tag."""
        return self._refs("discarded")

    def pending_refs(self) -> dict[str, str]:
        """Experiment id -> sha of every candidate committed and not yet kept or discarded."""
        return self._refs("pending")

    def _refs(self, kind: str) -> dict[str, str]:
        prefix = f"refs/nightshift/{self.tag}/{kind}/"
        out = _git(self._main, "for-each-ref", "--format=%(objectname) %(refname)", prefix)
        found = (line.split(" ", 1) for line in out.splitlines() if line)
        return {ref[len(prefix):]: sha for sha, ref in found}

    # ---- changing the branch ----

    def commit_candidate(self, target: str, source: str, message: str, *,
                         parent: str | None = None, name: str | None = None) -> str:
        """Commit `source` as `target` on top of `parent` (default: the branch head), changing
        only that file, and hold it under refs/nightshift/<tag>/pending/<name>; return its sha.

        The branch and the worktree do not move: candidates wait side by side until `keep`
        or `discard`. The commit is authored by Nightshift whatever the user's git config
        says, and no hook runs. Raises WorkspaceError when `source` equals the file at
        `parent` (nothing to commit), or when the target, or a folder above it, is a
        symbolic link in the repository (an edit through it would land outside the file).
        """
        rel = _relative(target)
        parent = self.resolve(parent or f"refs/heads/{self.branch}")
        entries = self._tree_entries(parent, rel)
        for path, (mode, _) in entries.items():
            if mode == "120000":
                raise WorkspaceError(f"{path} is a symbolic link at {parent[:12]}; the target must "
                                     f"be a regular file of the repository (edit what it points to "
                                     f"as the target instead)")
        mode, old_blob = entries.get(rel, ("100644", None))
        with tempfile.TemporaryDirectory(prefix="nightshift-commit-") as tmp:
            draft = Path(tmp) / "draft"
            draft.write_bytes(source.encode("utf-8"))     # bytes: no newline translation
            blob = _git(self._main, "hash-object", "-w", "--no-filters", str(draft)).strip()
            if blob == old_blob:
                raise WorkspaceError(f"{rel} is unchanged from {parent[:12]}; nothing to commit")
            index = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            _git(self._main, "read-tree", parent, env=index)
            _git(self._main, "update-index", "--add", "--cacheinfo", f"{mode},{blob},{rel}", env=index)
            tree = _git(self._main, "write-tree", env=index).strip()
        message = "\n".join(line.rstrip() for line in message.strip().splitlines()) + "\n"
        sha = _git(self._main, "commit-tree", tree, "-p", parent, "-m", message,
                   env=_IDENTITY_ENV).strip()
        if name is not None:
            self.hold(sha, name)
        return sha

    def _tree_entries(self, commit: str, rel: str) -> dict[str, tuple[str, str]]:
        """path -> (mode, object) at `commit` for `rel` and every folder above it that exists."""
        parts = PurePosixPath(rel).parts
        paths = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        out = _git(self._main, "ls-tree", "-z", commit, "--", *paths, raw=True).decode("utf-8")
        found = {}
        for record in filter(None, out.split("\0")):
            meta, path = record.split("\t", 1)
            mode, _, obj = meta.split(" ")
            found[path] = (mode, obj)
        return found

    def reset_to(self, sha: str) -> None:
        """Hard-reset the branch and its worktree to `sha`."""
        _git(self._tree, "reset", "--hard", "--quiet", self.resolve(sha))

    def keep(self, sha: str, name: str | None = None) -> None:
        """Make `sha` the branch head (a fast-forward: it must descend from the head) and
        release its pending ref `name`. Idempotent."""
        sha, head = self.resolve(sha), self.head()
        if sha != head:
            if not self._main.is_ancestor(head, sha):
                raise WorkspaceError(f"cannot keep {sha[:12]}: it does not descend from the branch "
                                     f"head {head[:12]} of {self.branch}")
            self.reset_to(sha)
        if name is not None:
            self.release(name)

    def hold(self, sha: str, name: str) -> None:
        """Hold candidate `sha` under refs/nightshift/<tag>/pending/<name> (it is measured)."""
        validate_component(name, "experiment id")
        _git(self._main, "update-ref", "-m", "nightshift candidate",
             f"refs/nightshift/{self.tag}/pending/{name}", self.resolve(sha))

    def pin(self, sha: str, kind: str, name: str) -> str:
        """Keep `sha` under refs/nightshift/<tag>/<kind>/<name> (commits made for a morning's
        tool, such as `ablate`'s variants, that must outlive it); returns the ref."""
        ref = f"refs/nightshift/{self.tag}/{validate_component(kind, 'ref kind')}/" \
              f"{validate_component(name, 'ref name')}"
        _git(self._main, "update-ref", "-m", f"nightshift {kind}", ref, self.resolve(sha))
        return ref

    def release(self, name: str) -> None:
        """Drop the pending ref `name` (its candidate was kept, discarded or superseded)."""
        validate_component(name, "experiment id")
        _git(self._main, "update-ref", "-d", f"refs/nightshift/{self.tag}/pending/{name}", check=False)

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self._main.is_ancestor(self.resolve(ancestor), self.resolve(descendant))

    def discard(self, sha: str, experiment_id: str, incumbent: str) -> None:
        """Keep `sha` under refs/nightshift/<tag>/discarded/<id> and release its pending ref;
        the branch stays at (or, if it held the candidate, goes back to) `incumbent`.
        Idempotent; refuses to move a branch whose head is neither of the two."""
        validate_component(experiment_id, "experiment id")
        sha, incumbent = self.resolve(sha), self.resolve(incumbent)
        ref = f"refs/nightshift/{self.tag}/discarded/{experiment_id}"
        existing = _rev(self._main, ref)
        if existing is None:
            _git(self._main, "update-ref", "-m", "nightshift discard", ref, sha, "")
        elif existing != sha:
            raise WorkspaceError(f"{ref} already points at {existing[:12]}, not {sha[:12]}; "
                                 f"experiment ids must be unique within a tag")
        self.release(experiment_id)
        head = self.head()
        if head == incumbent:
            return
        if head != sha:
            raise WorkspaceError(f"branch {self.branch} is at {head[:12]}, neither the discarded "
                                 f"{sha[:12]} nor the incumbent {incumbent[:12]}; not moving it")
        self.reset_to(incumbent)

    # ---- exporting ----

    def snapshot(self, sha: str, dest: Path) -> Path:
        """Export the tree of commit `sha` into `dest` (absent or empty) and make it read-only.

        Files become 0444 (0555 if executable in git), folders 0555. The export is a checkout
        through a throw-away index (`read-tree -u`), so it matches the commit exactly: no
        uncommitted worktree edits, and unlike `git archive` no export-ignore/export-subst.
        """
        sha, dest = self.resolve(sha), Path(dest).absolute()
        if _is_nonempty(dest):
            raise WorkspaceError(f"snapshot folder {dest} is not empty; pick a new folder")
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="nightshift-index-") as tmp:
            # One process: read the tree into a private index (never the user's) and check it
            # out into dest; sparse checkout off, or a sparse user repo would export a part.
            _git(self._main, "read-tree", "-u", "--reset", sha,
                 options=("-c", "core.sparseCheckout=false", f"--work-tree={dest}"),
                 env={"GIT_INDEX_FILE": os.path.join(tmp, "index")})
        read_only_tree(dest)
        return dest

    # ---- cleanup ----

    def close(self) -> None:
        """Stop gitpython's helper processes. The workspace stays usable by a new `open`."""
        self._tree.close()
        self._main.close()

    def remove(self, delete_branch: bool = False) -> None:
        """Remove the worktree (and, if asked, the branch and its discarded refs)."""
        self._tree.close()
        _git(self._main, "worktree", "remove", "--force", str(self.path), check=False)
        _git(self._main, "worktree", "prune")  # in case the folder was already gone
        if delete_branch:
            _git(self._main, "branch", "-D", "--quiet", self.branch)
            for ident in self.discarded_refs():
                ref = f"refs/nightshift/{self.tag}/discarded/{ident}"
                _git(self._main, "update-ref", "-d", ref)
        self._main.close()


# ---- helpers ----

def _open_repo(repo_root: Path) -> git.Repo:
    try:
        repo = git.Repo(repo_root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise WorkspaceError(f"{repo_root} is not inside a git repository; run `git init` and "
                             f"commit your code there first") from None
    if repo.bare or repo.working_tree_dir is None:
        raise WorkspaceError(f"{repo_root} is a bare repository; point Nightshift at a checkout")
    top = Path(repo.working_tree_dir)
    if top.resolve() != repo_root.resolve():
        raise WorkspaceError(f"{repo_root} is inside the git repository {top}; pass its top "
                             f"level ({top}) as the repository root")
    if _rev(repo, "HEAD") is None:
        raise WorkspaceError(f"{top} has no commits yet; commit your code first "
                             f"(git add -A && git commit -m 'initial')")
    return repo


def _git(repo: git.Repo, *args: str, options: tuple[str, ...] = (),
         env: Mapping[str, str] | None = None, raw: bool = False, check: bool = True) -> Any:
    """Run `git <options> <args>` in `repo`'s folder. Returns stdout (str, or bytes if `raw`;
    never stripped of its final newline when raw, which gitpython otherwise does)."""
    command = [git.Git.GIT_PYTHON_GIT_EXECUTABLE, *_GIT_OPTIONS, *options, *args]
    try:
        return repo.git.execute(command, env=dict(env or {}), stdout_as_string=not raw,
                                strip_newline_in_stdout=not raw, with_exceptions=True)
    except git.GitCommandError as err:
        if not check:
            return ""
        detail = (err.stderr or "").strip().removeprefix("stderr:").strip(" '\n")
        raise WorkspaceError(f"git {' '.join(args[:2])} failed in {repo.working_dir}: "
                             f"{detail}") from None


def _rev(repo: git.Repo, rev: str) -> str | None:
    if not rev or rev.startswith("-"):  # never let a revision be read as an option
        return None
    out = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    return out.strip() or None


def _worktree_of(repo: git.Repo, branch: str) -> Path | None:
    """Where `branch` is checked out according to `git worktree list`, if anywhere."""
    path = None
    for line in _git(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = Path(line[len("worktree "):])
        elif line == f"branch refs/heads/{branch}":
            return path
    return None


def _relative(path: str) -> str:
    """A normalised repo-relative posix path; refuses paths that leave the repository."""
    rel = PurePosixPath(str(path).replace(os.sep, "/"))
    if rel.is_absolute() or ".." in rel.parts or str(rel) in ("", "."):
        raise WorkspaceError(f"{path!r} must be a path inside the repository, relative to its root")
    return str(rel)


def _is_nonempty(folder: Path) -> bool:
    return folder.exists() and (not folder.is_dir() or any(folder.iterdir()))
