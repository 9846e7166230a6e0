"""One proposal's conversation with the model, as a file a person can read the next morning.

`results/<tag>/researcher/transcripts/<experiment>.json` holds the request/response pairs of
every API call made for one proposal: the system prompt and the tools once, then for each
call its parameters, the messages added since the previous call, and the answer (or the
error: overloaded, timed out, rejected). Refusals that restarted the conversation are marked.
Secrets are removed before anything is written: every known credential, and anything shaped
like one (`redact`). The ledger records the path (relative to the tag's folder), and the
report links it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

# Shapes of credentials, removed even when nobody told us the value.
_SECRET_SHAPES = re.compile(
    r"(sk-ant-[A-Za-z0-9_\-]{8,}|sk-[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16}|"
    r"(?<=Bearer )[A-Za-z0-9._\-]{16,}|ya29\.[A-Za-z0-9._\-]{16,})")


class Redactor:
    """Removes the given secrets and anything shaped like a credential from text."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        return _SECRET_SHAPES.sub("[redacted]", text)


def _without_cache_marks(message: Any) -> Any:
    """A message as the model reads it: the moving cache breakpoint is not a change."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    return {**message, "content": [{k: v for k, v in b.items() if k != "cache_control"}
                                   if isinstance(b, dict) else b for b in content]}


class Transcript:
    """The calls of one proposal, saved as JSON by `save`."""

    def __init__(self, folder: Path, index: int, redact: Redactor, **facts: Any) -> None:
        self.folder, self.index, self.redact = folder, index, redact
        self.facts = facts
        self.system: Any = None
        self.tools: Any = None
        self.calls: list[dict[str, Any]] = []
        self._last: list[Any] = []  # the messages of the previous request, as recorded

    def request(self, body: dict[str, Any], messages_key: str = "messages") -> None:
        """Record a request about to be sent (the answer follows with `answer` or `failed`)."""
        params = {k: v for k, v in body.items() if k not in ("system", "tools", messages_key)}
        if self.system is None and "system" in body:
            self.system = body["system"]
        if self.tools is None and "tools" in body:
            self.tools = body["tools"]
        messages = list(body.get(messages_key) or [])
        plain = [_without_cache_marks(m) for m in messages]
        same = 0                    # messages unchanged since the previous request
        while same < min(len(plain), len(self._last)) and plain[same] == self._last[same]:
            same += 1
        self.calls.append({"call": len(self.calls) + 1, "params": params,
                           "from_message": same, "new_messages": messages[same:]})
        self._last = plain

    def answer(self, response: dict[str, Any]) -> None:
        self.calls[-1]["response"] = response

    def failed(self, kind: str, message: str, status: int | None = None) -> None:
        """A try of the latest request that failed (it may be tried again)."""
        self.calls[-1].setdefault("failed_tries", []).append({"kind": kind, "status": status, "message": message})

    def restart(self, why: str) -> None:
        self.calls[-1]["restarted"] = why

    def save(self, outcome: str, **summary: Any) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        stem, n = f"{self.index:04d}", 1
        while (self.folder / f"{stem}.json").exists():  # a resumed run may propose this index again
            n += 1
            stem = f"{self.index:04d}-{n}"
        path = self.folder / f"{stem}.json"
        record = {"experiment_index": self.index, **self.facts, "outcome": outcome, **summary,
                  "system": self.system, "tools": self.tools, "calls": self.calls}
        path.write_text(self.redact(json.dumps(record, indent=1, default=str)), encoding="utf-8")
        return path
