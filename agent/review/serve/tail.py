"""Following a ledger while another process appends to it, without writing to it.

`Ledger` (agent/record/ledger.py) opens a file to append and cuts a torn last line; the page
must do neither. `LedgerTail.poll()` reads what was appended since its byte cursor and parses
only complete lines: a line still being written (or torn by a crash) is left for the next
poll. A file that shrank or was replaced (a tag started over with --fresh) is read again from
the start. `version` grows by one whenever the events change, so a page can tell what is new.
"""
from __future__ import annotations

import os
from pathlib import Path

from agent.record.events import Event
from agent.record.ledger import LEDGER_FILE, complete_events


class LedgerTail:
    """The events of `folder`'s ledger.jsonl, kept up to date by `poll()`."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LEDGER_FILE
        self.events: list[Event] = []
        self.version = 0
        self.restarts = 0               # how often the file had to be read from the start
        self._cursor = 0
        self._identity: tuple[int, int] | None = None

    def poll(self) -> list[Event]:
        """Read what was appended; the new events ([] when nothing changed). After a restart
        `events` holds the file's events afresh and every one of them is returned."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            if self.events or self._cursor:
                self._restart(None)
                self.version += 1
            return []
        identity = (stat.st_dev, stat.st_ino)
        restarted = identity != self._identity or stat.st_size < self._cursor
        if restarted:
            self._restart(identity)
        if stat.st_size <= self._cursor:
            if restarted and self.version:
                self.version += 1
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self._cursor)
            data = handle.read(stat.st_size - self._cursor)
        new, used = complete_events(data)
        self._cursor += used
        if new or restarted:
            self.events.extend(new)
            self.version += 1
        return list(self.events) if restarted else new

    def _restart(self, identity: tuple[int, int] | None) -> None:
        if self._identity is not None or self.events:
            self.restarts += 1
        self.events, self._cursor, self._identity = [], 0, identity
