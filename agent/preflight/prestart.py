"""Everything `run` checks before it writes anything: what program.md names must exist in the
repository as it says, the tag's git refs must agree with its ledger, the disk must have room.

program.md's own fields are validated when it is read (agent/program.py); what needs the
repository is checked here, once, by `prestart`, before the lock, the branch, the worktree
or the results folder exist. A failure is a PrestartError whose message names the file,
the line and the field (as program.md's errors do) and the fix; `code` is the exit code.
Nothing here changes the repository or the disk. (`nightshift check`, agent/preflight/check.py,
goes further: it runs the script; it reuses `check_paths`.)
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agent.program import Program
from agent.record.events import ExitCode
from agent.record.ledger import LEDGER_FILE
from agent.record.state import LoopState
from agent.workspace.inspect import (RepositoryError, head_commit, is_ancestor, path_at_head,
                                     stale_git_locks, tag_refs, uncommitted)

MIN_FREE_MB = 16         # a run's log, result and provenance, and the ledger's lines


class PrestartError(ValueError):
    """The night cannot start; the message says where and the fix. `code`: the exit code."""

    def __init__(self, message: str, code: ExitCode = ExitCode.BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Plan:
    """What the checks found out about the tag, for the session to act on."""

    head: str                          # the user's HEAD commit
    starts: bool                       # no evidence yet: the night starts (again) at `head`
    archive: bool = False              # --fresh: the tag's old refs are to be archived first
    notes: list[str] = field(default_factory=list)   # things worth saying at start


def prestart(program: Program, tag: str, results: Path, state: LoopState | None, *,
             fresh: bool = False, allow_dirty: bool = False) -> Plan:
    """Check `program` against its repository and `tag` against its ledger and refs. `state`
    is the tag's ledger, folded by the caller (None: there is none), so it is read once."""
    root = program.root
    try:
        head = head_commit(root)
    except RepositoryError as error:
        raise PrestartError(str(error)) from None
    _check_disk(results, root)    # first: on a full disk even git's questions fail
    try:
        return _prestart(program, tag, results, head, fresh, allow_dirty, state)
    except RepositoryError as error:    # git itself failed (not the program): exit 4
        raise PrestartError(str(error), ExitCode.LOOP) from None


def _prestart(program: Program, tag: str, results: Path, head: str, fresh: bool,
               allow_dirty: bool, state: LoopState | None) -> Plan:
    root = program.root
    check_paths(program)
    _check_cluster(program)
    notes: list[str] = [f"{program.locate('protected')}: {path} is not in HEAD {head[:8]}: nothing "
                        f"there to protect (a typo?)" for path in program.protected
                        if "protected" in program.locations and path_at_head(root, path).kind == "missing"]
    started = state is not None and state.started
    evidence = state is not None and state.has_evidence
    archive = False
    refs = tag_refs(root, tag)
    if fresh and started:
        raise PrestartError(
            f"--fresh starts tag {tag} over, but {results / LEDGER_FILE} holds its night; "
            f"`run --tag {tag}` without --fresh resumes it, or move {results} away first (nothing "
            f"of a night is deleted by Nightshift) and run again with --fresh")
    if not started and refs:
        if _used_before(root, tag, refs, head):
            if not fresh:
                raise PrestartError(_used_message(tag, refs, results))
            archive = True
        else:
            notes.append(f"branch nightshift/{tag} of an earlier attempt that never ran is moved "
                         f"to HEAD {head[:8]}")
    elif started and not evidence:
        notes.append(f"tag {tag} has no measurement yet: it starts again at HEAD {head[:8]}")
    starts = not evidence
    if starts:
        notes += _dirty(program, head, allow_dirty)
    locks = stale_git_locks(root, tag, results / "worktree")
    if locks:
        raise PrestartError(
            f"git lock file{'s' if len(locks) > 1 else ''} {', '.join(map(str, locks))} "
            f"{'are' if len(locks) > 1 else 'is'} left from a git command that did not finish "
            f"(a crash, a full disk); the night's git commands would fail on "
            f"{'them' if len(locks) > 1 else 'it'}. If no git command is running, remove "
            f"{'them' if len(locks) > 1 else 'it'}: rm {' '.join(map(str, locks))}", ExitCode.LOOP)
    return Plan(head=head, starts=starts, archive=archive, notes=notes)


def check_paths(program: Program) -> None:
    """The target is a file of HEAD, protected paths and the data folder stay inside the
    repository, and none of them is, or sits under, a symbolic link."""
    root = program.root
    target = path_at_head(root, program.target)
    where = program.locate("target")
    if target.kind == "missing":
        exists = (root / program.target).exists()
        raise PrestartError(f"{where}: {program.target} is not in the HEAD commit of {root}"
                             + ("; it exists but is not committed: git add and commit it"
                                if exists else "; fix the path, or commit the file"))
    if target.kind == "folder":
        raise PrestartError(f"{where}: {program.target} is a folder; the target is the one file "
                             f"the researcher edits (like train/train.py)")
    if target.kind in ("link", "submodule"):
        raise PrestartError(f"{where}: {_link_text(target)}; the target must be a regular file "
                             f"of the repository (name the file it points to instead)")
    for path in program.protected:
        found = path_at_head(root, path)
        if found.kind in ("link", "submodule"):
            raise PrestartError(f"{program.locate('protected')}: {_link_text(found)}; a protected "
                                 f"path must be a file or folder of the repository itself, so that "
                                 f"its digest is of what the runs see")
    data = getattr(program, "data", None)    # a repository folder mounted into runs, if set
    if data:
        _check_on_disk(root, data, program.locate("data"), folder=True)
    for path in program.view.add:            # host paths the runs may read (sandbox.view)
        if not os.path.exists(path):
            raise PrestartError(f"{program.locate('view')}: view.add names {path}, which does not "
                                f"exist on this machine; fix the path, or remove it")


def _link_text(found) -> str:
    if found.kind == "submodule":
        return f"{found.path} is a git submodule"
    if found.link == found.path:
        return f"{found.path} is a symbolic link"
    return f"{found.path} sits under {found.link}, a symbolic link"


def _check_on_disk(root: Path, rel: str, where: str, folder: bool) -> None:
    """A path of the checkout (it may be untracked, like a data folder) that must stay inside."""
    current = Path(root)
    for part in Path(rel).parts:
        current = current / part
        if current.is_symlink():
            raise PrestartError(f"{where}: {current.relative_to(root)} is a symbolic link; "
                                 f"a path of the repository must stay inside it")
    resolved = (Path(root) / rel).resolve()
    if not resolved.is_relative_to(Path(root).resolve()):
        raise PrestartError(f"{where}: {rel} leaves the repository (it resolves to {resolved})")
    if folder and not resolved.is_dir():
        raise PrestartError(f"{where}: {rel} is not a folder of {root}")


def _dirty(program: Program, head: str, allow_dirty: bool) -> list[str]:
    """Uncommitted changes to what the night runs: an error, or with --allow-dirty a note."""
    changed = uncommitted(program.root, [program.target, *program.protected])
    if not changed:
        return []
    names = ", ".join(changed)
    if allow_dirty:
        return [f"--allow-dirty: the night runs HEAD {head[:8]}; the uncommitted changes to "
                f"{names} are not used"]
    raise PrestartError(
        f"{program.root}: uncommitted changes to {names}; the night runs commits, so they would "
        f"be ignored. Commit them (git commit -am '...'), or pass --allow-dirty to run HEAD "
        f"{head[:8]} as it is")


def _used_before(root: Path, tag: str, refs: dict[str, str], head: str) -> bool:
    """Whether the refs hold a night's work: candidates, or a branch past the user's HEAD.
    A bare branch at an ancestor of HEAD is an attempt that stopped before it ran."""
    branch = refs.get(f"refs/heads/nightshift/{tag}")
    others = [ref for ref in refs if ref != f"refs/heads/nightshift/{tag}"]
    return bool(others) or (branch is not None and not is_ancestor(root, branch, head))


def _used_message(tag: str, refs: dict[str, str], results: Path) -> str:
    kinds: dict[str, int] = {}
    for ref in refs:
        kind = "branch" if ref.startswith("refs/heads/") else ref.split("/")[3]
        kinds[kind] = kinds.get(kind, 0) + 1
    found = ", ".join(f"{n} {k}" if k != "branch" else f"branch nightshift/{tag}"
                      for k, n in sorted(kinds.items()))
    return (f"tag {tag} was used before: its git refs remain ({found}) but its ledger "
            f"{results / LEDGER_FILE} is gone, so they cannot be resumed. Start over with "
            f"`nightshift run --tag {tag} --fresh` (the old refs are kept under "
            f"refs/nightshift-archive/{tag}-<time>/), or pick another --tag")


def _check_cluster(program: Program) -> None:
    """Slurm's shared directory: there, a folder, writable (before anything is written)."""
    if program.cluster != "slurm":
        return
    from cluster.slurm_settings import check_shared_dir

    where = program.locations.get("slurm") or program.locations.get("", program.path.name)
    try:
        check_shared_dir(program.slurm.shared_dir, f"{where}: field 'slurm.shared_dir'")
    except ValueError as error:
        raise PrestartError(str(error)) from None


def _check_disk(results: Path, root: Path) -> None:
    """The results folder (or where it will be) is writable and has room."""
    existing = next((p for p in [results, *results.parents] if p.exists()), root)
    if not os.access(existing, os.W_OK):
        raise PrestartError(f"{existing} is not writable, and the night's ledger goes under "
                             f"{results}; fix the permissions", ExitCode.LOOP)
    free_mb = shutil.disk_usage(existing).free / 2**20
    if free_mb < MIN_FREE_MB:
        raise PrestartError(f"only {free_mb:.1f} MB free on the disk of {existing}, where the "
                             f"night's ledger and runs go ({results}); free at least "
                             f"{MIN_FREE_MB} MB", ExitCode.LOOP)
