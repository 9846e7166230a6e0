"""Follow a night's ledger and hand each new event to a sink, on a thread of its own.

The night never waits for a sink: the loop appends to the ledger as always, and a `Follower`
reads what was appended (a byte cursor, complete lines only), folds it into its own
`LoopState` (a sink describes an event with what the night knew then) and delivers it. Its
place is saved after each event in `results/<tag>/published/<sink>.json`, so a night killed
and resumed goes on from the last event delivered: each event at least once, in order. A
sink new to a ledger that already has events starts at its end (adding `on_keep:` to a
night halfway does not replay its old keeps).
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Callable, Protocol

from agent.record.events import Event
from agent.record.ledger import LEDGER_FILE, complete_events
from agent.record.state import LoopState

POLL_S = 0.5            # how often the ledger is looked at for new lines
CURSORS = "published"   # results/<tag>/published/<sink>.json


class Sink(Protocol):
    name: str           # names its cursor file and its lines in the console

    def deliver(self, event: Event, state: LoopState) -> str | None:
        """Act on `event` (`state` includes it); a line to say when it failed, else None.
        Never raises: a sink that is down is said, and the night goes on."""


class Follower:
    def __init__(self, results: Path, sink: Sink, say: Callable[[str], None]) -> None:
        self.ledger = Path(results) / LEDGER_FILE
        self.cursor_path = Path(results) / CURSORS / f"{sink.name}.json"
        self.sink, self.say = sink, say
        self.state = LoopState()
        self._folded = 0                      # bytes of the ledger folded into `state`
        self._offset = self._start_offset()   # bytes of the ledger delivered
        self._said: set[str] = set()          # failures said (each once, not at every event)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"publish-{sink.name}", daemon=True)

    def start(self) -> "Follower":
        self._thread.start()
        return self

    def close(self, wait_s: float) -> None:
        """Deliver what the ledger holds now (the night's last events), for `wait_s` at most."""
        self._stop.set()
        self._thread.join(wait_s)
        if self._thread.is_alive():
            self.say(f"{self.sink.name}: still delivering after {wait_s:.0f} s; the rest goes out "
                     f"when the night resumes")

    def _start_offset(self) -> int:
        try:
            return int(json.loads(self.cursor_path.read_text())["offset"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        try:
            return self.ledger.stat().st_size      # new to this ledger: from here on
        except FileNotFoundError:
            return 0

    def _follow(self) -> None:
        while True:
            stopping = self._stop.is_set()
            self._deliver_new()
            if stopping:
                return
            self._stop.wait(POLL_S)

    def _deliver_new(self) -> None:
        try:
            with open(self.ledger, "rb") as handle:
                handle.seek(self._folded)
                data = handle.read()
        except FileNotFoundError:
            return
        _, used = complete_events(data)          # a line still being written waits
        for line in data[:used].split(b"\n")[:-1]:
            events, _ = complete_events(line + b"\n")    # none for a corrupt or unknown line
            self._folded += len(line) + 1
            for event in events:
                self.state.apply(event)
                if self._folded > self._offset:
                    self._report(self.sink.deliver(event, self.state))
            if self._folded > self._offset:
                self._offset = self._folded
                self._save()

    def _report(self, failure: str | None) -> None:
        if failure and failure not in self._said:
            self._said.add(failure)
            self.say(f"{self.sink.name}: {failure}; the night goes on")

    def _save(self) -> None:
        self.cursor_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.cursor_path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"offset": self._offset, "time": time.time()}))
        os.replace(temporary, self.cursor_path)

