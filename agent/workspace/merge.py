"""Moving a change onto a newer incumbent: a 3-way merge of one file's text.

With several candidates in flight, or a proposal prepared while runs train, the incumbent a
change was made against may be gone by the time it runs. Its diff is then re-applied onto the
new incumbent: each side's changes to the common base are hunks of base lines (difflib), and
the two sets merge when no hunk of one side overlaps a hunk of the other. Unlike
`git merge-file`, edits of *adjacent* lines merge: a knob block is one assignment per line,
and two proposals that change two different knobs must not conflict. Edits of the same lines,
or insertions at the same place, conflict, and nothing is resolved by guessing.
"""
from __future__ import annotations

import difflib

Hunk = tuple[int, int, list[str]]   # base lines [start, stop) replaced by these lines


def _hunks(base: list[str], other: list[str]) -> list[Hunk]:
    matcher = difflib.SequenceMatcher(a=base, b=other, autojunk=False)
    return [(i1, i2, other[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def _overlap(a: Hunk, b: Hunk) -> bool:
    (a1, a2, _), (b1, b2, _) = a, b
    if a1 == a2 and b1 == b2:            # two insertions: a conflict only at the same place
        return a1 == b1
    if a1 == a2:                         # an insertion inside the other's replaced lines
        return b1 < a1 < b2
    if b1 == b2:
        return a1 < b1 < a2
    return a1 < b2 and b1 < a2           # replaced ranges share a line


def three_way_merge(base: str, ours: str, theirs: str) -> str | None:
    """`theirs`'s change from `base`, applied onto `ours`; None when the changes conflict.
    The result keeps `ours` wherever only `ours` changed, and equals `ours` when `theirs`
    changed nothing (or the same thing)."""
    base_lines = base.splitlines(keepends=True)
    ours_h = _hunks(base_lines, ours.splitlines(keepends=True))
    theirs_h = [h for h in _hunks(base_lines, theirs.splitlines(keepends=True)) if h not in ours_h]
    if any(_overlap(a, b) for a in ours_h for b in theirs_h):
        return None
    merged: list[str] = []
    at = 0
    for start, stop, lines in sorted(ours_h + theirs_h, key=lambda h: (h[0], h[1])):
        merged += base_lines[at:start] + lines
        at = stop
    return "".join(merged + base_lines[at:])
