"""The data of a night: the `prepare` step, and program.md's `data:` folder.

The contract of `prepare` (documented in docs/guides/your-script.md): it runs once, on the host, before the
first run, outside the sandbox (it is the user's own, protected code), in Nightshift's
worktree of the branch (a checkout of the commit under research: git-ignored files of the
user's checkout are not there), with `python` meaning Nightshift's interpreter and
NIGHTSHIFT_DATA_ROOT naming a cache folder it may write. It must exit 0 and print a line
`data_dir: <path>` (the last such line counts; relative to the worktree); that folder is
mounted read-only into every run as NIGHTSHIFT_DATA (`{data}` in the command). A
`meta.json` there with a `corpus_hash` is recorded in every run's provenance.

`data:` names a folder of the user's repository (git-ignored files included, as it is in
their checkout now) that every run sees read-only at that same path inside its working
directory, where a script written for the checkout expects it. Its content hash (every
file's bytes, `content_hash`) is taken once per night and cached by the folder's stat
digest, so an unchanged folder is not read again; it is recorded as the runs' data hash.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sandbox.digest import folder_facts   # re-exported: runs and check record it
from sandbox.protocol import DataMount, expand_command

_DATA_DIR_LINE = re.compile(r"^data_dir:\s*(.+?)\s*$", re.MULTILINE)


class DataError(RuntimeError):
    pass


@dataclass(frozen=True)
class PreparedData:
    path: Path
    meta: dict           # the prepare step's meta.json (corpus hash, sizes), if it wrote one

    @property
    def corpus_hash(self) -> str | None:
        return self.meta.get("corpus_hash")


def prepare_data(command: str | None, root: Path, cache_dir: Path) -> PreparedData:
    """Run the prepare command in `root` and return the folder it reports.

    Without a prepare command the runs get an empty data folder."""
    if not command:
        empty = cache_dir / "empty"
        empty.mkdir(parents=True, exist_ok=True)
        return PreparedData(empty, {})
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.setdefault("NIGHTSHIFT_DATA_ROOT", str(cache_dir))
    # `python` is this interpreter, as in the runs, so a venv is respected.
    command = expand_command(command, {}, sys.executable)
    done = subprocess.run(command, shell=True, cwd=root, env=env, capture_output=True,
                          text=True, errors="replace")
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise DataError(f"the prepare command `{command}` failed with exit code "
                        f"{done.returncode}:\n{tail}")
    found = _DATA_DIR_LINE.findall(done.stdout)
    if not found:
        raise DataError(f"the prepare command `{command}` did not print a `data_dir: <path>` "
                        "line; the harness needs it to mount the data into each run")
    path = Path(found[-1])
    if not path.is_absolute():
        path = (root / path).resolve()
    if not path.is_dir():
        raise DataError(f"the prepare command reported data_dir {path}, which is not a folder")
    meta_file = path / "meta.json"
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    return PreparedData(path, meta)


def repository_data(root: Path, folder: str | None) -> DataMount | None:
    """program.md's `data:` folder of the repository at `root`, to mount at the same path."""
    if folder is None:
        return None
    source = Path(root) / folder
    if not source.is_dir():
        raise DataError(f"the data folder {folder} (program.md's `data:`) is not a folder in "
                        f"{root}; create it there, e.g. by running your data preparation once in "
                        f"your checkout, or remove `data:`")
    return DataMount(folder, source.resolve())


def data_cache() -> Path:
    """Where prepared data and cached digests live (NIGHTSHIFT_DATA_ROOT, else ~/.cache)."""
    return Path(os.environ.get("NIGHTSHIFT_DATA_ROOT", Path.home() / ".cache" / "nightshift" / "data"))


def content_hash(path: Path, cache_dir: Path | None = None) -> str:
    """sha256 over every file's relative path and bytes under `path`, 16 hex digits. Reading
    a large folder takes a while, so the result is kept in `cache_dir` under the folder's
    stat digest (names, sizes, mtimes): the same files are hashed once, however many nights."""
    facts = folder_facts(path)
    cache = Path(cache_dir or data_cache()) / "content-hashes"
    key = hashlib.sha256(f"{Path(path).resolve()}\0{facts['stat_digest']}".encode()).hexdigest()[:32]
    cached = cache / f"{key}.json"
    try:
        return json.loads(cached.read_text())["content_hash"]
    except (OSError, ValueError, KeyError):
        pass
    digest = hashlib.sha256()
    for current, dirs, names in os.walk(path, followlinks=True):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(current, name)
            digest.update(f"{os.path.relpath(full, path)}\0".encode())
            try:
                with open(full, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)
            except OSError:
                continue
            digest.update(b"\0")
    value = digest.hexdigest()[:16]
    try:
        cache.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".tmp")
        partial.write_text(json.dumps({"content_hash": value, "path": str(path), **facts}))
        os.replace(partial, cached)
    except OSError:
        pass   # a cache that cannot be written costs a re-read next time, nothing else
    return value
