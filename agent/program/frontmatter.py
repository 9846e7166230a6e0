"""program.md as a file: the front matter split from the prose, parsed as YAML with the
line of every key (so errors name it), and bytes that are not UTF-8 located by line and field.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml


class ProgramError(ValueError):
    """program.md or an override is invalid; the message says where and how to fix it."""


def split(text: str, name: str) -> tuple[str, str, int]:
    """(front matter, prose, file line of the front matter's first line)."""
    lines = text.lstrip("\ufeff").splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    if start == len(lines) or lines[start].strip() != "---":
        return "", text.strip(), 1
    for end in range(start + 1, len(lines)):
        if lines[end].rstrip() == "---":
            return "\n".join(lines[start + 1:end]), "\n".join(lines[end + 1:]).strip(), start + 2
    raise ProgramError(f"{name}:{start + 1}: the front matter opened with '---' is never closed; "
                       f"add a line containing only '---' after the last field")


def compose(front: str, name: str, first: int) -> tuple[dict[str, Any], dict[str, int]]:
    """The front matter as data, and the file line of every key (nested as 'seeds.max')."""
    try:
        node = yaml.compose(front, Loader=yaml.SafeLoader)
        data = yaml.safe_load(front)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        if "flow" in (getattr(err, "context", None) or "") and getattr(err, "context_mark", None):
            mark = err.context_mark     # an unclosed [ or {: where it opened, not the next line
        line = first + mark.line if mark else first
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        owner = _owning_key(front.splitlines()[:line - first + 1])
        near = f" in field {owner!r}" if owner else ""
        raise ProgramError(f"{name}:{line}: the front matter is not valid YAML{near} ({problem}); "
                           f"check the indentation and quote values containing ': ' or ' #'") from None
    if node is None:
        return {}, {}
    if not isinstance(node, yaml.MappingNode):
        raise ProgramError(f"{name}:{first + node.start_mark.line}: the front matter must be "
                           f"'field: value' lines, got a {type(data).__name__}")
    lines: dict[str, int] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if key in lines:
            raise ProgramError(f"{name}:{first + key_node.start_mark.line}: field {key!r} is given "
                               f"twice (first on line {lines[key]}); keep one")
        lines[key] = first + key_node.start_mark.line
        if isinstance(value_node, yaml.MappingNode):
            for sub_node, _ in value_node.value:
                lines[f"{key}.{sub_node.value}"] = first + sub_node.start_mark.line
    return {str(key): value for key, value in data.items()}, lines


def line_of(lines: dict[str, int], dotted: str) -> int | str:
    """The line of `a.b.c`, else of `a.b`, else of `a` (only two levels are indexed)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in lines:
            return lines[".".join(parts[:n])]
    return "?"


def decode(data: bytes, path: Path) -> str:
    """The file's text, or a ProgramError naming the line (and the field) of the first byte
    that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as bad:
        before = data[:bad.start].decode("utf-8", errors="replace")
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        text = data.decode("utf-8", errors="replace")
        try:
            front, _, first = split(text, str(path))
        except ProgramError:
            front, first = "", 1
        inside = front and first <= line < first + len(front.splitlines())
        owner = _owning_key(front.splitlines()[:line - first + 1]) if inside else None
        where = f"field {owner!r}" if owner else "the front matter" if inside else "the prose"
        raise ProgramError(f"{path}:{line}: {where}: not UTF-8 (byte 0x{data[bad.start]:02x} at "
                           f"column {column}); save the file as UTF-8") from None


def _owning_key(lines: list[str]) -> str | None:
    """The top-level key whose value holds the last of these front-matter lines."""
    for line in reversed(lines):
        match = re.match(r"([A-Za-z_][\w.-]*)\s*:", line)
        if match:
            return match[1]
    return None
