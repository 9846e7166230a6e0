"""The skill that teaches a coding agent to drive a night, and where each agent finds it.

One text (SKILL.md beside this file, shipped in the package), installed to the places the
agents read, as measured with the real CLIs (tests/agents): Claude Code lists
`.claude/skills/<name>/SKILL.md` and reads CLAUDE.md; Codex lists `.agents/skills/<name>/SKILL.md`
and reads AGENTS.md. Neither reads the other's. The pointer in CLAUDE.md and AGENTS.md sits
between markers, so installing again replaces it and nothing else of the user's file.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

NAME = "nightshift"
BEGIN, END = "<!-- nightshift:begin -->", "<!-- nightshift:end -->"
POINTER = f"""{BEGIN}
## Nightshift

This repository's experiments run as Nightshift nights (program.md). To change the training
script, propose through a night as the `{NAME}` skill says ({{where}}): never judge a change by
running it yourself, and never edit the protected files or anything under results/.
{END}
"""
PLACES = ((".claude/skills", "CLAUDE.md", "Claude Code"), (".agents/skills", "AGENTS.md", "Codex"))


def skill_text() -> str:
    return resources.files(__package__).joinpath("SKILL.md").read_text(encoding="utf-8")


def install(repo: Path) -> list[tuple[Path, str]]:
    """Write the skill and the pointers into `repo`; what was written, and for whom."""
    written = []
    for skills, guide, agent in PLACES:
        skill = Path(repo) / skills / NAME / "SKILL.md"
        skill.parent.mkdir(parents=True, exist_ok=True)
        skill.write_text(skill_text(), encoding="utf-8")
        written.append((skill, f"{agent}'s skill"))
        pointer = POINTER.replace("{where}", f"{skills}/{NAME}/SKILL.md")
        path = Path(repo) / guide
        written.append((path, f"{agent}'s pointer to it"))
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        if BEGIN in text and END in text:
            head, _, rest = text.partition(BEGIN)
            _, _, tail = rest.partition(END)
            text = head + pointer.rstrip("\n") + tail
        else:
            text = text + ("\n" if text and not text.endswith("\n") else "") + ("\n" if text else "") + pointer
        path.write_text(text, encoding="utf-8")
    return written
