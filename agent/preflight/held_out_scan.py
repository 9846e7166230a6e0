"""Whether what a run can see holds the held-out text: fingerprints of the evaluation splits,
looked for in every file of the run's view (sandbox.view) before a night starts.

The view is an allow-list: it keeps out every copy nobody listed. This scan proves the other
half, that what was listed holds none: the interpreter's packages, the system's libraries, the
C toolchain, program.md's `view.add`, the repository and the data a run reads.

Fingerprints: the WINDOW-byte stretches of the held-out splits that start a line (content
anchored: a copy holds the same stretches wherever it starts, in a .py, a .pyc's strings, a
text dump), less those that also occur in the training split (what every module shares: a
licence header, `if __name__ == "__main__":`). A file that holds at least FOUND_AT of them
holds held-out text by another path, and the night does not start; the message names it.

Each file is read once per version (path, size, mtime) and set of fingerprints: the answers
are kept beside the views (sandbox.view.cache_root), so the first night on a machine pays a
read of every file in the view and later ones only what changed.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from sandbox.view import View, cache_root

WINDOW = 64                 # bytes: long enough that a match is the same text, not a common line
# Fingerprints a file must hold to be called a copy: about 4 KB of held-out text. Measured on this
# machine's 107,000 files of site-packages: honest files hold at most 3; typeshed's stubs of held-out
# modules (jedi's wsgiref/types.pyi, turtle.pyi: signatures) 16 and 13; a copy of a held-out module
# hundreds to thousands (docs/integrity.md).
FOUND_AT = 64
MAX_FILE = 1 << 30          # larger files are read in chunks all the same; this bounds one chunk
CHUNK = 16 << 20
NEWLINE = 10
_WORDS = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                   0x27D4EB2F165667C5, 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0xD6E8FEB86659FD93],
                  dtype=np.uint64)


@dataclass(frozen=True)
class Finding:
    """A file of the view that holds held-out text."""

    path: str
    found: int              # fingerprints it holds
    why: str                # why the view holds it (sandbox.view.Bind.why)

    def says(self) -> str:
        return (f"{self.path} ({self.why}) holds {self.found} stretches of {WINDOW} bytes of the "
                f"held-out splits (about {self.found * WINDOW // 1024 or 1} KB of their text or more)")


def anchored_hashes(data: bytes | np.ndarray) -> np.ndarray:
    """The hashes of the WINDOW-byte stretches that start right after a newline."""
    buffer = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else data
    if len(buffer) <= WINDOW:
        return np.empty(0, dtype=np.uint64)
    starts = np.flatnonzero(buffer[:-WINDOW] == NEWLINE) + 1
    if len(starts) == 0:
        return np.empty(0, dtype=np.uint64)
    stretches = buffer[starts[:, None] + np.arange(WINDOW)]            # (n, WINDOW) bytes
    words = stretches.view("<u8").reshape(len(starts), WINDOW // 8)   # 8 words a stretch
    with np.errstate(over="ignore"):
        mixed = (words * _WORDS).sum(axis=1, dtype=np.uint64)
        mixed ^= mixed >> np.uint64(29)
    return mixed


def fingerprints(held_out: Iterable[Path], train: Iterable[Path]) -> np.ndarray:
    """Sorted, distinct fingerprints of the held-out files' text that the training files lack."""
    held = np.unique(np.concatenate([_hashes_of(path) for path in held_out] or [np.empty(0, np.uint64)]))
    shared = np.concatenate([_hashes_of(path) for path in train] or [np.empty(0, np.uint64)])
    return held[~np.isin(held, shared)]


def _hashes_of(path: Path) -> np.ndarray:
    parts = [anchored_hashes(chunk) for chunk in _chunks(path)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


def _chunks(path: Path | str) -> Iterable[bytes]:
    """The file's bytes in overlapping chunks (a stretch across a border is in the next one),
    and for a zip archive (a wheel, a vendored python3X.zip) its members' bytes too."""
    with open(path, "rb") as fh:
        carry = b""
        while True:
            block = fh.read(CHUNK)
            if not block:
                break
            yield carry + block
            carry = (carry + block)[-(WINDOW + 1):]
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    if not info.is_dir() and info.file_size <= MAX_FILE:
                        yield archive.read(info)
        except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError, EOFError):
            pass


def count_in(path: str, prints: np.ndarray) -> int:
    """How many distinct fingerprints the file holds."""
    seen = set()
    for chunk in _chunks(path):
        hashes = anchored_hashes(chunk)
        if len(hashes):
            positions = np.searchsorted(prints, hashes)
            positions[positions == len(prints)] = 0
            seen.update(hashes[prints[positions] == hashes].tolist())
    return len(seen)


@dataclass(frozen=True)
class Scanned:
    """What a scan saw: the findings, and each root's files and bytes (for `check`)."""

    findings: list[Finding]
    sizes: dict[str, tuple[int, int]]     # root -> (files, bytes)
    seconds: float


def scan(view: View, extra: Iterable[tuple[str, str]], prints: np.ndarray,
         skip: Iterable[str] = ()) -> Scanned:
    """The files of `view` and of `extra` ((path, why): the repository, the data a run reads)
    that hold at least FOUND_AT fingerprints; `skip` are files the runs cover with a
    tripwire already (the held-out splits themselves, their sources). Harnesses side by side
    scan one after another, so the second reuses the first's answers."""
    t0 = time.monotonic()
    skipped = {os.path.realpath(p) for p in skip}
    digest = hashlib.sha256(prints.tobytes()).hexdigest()[:16]
    roots = [(bind.source, bind.why) for bind in view.binds] + list(extra)
    found: list[Finding] = []
    sizes: dict[str, tuple[int, int]] = {}
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / f"scan-{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache = _Cache(cache_root() / f"scan-{digest}.json")
        for root, why in roots:
            files = size = 0
            for path, stat in _files(root):
                files, size = files + 1, size + stat.st_size
                if path in skipped or len(prints) == 0:
                    continue
                count = cache.count(path, stat, prints)
                if count >= FOUND_AT:
                    found.append(Finding(path, count, why))
            sizes[root] = (files, size)
        cache.save()
    return Scanned(found, sizes, time.monotonic() - t0)


def _files(root: str) -> Iterable[tuple[str, os.stat_result]]:
    """Every regular file under `root` (or `root` itself), with its stat; links not followed."""
    try:
        if not os.path.isdir(root):
            yield root, os.stat(root)
            return
    except OSError:
        return
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield entry.path, entry.stat(follow_symlinks=False)
            except OSError:
                continue


class _Cache:
    """path -> [size, mtime_ns, count], for one set of fingerprints; written whole on save."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.changed = False
        try:
            self.rows = json.loads(file.read_text())
        except (OSError, ValueError):
            self.rows = {}

    def count(self, path: str, stat: os.stat_result, prints: np.ndarray) -> int:
        row = self.rows.get(path)
        if row and row[0] == stat.st_size and row[1] == stat.st_mtime_ns:
            return row[2]
        try:
            count = count_in(path, prints)
        except OSError:
            return 0
        self.rows[path] = [stat.st_size, stat.st_mtime_ns, count]
        self.changed = True
        return count

    def save(self) -> None:
        if not self.changed:
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.file.parent, prefix=".scan-")
            with os.fdopen(fd, "w") as fh:
                json.dump(self.rows, fh)
            os.replace(tmp, self.file)
        except OSError:
            pass


# ---- a night's view, checked ---------------------------------------------------------------------

def split_fingerprints(data_dir: Path, meta: dict) -> np.ndarray:
    """The fingerprints of a prepared data folder's held-out splits (meta.json's `splits`: all
    but train), kept per version of the split files (computing them reads the whole corpus)."""
    from agent.run import grading

    splits = meta.get("splits") if isinstance(meta, dict) else None
    if not isinstance(splits, dict):
        return np.empty(0, dtype=np.uint64)
    held = [data_dir / item.path for item in grading.hidden_files(meta, grading.TRAINING_SEES)]
    train = [data_dir / name for split, name in splits.items() if split in grading.TRAINING_SEES
             and isinstance(name, str)]
    held, train = [p for p in held if p.is_file()], [p for p in train if p.is_file()]
    if not held:
        return np.empty(0, dtype=np.uint64)
    key = hashlib.sha256(json.dumps([[str(p), p.stat().st_size, p.stat().st_mtime_ns]
                                     for p in held + train]).encode()).hexdigest()[:16]
    kept = cache_root() / f"prints-{key}.npy"
    try:
        return np.load(kept)
    except (OSError, ValueError):
        pass
    prints = fingerprints(held, train)
    try:
        cache_root().mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_root(), prefix=".prints-", suffix=".npy")
        with os.fdopen(fd, "wb") as fh:
            np.save(fh, prints)
        os.replace(tmp, kept)
    except OSError:
        pass
    return prints


def check_view(view: View, repo_files: list[str], data_dir: Path, meta: dict,
               data_mounts: Iterable[Path] = ()) -> Scanned:
    """Scan what a night's training step sees, `view` and its own part: the repository's
    tracked files (a snapshot holds them), the prepared data, program.md's `data:` folder."""
    from agent.run import grading

    prints = split_fingerprints(data_dir, meta)
    sources = grading.held_out(meta)
    skip = [str(data_dir / item.path) for item in grading.hidden_files(meta, grading.TRAINING_SEES)]
    skip += list(sources.paths)   # copies found at preparation: covered by a tripwire in every run
    extra = [(path, "your repository (a run's snapshot)") for path in repo_files]
    extra += [(str(data_dir), "the prepared data")] + [(str(m), "program.md's data: folder") for m in data_mounts]
    return scan(view, extra, prints, skip)


def refusal(findings: list[Finding]) -> str:
    """The message that stops a night whose runs could read the held-out text."""
    shown = "\n".join(f"  - {f.says()}" for f in findings[:10])
    more = f"\n  and {len(findings) - 10} more" if len(findings) > 10 else ""
    return (f"the training step could read the held-out text: {len(findings)} file"
            f"{'s' if len(findings) > 1 else ''} in what a run sees hold{'s' if len(findings) == 1 else ''} "
            f"it (a model could learn or look up what it is scored on):\n{shown}{more}\n"
            f"Fix: delete or move each file out of that folder (a copy of the text the splits were "
            f"cut from), remove it from program.md's view.add, or run Nightshift from a virtual "
            f"environment without the package that carries it. `nightshift check` shows the view.")


def sees_the_host(runner) -> bool:
    """Whether `runner`'s runs see a view of this machine (the local sandbox, a host-mode
    image); a self-contained image's runs see only what it holds."""
    return runner.name == "local" or runner.describe().get("image_mode") == "host"


def runs_view(program, meta: dict) -> View:
    """The host's part of what `program`'s runs see (sandbox.view); ViewError for a bad view.add."""
    import sys

    from agent.run import grading
    from sandbox.view import host_view

    return host_view(sys.executable, grading.held_out(meta).units, program.view.add)


def tracked_files(worktree: Path) -> list[str]:
    """The files a snapshot of `worktree`'s HEAD holds: what git tracks."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "-z"], cwd=worktree, capture_output=True, text=True)
    return [str(Path(worktree) / name) for name in listed.stdout.split("\0") if name]


def before_the_night(program, data, worktree: Path, runner) -> str | None:
    """Scan the view of `program`'s runs before its night starts: PrestartError (exit 1) naming
    each file that holds the held-out text, else the line said at the start; None where there
    is nothing to look for (the data declares no held-out split) or the runs do not see this
    machine (a self-contained Docker image)."""
    from agent.preflight.prestart import PrestartError
    from agent.run import grading
    from sandbox.view import ViewError

    if not grading.hidden_files(data.meta, grading.TRAINING_SEES) or not sees_the_host(runner):
        return None
    try:
        seen = runs_view(program, data.meta)
    except ViewError as error:
        raise PrestartError(f"{program.locate('view')}: {error}") from None
    mounts = [program.root / program.data] if program.data else []
    scanned = check_view(seen, tracked_files(worktree), data.path, data.meta, mounts)
    if scanned.findings:
        raise PrestartError(refusal(scanned.findings))
    count = sum(files for files, _ in scanned.sizes.values())
    size = sum(size for _, size in scanned.sizes.values())
    return (f"view: {len(seen.binds)} host paths and the run's own folders, {count:,} files "
            f"({size / 1e9:.1f} GB); none holds the held-out text (checked in {scanned.seconds:.1f} s)")
