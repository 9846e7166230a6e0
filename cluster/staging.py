"""Where a job's folders are on another machine: every path a `Job` holds, moved at once.

A job names folders as the harness's machine sees them (its snapshot, its data, the mounts of
the user's data folder, its run folder, and whatever a later `RunSpec` adds). A cluster whose
nodes see another filesystem runs the same job with those paths translated, and translates the
`JobOutcome` back. `relocate` is the one function that does it: it walks any dataclass (a Job, an
JobOutcome, a RunSpec nested in either, tuples and dicts of them) and replaces every `Path` in
it, so a field added to a job later is moved too, without code here knowing its name.

A `Relocation` says where: a table of folder prefixes, the longest matching one wins. What a
run may write lives in its run folder (`run_folder`: the folder holding its `out_dir`, as
sandbox/local.py lays it out); everything else a job names is an input, read-only.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Any, Callable, Iterator

from sandbox.digest import folder_facts
from sandbox.trees import remove_tree


class StagingError(RuntimeError):
    """A path of a job has no place on the other side (a harness bug, or a folder gone)."""


def relocate(value: Any, move: Callable[[Path], Path]) -> Any:
    """`value` with every Path inside it replaced by `move(path)`: dataclasses (frozen or
    not, copied with `dataclasses.replace`), tuples, lists and dict values are walked."""
    if isinstance(value, Path):
        return move(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for item in dataclasses.fields(value):
            if not item.init:
                continue
            current = getattr(value, item.name)
            moved = relocate(current, move)
            if moved is not current:
                changes[item.name] = moved
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        moved = tuple(relocate(item, move) for item in value)
        return value if all(a is b for a, b in zip(moved, value)) else moved
    if isinstance(value, list):
        return [relocate(item, move) for item in value]
    if isinstance(value, dict):
        return {key: relocate(item, move) for key, item in value.items()}
    return value


def paths_in(value: Any) -> list[Path]:
    """Every Path inside `value`, in the order `relocate` meets them (duplicates dropped)."""
    found: list[Path] = []

    def note(path: Path) -> Path:
        if path not in found:
            found.append(path)
        return path

    relocate(value, note)
    return found


def out_dirs(value: Any) -> Iterator[Path]:
    """The `out_dir` of every RunSpec-like record inside `value` (a job may hold several)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            current = getattr(value, item.name)
            if item.name == "out_dir" and isinstance(current, Path):
                yield current
            else:
                yield from out_dirs(current)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from out_dirs(item)


def run_folder(job: Any) -> Path:
    """The folder a run writes in (its `out_dir`'s parent, with the log and the working
    layer beside it). Every out_dir of the job must lie inside it: what is not would be
    treated as an input and never come back."""
    folder = job.spec.out_dir.parent
    for out in out_dirs(job):
        if not out.is_relative_to(folder):
            raise StagingError(f"{out} is outside the run folder {folder}: a cluster could not "
                               f"bring it back (harness bug)")
    return folder


@dataclasses.dataclass(frozen=True)
class Relocation:
    """Folder prefixes and where they go; `self(path)` moves one path (the longest prefix
    wins); a path under none of them stays where it is only when `keep` says it is already
    visible there, else StagingError."""

    table: tuple[tuple[Path, Path], ...]
    keep: tuple[Path, ...] = ()

    @classmethod
    def of(cls, table: dict[Path, Path], keep: tuple[Path, ...] = ()) -> "Relocation":
        ordered = sorted(table.items(), key=lambda pair: len(pair[0].parts), reverse=True)
        return cls(tuple(ordered), keep)

    def __call__(self, path: Path) -> Path:
        for source, target in self.table:
            if path == source or path.is_relative_to(source):
                return target / path.relative_to(source)
        if any(path.is_relative_to(folder) for folder in self.keep):
            return path
        raise StagingError(f"{path} has no place on the other side (not staged; harness bug)")

    def inverse(self) -> "Relocation":
        return Relocation.of({target: source for source, target in self.table}, self.keep)


# ---- copying ---------------------------------------------------------------------------------


def fingerprint(path: Path) -> str:
    """A digest of a folder's (or a file's) path, names, sizes and mtimes: cheap, no reads."""
    return hashlib.sha256(f"{path}\0{folder_facts(path)['stat_digest']}".encode()).hexdigest()[:16]


COMPLETE = ".nightshift-staged"


def copy_in(source: Path, dest: Path) -> Path:
    """`source` (a folder, or a file) copied to `dest` once: a folder that holds the
    completion mark is reused; a half-written one (a harness killed mid-copy) is replaced.
    Links are copied as links; the copy is left read-only like the original snapshot."""
    if (dest / COMPLETE).exists():
        return dest
    staging = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    remove_tree(staging)
    if source.is_dir():
        shutil.copytree(source, staging, symlinks=True)
    else:
        staging.mkdir(parents=True)
        shutil.copy2(source, staging / source.name)
    mode = staging.stat().st_mode
    staging.chmod(mode | stat.S_IWUSR)     # a read-only snapshot's copy is read-only too
    (staging / COMPLETE).write_text(str(source))
    staging.chmod(mode)
    remove_tree(dest)
    staging.rename(dest)
    return dest


def bring_back(source: Path, dest: Path) -> None:
    """Move everything under `source` into `dest` (files replace files of the same name;
    a rename where both are on one filesystem, a copy otherwise), then remove `source`."""
    dest.mkdir(parents=True, exist_ok=True)
    for current, dirs, names in os.walk(source):
        rel = Path(current).relative_to(source)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in names:
            target = dest / rel / name
            if target.is_dir() and not target.is_symlink():
                remove_tree(target)
            shutil.move(os.path.join(current, name), target)
    remove_tree(source)
