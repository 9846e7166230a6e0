"""What the views need that is not in the ledger's fold, read once and read-only: the tag's
lock (is a loop running now?) and git's diff between two commits.

Nothing here writes: not the ledger, not the lock, not the repository (`git diff` only), so
an agent may call `status --json` as often as it likes while a night runs.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from agent.interface.views import DiffOf, Night
from agent.preflight.lock import live_holder
from agent.program import Program
from agent.record.ledger import read_events
from agent.record.state import fold


def read_night(program: Program, folder: Path) -> Night:
    """The night of the tag whose results folder is `folder` (its ledger must exist)."""
    folder = Path(folder)
    return Night(tag=folder.name, folder=folder, state=fold(read_events(folder)), program=program,
                 holder=live_holder(folder))


def git_diff(repo: Path) -> DiffOf:
    """A `DiffOf` that asks git in `repo`: the patch parent -> commit, or None when git cannot
    say (a commit gone with a deleted branch, a repository that is not there)."""
    def diff_of(parent: str, commit: str) -> str | None:
        if parent.startswith("-") or commit.startswith("-"):
            return None          # never let a recorded sha be read as an option
        done = subprocess.run(["git", "-C", str(repo), "diff", "--no-color", "--no-ext-diff",
                               "--no-textconv", parent, commit, "--"],
                              capture_output=True, text=True, errors="replace")
        return done.stdout if done.returncode == 0 else None
    return diff_of
