"""Writes the reference pages from the code at build time (mkdocs-gen-files): program.md's
fields from the parser's table and the bundled program.md's comments, the command line from
its own --help, so neither can drift from what the code accepts."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import click
import mkdocs_gen_files
import typer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent.cli.app import app  # noqa: E402
from agent.program import _FIELDS  # noqa: E402


def program_fields() -> str:
    """A table of every field `_FIELDS` accepts, in its order: the default and what it means,
    both from the line of the bundled program.md that sets it (the file says its values are
    the defaults; tests/test_program.py holds it to the parser's)."""
    lines = (ROOT / "program.md").read_text().splitlines()
    front = lines[1:lines.index("---", 1)]
    said: dict[str, list[str]] = {}
    current = None
    for line in front:
        field = re.match(r"^([a-z_]+):\s*(.*)$", line)
        if field:
            current = field.group(1)
            value, _, comment = field.group(2).partition("# ")
            said[current] = [value.strip(), comment.strip()]
        elif current and line.startswith(" ") and line.strip().startswith("#"):
            said[current][1] += " " + line.strip().lstrip("#").strip()
    rows = ["| field | default | what it is |", "| --- | --- | --- |"]
    for name in _FIELDS:
        value, meaning = said.get(name, ["", ""])
        shown = f"`{value}`" if value else ""
        rows.append(f"| `{name}` | {shown} | {meaning.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)


def cli_help() -> str:
    """Each command's --help, as `nightshift COMMAND --help` prints it (in plain text: the
    terminal's boxes would not survive a page)."""
    typer.core.HAS_RICH = False
    group = typer.main.get_command(app)
    parts = [f"```\n{_help(group, 'nightshift')}\n```"]
    for name, command in group.commands.items():
        parts.append(f"## nightshift {name}\n\n```\n{_help(command, f'nightshift {name}', group)}\n```")
    return "\n\n".join(parts)


def _help(command: click.Command, name: str, parent: click.Command | None = None) -> str:
    parent_ctx = click.Context(parent, info_name="nightshift") if parent else None
    ctx = click.Context(command, info_name=name.split()[-1], parent=parent_ctx, max_content_width=100,
                        terminal_width=100)
    return command.get_help(ctx).rstrip()


with mkdocs_gen_files.open("reference/program.md", "w") as page:
    page.write("# program.md fields\n\nThe YAML front matter of `program.md`, as the parser "
               "(`agent/program/`) accepts it: every field is optional, the defaults below are the "
               "code's, and a flag of `nightshift run` overrides the file. An unknown or ill-typed "
               "field is an error that names the file, the line and the field. The bundled "
               "`program.md` at the repository's root sets each one with a comment, and "
               "[your own script](../guides/your-script.md) shows whole files for real scripts.\n\n")
    page.write(program_fields() + "\n")

with mkdocs_gen_files.open("reference/cli.md", "w") as page:
    page.write("# The command line\n\nEvery command's `--help`, written from the code at build time.\n\n")
    page.write(cli_help() + "\n")


for folder in sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir()):
    with mkdocs_gen_files.open(f"examples/{folder.name}.md", "w") as page:
        page.write(f"# examples/{folder.name}\n\nThe example's files, as the repository holds them "
                   f"(written at build time): {', '.join(f'`{p.name}`' for p in sorted(folder.iterdir()) if p.is_file())}.\n\n")
        for program in sorted(folder.glob("program*.md")):
            page.write(f"## {program.name}\n\n````markdown\n{program.read_text().rstrip()}\n````\n\n")
