"""The proposal inbox: how an agent outside the harness hands a night its proposals.

`nightshift propose` writes one JSON file per proposal into `results/<tag>/inbox/`, named by
the next free id (`p0001.json`, claimed with an exclusive link, so several agents proposing at
once never share one). The night's external researcher (agent/researchers/external.py) takes
them oldest first. Which proposals a night has taken is the ledger's to say: each becomes an
experiment, candidate or invalid, whose `extra.proposal` is the file's id, so a night killed
between taking a file and recording it takes the file again when it resumes. `nightshift done`
leaves an `ended` file: once every proposal was taken, the night stops.

The files are written by another process and read as hostile input: one that does not parse
or lacks a field becomes an invalid experiment that says why, never a crash.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.record.records import Prediction

INBOX = "inbox"
ENDED = "ended"
_ID = re.compile(r"^p(\d{4,})\.json$")
MAX_BYTES = 4 * 1024 * 1024      # a proposal is a training script, not a dataset


class InboxError(ValueError):
    """A proposal file that cannot be used; the message says what is wrong with it."""


@dataclass(frozen=True)
class AgentProposal:
    """One proposal as an agent handed it over."""

    base: str                    # the commit whose target `source` edits (the checkout's)
    source: str                  # the complete new text of the target
    description: str             # one line: results.tsv and the commit subject
    hypothesis: str
    prediction: Prediction
    agent: str = "agent"         # who proposed it, when several agents share a night
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["prediction"] = self.prediction.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "AgentProposal":
        if not isinstance(data, dict):
            raise InboxError(f"{where}: expected a JSON object, got {type(data).__name__}")
        missing = [k for k in ("base", "source", "description", "hypothesis", "prediction")
                   if k not in data]
        if missing:
            raise InboxError(f"{where}: missing {', '.join(missing)}")
        for key in ("base", "source", "description", "hypothesis"):
            if not isinstance(data[key], str):
                raise InboxError(f"{where}: {key} must be a string")
        if not re.fullmatch(r"[0-9a-f]{40}", data["base"]):
            raise InboxError(f"{where}: base must be a full commit sha, got {data['base'][:60]!r}")
        try:
            prediction = Prediction.from_dict(data["prediction"])
        except (KeyError, TypeError, ValueError) as error:
            raise InboxError(f"{where}: bad prediction: {error}") from None
        return cls(base=data["base"], source=data["source"],
                   description=" ".join(data["description"].split()) or "(no description)",
                   hypothesis=data["hypothesis"], prediction=prediction,
                   agent=str(data.get("agent") or "agent"),
                   created=float(data.get("created") or 0.0))


class Inbox:
    """The folder of one tag's proposals."""

    def __init__(self, results: Path) -> None:
        self.path = Path(results) / INBOX

    def submit(self, proposal: AgentProposal) -> str:
        """File `proposal` under the next free id and return the id (`p0001`). Safe against
        agents submitting at the same moment: the name is claimed by an exclusive link of a
        complete file, so a reader never sees half of one."""
        self.path.mkdir(parents=True, exist_ok=True)
        text = json.dumps(proposal.to_dict(), indent=1)
        descriptor, temporary = tempfile.mkstemp(dir=self.path, prefix=".incoming-")
        try:
            with os.fdopen(descriptor, "w") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            number = self._last_number() + 1
            while True:
                name = f"p{number:04d}"
                try:
                    os.link(temporary, self.path / f"{name}.json")
                    return name
                except FileExistsError:
                    number += 1
        finally:
            os.unlink(temporary)

    def ids(self) -> list[str]:
        """Every proposal id filed, oldest first."""
        if not self.path.is_dir():
            return []
        found = [(int(m.group(1)), m.group(0)[:-5]) for m in map(_ID.match, os.listdir(self.path)) if m]
        return [name for _, name in sorted(found)]

    def read(self, proposal_id: str) -> AgentProposal:
        """The proposal filed as `proposal_id`; InboxError says why it is unusable."""
        where = f"proposal {proposal_id} ({self.path / (proposal_id + '.json')})"
        try:
            path = self.path / f"{proposal_id}.json"
            if path.stat().st_size > MAX_BYTES:
                raise InboxError(f"{where}: larger than {MAX_BYTES // 2**20} MiB")
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise InboxError(f"{where}: unreadable: {error}") from None
        return AgentProposal.from_dict(data, where)

    def end(self, reason: str = "") -> None:
        """Ask the night to stop once it has taken every proposal filed."""
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / ENDED).write_text(reason)

    def ended(self) -> str | None:
        """Why the agent ended the night ("" when it gave no reason), or None while it goes on."""
        try:
            return (self.path / ENDED).read_text(errors="replace").strip()[:500]
        except OSError:
            return None

    def reopen(self) -> None:
        """A new night on the tag: an earlier `done` no longer holds."""
        try:
            (self.path / ENDED).unlink()
        except FileNotFoundError:
            pass

    def _last_number(self) -> int:
        ids = self.ids()
        return int(ids[-1][1:]) if ids else 0


def taken_proposals(experiments: Any) -> dict[str, str]:
    """proposal id -> experiment id, from the ledger's experiments (a LoopState's)."""
    taken = {}
    for experiment in experiments.values():
        proposal = (experiment.extra or {}).get("proposal")
        if isinstance(proposal, str):
            taken[proposal] = experiment.id
    return taken
