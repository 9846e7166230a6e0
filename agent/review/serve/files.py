"""The files of a tag the page links to, and nothing else.

A tag's folder also holds the worktree (the user's code), the lock and the researcher's
state: none of it is the page's to serve. A request names a path relative to the tag's
folder; it is served only when it has one of the shapes below (a transcript, a run's log or
result) and, resolved with every link followed, still lies inside the tag's folder (and so
inside the results folder). Anything else is refused, never looked up.
"""
from __future__ import annotations

import re
from pathlib import Path

SERVED = re.compile(r"""
    researcher/transcripts/[\w.-]+\.json                       # a proposal's transcript
  | (?:(?:ablations|replays)/[\w.-]+/)?runs/[\w.-]+/log\.txt    # a run's log
  | (?:(?:ablations|replays)/[\w.-]+/)?runs/[\w.-]+/out/result\.json
""", re.VERBOSE)


def served_file(tag_dir: Path, relative: str) -> Path | None:
    """The file `relative` names inside `tag_dir`, or None when it is not one the page may
    serve (wrong shape, a `..` or `.` part, a link out of the folder, missing)."""
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts) or "\\" in relative or "\0" in relative:
        return None
    if not SERVED.fullmatch(relative):
        return None
    root = Path(tag_dir).resolve()
    try:
        path = (root / relative).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path
