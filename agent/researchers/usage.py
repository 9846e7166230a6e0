"""What an LLM researcher has spent: tokens, dollars, calls, retries and mistakes, across resumes.

The totals live in one JSON file (`<results>/<tag>/researcher/usage.json`), rewritten
atomically after every change, so a resumed loop keeps counting toward its caps. What each
proposal cost is also recorded on its ledger event (`Proposal.usage`, a `Usage` record),
which is what `nightshift status` and the report read; this file is only the caps' memory.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from agent.researchers.base import ResearcherError, Usage

_USAGE_KEYS = {f.name for f in dataclasses.fields(Usage)}


class UsageMeter:
    """Cumulative `Usage`, proposals and mistakes (kind -> count), persisted after every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.total = Usage()
        self.proposals = 0
        self.errors: dict[str, int] = {}
        self.notes: dict[str, str] = {}
        if path.exists():
            try:
                saved = json.loads(path.read_text())
                # Files written before usage was a record kept its fields flat, retries as api_retries.
                flat = saved.get("usage", saved)
                values = {k: flat[k] for k in _USAGE_KEYS if k in flat}
                values.setdefault("retries", int(flat.get("api_retries", 0)))
                self.total = Usage(**values)
                self.proposals = int(saved.get("proposals", 0))
                self.errors = {str(k): int(v) for k, v in (saved.get("errors") or {}).items()}
                self.notes = dict(saved.get("notes") or {})
            except (ValueError, TypeError, KeyError, AttributeError) as err:
                raise ResearcherError(f"{path}: unreadable usage record ({err}); fix it or delete it to "
                                      f"restart counting") from None

    def add(self, usage: Usage) -> None:
        self.total = self.total + usage
        self.save()

    def count(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self.save()

    def start_proposal(self) -> None:
        self.proposals += 1
        self.save()

    def note(self, key: str, text: str) -> None:
        self.notes[key] = text
        self.save()

    def totals(self) -> dict[str, Any]:
        """Everything, flat: the Usage fields, proposals, errors and notes (for `usage()`)."""
        return {**self.total.to_dict(), "tokens": self.total.tokens, "proposals": self.proposals,
                "errors": dict(self.errors), **self.notes}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        record = {"usage": self.total.to_dict(), "proposals": self.proposals, "errors": self.errors,
                  "notes": self.notes}
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
        os.replace(tmp, self.path)
