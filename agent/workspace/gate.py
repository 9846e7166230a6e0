"""The edit gate: what a candidate may change, and tamper checks on protected files.

Contract:
- a candidate commit may differ from its base in the target file only; any other changed,
  added or deleted path makes it invalid, and the reason names those paths;
- the new target must be non-empty text, differ from the base, and compile (`.py`) or parse
  (`.yaml`/`.yml`, `.json`: a config file as target); a syntax error is reported with its line;
- `check_source` applies the same content rules to a proposal before anything is committed,
  so a bad edit is rejected without touching git;
- `digest_files` / `tampered` detect protected files (or folders) that changed during a run.

The gate only judges; the loop records the verdict (status `invalid` or `tampered`).
"""
from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

MISSING = "missing"


@dataclass(frozen=True)
class GateResult:
    ok: bool
    reason: str = ""  # empty when ok; otherwise one line a person can act on

    def __bool__(self) -> bool:
        return self.ok


_PASS = GateResult(True, "")


def check_source(target: str, old: str | None, new: str) -> GateResult:
    """Judge the new text of `target` against the old (None when the target is new)."""
    if not new.strip():
        return GateResult(False, f"{target} would be empty")
    if old is not None and new == old:
        return GateResult(False, f"no change: the new {target} is identical to the incumbent's")
    if target.endswith(".py"):
        try:
            # compile, not just ast.parse: it also rejects e.g. `return` outside a function.
            compile(new, target, "exec", dont_inherit=True)
        except SyntaxError as err:
            where = f"line {err.lineno}" + (f", column {err.offset}" if err.offset else "")
            # The line comes from `new`, not err.text: Python fills err.text by reading a
            # file named `target` relative to the cwd, which may be another version of it.
            lines = new.splitlines()
            line = lines[err.lineno - 1].strip() if err.lineno and err.lineno <= len(lines) else ""
            text = f": {line!r}" if line else ""
            return GateResult(False, f"{target} does not parse ({where}): {err.msg}{text}")
        except ValueError as err:  # null bytes, on Pythons that raise ValueError for them
            return GateResult(False, f"{target} does not parse: {err}")
    if target.lower().endswith((".yaml", ".yml", ".json")):
        import json

        import yaml

        try:
            json.loads(new) if target.lower().endswith(".json") else yaml.safe_load(new)
        except (ValueError, yaml.YAMLError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            return GateResult(False, f"{target} does not parse: {first}")
    return _PASS


def check_changes(changed: Iterable[str], target: str, old: str | None,
                  new: str | None) -> GateResult:
    """The pure form of `check_edit`: the paths that differ between base and candidate, and
    the target's old and new text (None where the file is absent)."""
    others = sorted(set(changed) - {target})
    if others:
        return GateResult(False, f"only {target} may change, but the candidate also changes: "
                                 f"{', '.join(others)}")
    if new is None:
        return GateResult(False, f"the candidate deletes {target}")
    return check_source(target, old, new)


def check_edit(workspace: Any, base_sha: str, candidate_sha: str, target: str) -> GateResult:
    """Judge the candidate commit against its base. `workspace` is an `agent.workspace.Workspace`
    (anything with `changed_paths(base, candidate)` and `read(path, commit)`)."""
    def read(commit: str) -> str | None:
        try:
            return workspace.read(target, commit)
        except FileNotFoundError:
            return None

    try:
        old, new = read(base_sha), read(candidate_sha)
    except UnicodeDecodeError:
        return GateResult(False, f"{target} is not UTF-8 text")
    return check_changes(workspace.changed_paths(base_sha, candidate_sha), target, old, new)


# ---- protected files ----

def digest_files(root: Path, paths: Iterable[str]) -> dict[str, str]:
    """sha256 of each path under `root` ("missing" when absent). A folder digests its whole
    content (relative names, file kinds and bytes), so adding, removing or editing any file
    inside it changes the digest. Symlinks are digested by their target, never followed."""
    root = Path(root)
    return {path: _digest(root / path) for path in paths}


def tampered(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """Paths whose digest differs between two `digest_files` results (or is in only one)."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def _digest(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return MISSING
    hasher = hashlib.sha256()
    if stat.S_ISDIR(mode):
        for current, dirs, files in os.walk(path):
            dirs.sort()
            linked = [d for d in dirs if os.path.islink(os.path.join(current, d))]
            for name in sorted(files + linked):
                full = os.path.join(current, name)
                rel = os.path.relpath(full, path).replace(os.sep, "/")
                hasher.update(f"{rel}\0{_digest(Path(full))}\0".encode())
        return "dir:" + hasher.hexdigest()
    if stat.S_ISLNK(mode):
        hasher.update(os.readlink(path).encode())
        return "link:" + hasher.hexdigest()
    if not stat.S_ISREG(mode):  # a FIFO would block the reader forever
        return f"special:{stat.S_IFMT(mode):o}"
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(chunk)
    return hasher.hexdigest()
