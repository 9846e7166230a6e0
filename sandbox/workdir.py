"""A run's private, writable working directory over a read-only snapshot.

Scripts written for a person's checkout write next to themselves (`out/ckpt.pt`, a
`wandb/` folder, a cache), and read their data from a path inside the repository
(`data/shakespeare_char/train.bin`). With `RunSpec.writable_workdir` a run may do both
without touching the snapshot, which all seeds of a commit share:

- `overlay` (local backend, in its mount namespace): an overlayfs whose lower layer is
  the snapshot and whose upper layer is `<run dir>/work`; nothing is copied;
- `copy` (the docker backend, and the local one where overlayfs or namespaces are not
  available): the snapshot is copied into `<run dir>/work` before the run.

Either way, tracked files keep their read-only modes (a script may replace them, not edit
them in place), every folder is writable, and `spec.mounts` appear read-only at their
paths (in the copy fallback without a mount namespace: a symlink, read-only only by the
folder's own permissions). After the run `finish_*` leaves in `<run dir>/work` exactly the
files the run created or changed, as plain files, and returns them: relative path ->
bytes, None for a file it deleted. What to keep of them is the harness's business.
"""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path, PurePosixPath
from typing import Iterable

from sandbox.protocol import DataMount
from sandbox.trees import remove_tree

WORK_DIR = "work"                 # <run dir>/work: what the run wrote in its working directory
OVERLAY_SCRATCH = ".overlay-work"  # overlayfs's own work folder, removed after the run


def work_dir(run_dir: Path) -> Path:
    return Path(run_dir) / WORK_DIR


# ---- overlay -------------------------------------------------------------------------------

def overlay_layers(run_dir: Path) -> tuple[Path, Path]:
    """(upper, overlay work) folders of a run's overlay, created empty."""
    upper, scratch = work_dir(run_dir), Path(run_dir) / OVERLAY_SCRATCH
    for folder in (upper, scratch):
        folder.mkdir(parents=True, exist_ok=True)
    return upper, scratch


def finish_overlay(run_dir: Path) -> dict[str, int | None]:
    """Turn the upper layer into plain files: whiteouts (deletions) become None entries and
    are removed, as are the empty folders (copied up to be made writable, or created as mount
    points); the overlay's scratch folder is deleted."""
    scratch = Path(run_dir) / OVERLAY_SCRATCH
    remove_tree(scratch)
    upper = work_dir(run_dir)
    written: dict[str, int | None] = {}
    if not upper.is_dir():
        return written
    for current, dirs, files in os.walk(upper):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(current, d))]:
            full = os.path.join(current, name)
            rel = os.path.relpath(full, upper).replace(os.sep, "/")
            info = os.lstat(full)
            if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:   # overlayfs whiteout
                os.unlink(full)
                written[rel] = None
            elif stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                written[rel] = info.st_size
            else:   # a FIFO, a socket, a device: nothing a person wants kept
                os.unlink(full)
    _drop_empty_dirs(upper)
    return written


# ---- copy ----------------------------------------------------------------------------------

def make_copy(snapshot: Path, run_dir: Path, mounts: Iterable[DataMount], *,
              link_mounts: bool) -> Path:
    """Copy `snapshot` into `<run dir>/work` with writable folders. Each mount path becomes
    a symlink to its source (`link_mounts`, for a run without a mount namespace) or an
    empty folder for the backend to mount onto."""
    dest = work_dir(run_dir)
    if dest.exists():
        remove_tree(dest)
    shutil.copytree(snapshot, dest, symlinks=True)
    for current, dirs, _ in os.walk(dest):
        os.chmod(current, os.lstat(current).st_mode | stat.S_IWUSR)
    for mount in mounts:
        point = dest / mount.path
        if point.is_symlink() or point.is_file():
            point.unlink()
        elif point.is_dir():
            remove_tree(point)
        point.parent.mkdir(parents=True, exist_ok=True)
        if link_mounts:
            point.symlink_to(mount.source, target_is_directory=True)
        else:
            point.mkdir()
    return dest


def finish_copy(snapshot: Path, run_dir: Path, mounts: Iterable[DataMount]) -> dict[str, int | None]:
    """Compare the copy with the snapshot; delete what the run left as it was, so only the
    files it created or changed remain, and return them (deletions as None)."""
    dest = work_dir(run_dir)
    written: dict[str, int | None] = {}
    if not dest.is_dir():
        return written
    mount_paths = {PurePosixPath(m.path) for m in mounts}
    for mount in mount_paths:
        point = dest / mount
        if point.is_symlink():
            point.unlink()
    seen: set[str] = set()
    for current, dirs, files in os.walk(dest):
        rel_dir = PurePosixPath(os.path.relpath(current, dest).replace(os.sep, "/"))
        dirs[:] = [d for d in dirs if (rel_dir / d) not in mount_paths or os.path.islink(os.path.join(current, d))]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(current, d))]:
            full = os.path.join(current, name)
            rel = os.path.normpath(os.path.join(str(rel_dir), name)).replace(os.sep, "/")
            seen.add(rel)
            info = os.lstat(full)
            if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
                os.unlink(full)
                continue
            if _unchanged(Path(snapshot) / rel, full, info):
                os.unlink(full)
            else:
                written[rel] = info.st_size
    for current, dirs, files in os.walk(snapshot):
        rel_dir = os.path.relpath(current, snapshot)
        for name in files:
            rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
            inside_mount = any(PurePosixPath(rel).is_relative_to(m) for m in mount_paths)
            if rel not in seen and not inside_mount and not rel.startswith(".nightshift"):
                written[rel] = None
    _drop_empty_dirs(dest)
    return written


def hand_over(folder: Path, uid: int) -> None:
    """Make every folder under `folder` owned by `uid` (a container's non-root user)."""
    for current, dirs, _ in os.walk(folder):
        os.lchown(current, uid, uid)


def take_back(folder: Path) -> None:
    """Give everything under `folder` back to the harness's user (never following links)."""
    uid, gid = os.getuid(), os.getgid()
    for current, dirs, files in os.walk(folder):
        for name in dirs + files:
            try:
                os.lchown(os.path.join(current, name), uid, gid)
            except OSError:
                pass
        try:
            os.lchown(current, uid, gid)
        except OSError:
            pass


# ---- helpers -------------------------------------------------------------------------------

def _unchanged(original: Path, copy: str, info: os.stat_result) -> bool:
    try:
        before = os.lstat(original)
    except FileNotFoundError:
        return False
    if stat.S_IFMT(before.st_mode) != stat.S_IFMT(info.st_mode):
        return False
    if stat.S_ISLNK(info.st_mode):
        return os.readlink(original) == os.readlink(copy)
    return before.st_size == info.st_size and before.st_mtime_ns == info.st_mtime_ns


def _drop_empty_dirs(root: Path) -> None:
    for current, dirs, files in os.walk(root, topdown=False):
        if Path(current) != root and not os.listdir(current):
            os.rmdir(current)

