"""What a run leaves behind, and what of it is kept.

A run writes to `$NIGHTSHIFT_OUT` (`<run dir>/out/`) and, where its working directory is
writable, next to itself (`<run dir>/work/`, see sandbox.workdir). After the run, program.md's
`keep:` globs say what stays; without them: `result.json` and small files (≤ 1 MB) that are
not checkpoints, so a night of 9-MB `ckpt.pt` files does not fill the disk. Globs are
fnmatch patterns over the path relative to its folder (`*` crosses folders: `*.json`
matches `eval/metrics.json`); `result.json` (or program.md's `result_file`) is always kept.

`summarize` also says which tracked files of the commit the run changed or deleted in its
own working directory (the snapshot is never touched), for `nightshift check`.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

SMALL_FILE_BYTES = 1_000_000
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".pkl", ".pickle", ".npy",
                       ".npz", ".h5", ".onnx", ".msgpack", ".tar")
ALWAYS_KEPT = ("result.json",)


@dataclass
class Outputs:
    """Relative path -> bytes, per folder ("out": $NIGHTSHIFT_OUT, "work": the working dir)."""

    kept: dict[str, dict[str, int]] = field(default_factory=lambda: {"out": {}, "work": {}})
    dropped: dict[str, dict[str, int]] = field(default_factory=lambda: {"out": {}, "work": {}})
    tracked_changed: list[str] = field(default_factory=list)   # in the run's own working dir
    tracked_deleted: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"kept": self.kept, "dropped": self.dropped, "tracked_changed": self.tracked_changed,
                "tracked_deleted": self.tracked_deleted}


def is_kept(rel: str, size: int, keep: tuple[str, ...] | None,
            always: tuple[str, ...] = ALWAYS_KEPT) -> bool:
    """Whether a run output at `rel` (relative to its folder) of `size` bytes is kept
    (`always`: the metric's file, result.json)."""
    name = rel.rsplit("/", 1)[-1]
    if rel in always or rel in ALWAYS_KEPT:
        return True
    if keep is not None:
        return any(fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(name, pattern) for pattern in keep)
    checkpoint = name.lower().endswith(CHECKPOINT_SUFFIXES) or any(
        part.startswith("checkpoint") for part in rel.split("/")[:-1])
    return size <= SMALL_FILE_BYTES and not checkpoint


def prune(out_dir: Path, work_dir: Path | None, written: dict[str, int | None],
          snapshot: Path, keep: tuple[str, ...] | None, always: tuple[str, ...] = ALWAYS_KEPT) -> Outputs:
    """Delete what `keep` does not keep from the run's out folder and working-dir layer;
    return what was kept and dropped. `written` is the sandbox's list of the working dir's
    changes (None for a deletion); `snapshot` tells tracked files from new ones."""
    outputs = Outputs()
    for label, folder, files in (("out", out_dir, _files(out_dir)),
                                 ("work", work_dir, [p for p, s in written.items() if s is not None])):
        if folder is None:
            continue
        for rel in files:
            path = Path(folder) / rel
            try:
                size = os.lstat(path).st_size
            except FileNotFoundError:
                continue
            if not path.is_symlink() and is_kept(rel, size, keep, always if label == "out" else ()):
                outputs.kept[label][rel] = size
            else:
                path.unlink()
                outputs.dropped[label][rel] = size
        _drop_empty_folders(Path(folder))
    for rel, size in sorted(written.items()):
        if os.path.lexists(Path(snapshot) / rel):
            (outputs.tracked_changed if size is not None else outputs.tracked_deleted).append(rel)
    return outputs


def touches(paths: Iterable[str], protected: Iterable[str]) -> list[str]:
    """The protected paths (files or folders) that any of `paths` lies in or equals."""
    paths = list(paths)
    return sorted({p for p in protected for w in paths if w == p or w.startswith(p.rstrip("/") + "/")})


def _files(folder: Path) -> list[str]:
    found = []
    for current, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(current, d))]:
            found.append(os.path.relpath(os.path.join(current, name), folder).replace(os.sep, "/"))
    return sorted(found)


def _drop_empty_folders(root: Path) -> None:
    for current, dirs, files in os.walk(root, topdown=False):
        if Path(current) != root and not os.listdir(current):
            os.rmdir(current)


def human_bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"
