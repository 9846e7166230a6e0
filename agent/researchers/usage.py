"""What an LLM researcher has spent: tokens, dollars, calls and mistakes, across resumes.

The totals live in one JSON file (`<results>/<tag>/researcher/usage.json`), rewritten
atomically after every change, so a resumed loop keeps counting toward its caps. What each
proposal cost is also recorded on its ledger event (`Proposal.usage`), which is what
`nightshift status` and the report read.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agent.researchers import pricing
from agent.researchers.base import ResearcherError

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class UsageMeter:
    """Cumulative tokens, dollars and mistakes, persisted atomically after every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.totals: dict[str, Any] = {k: 0 for k in USAGE_FIELDS} | {"usd": 0.0, "calls": 0, "proposals": 0, "api_retries": 0, "errors": {}}
        if path.exists():
            try:
                saved = json.loads(path.read_text())
                self.totals.update({k: saved[k] for k in self.totals if k in saved})
            except (ValueError, TypeError, KeyError) as err:
                raise ResearcherError(f"{path}: unreadable usage record ({err}); fix it or delete it to restart counting") from None

    def record_call(self, model: str, usage: Any) -> dict[str, float]:
        counts = {k: int(getattr(usage, k, 0) or 0) for k in USAGE_FIELDS}
        call = dict(counts, usd=pricing.cost_usd(model, **counts))
        for key, value in call.items():
            self.totals[key] += value
        self.totals["calls"] += 1
        self.save()
        return call

    def count(self, kind: str) -> None:
        self.totals["errors"][kind] = self.totals["errors"].get(kind, 0) + 1
        self.save()

    def tokens_total(self) -> int:
        return sum(self.totals[k] for k in USAGE_FIELDS)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.totals, indent=1, sort_keys=True))
        os.replace(tmp, self.path)
