"""Preparing the data once, on the host, before any experiment runs.

The program's `prepare` command is harness-owned code (it is protected), so it runs outside
the sandbox. It prints `data_dir: <path>` as its last such line; that folder is mounted
read-only into every run as NIGHTSHIFT_DATA.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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
    # The program says `python ...`; run it with this interpreter so a venv is respected.
    if command.startswith("python "):
        command = f"{sys.executable} {command[len('python '):]}"
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
