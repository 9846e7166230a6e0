"""The edit gate: what a candidate may change, and tamper checks on protected files.

Contract:
- a candidate commit may differ from its base in the target file only; any other changed,
  added or deleted path makes it invalid, and the reason names those paths;
- the new target must be non-empty text, differ from the base, and compile (`.py`) or parse
  (`.yaml`/`.yml`, `.json`: a config file as target); a syntax error is reported with its line;
- `check_source` applies the same content rules to a proposal before anything is committed,
  so a bad edit is rejected without touching git;
The gate only judges; the loop records the verdict (status `invalid`). Whether protected files
changed during a run is the run's business: `sandbox.digest`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable


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
