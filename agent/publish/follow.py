"""Follow a night's ledger and hand each new event to a sink, on a thread of its own.

The night never waits for a sink: the loop appends to the ledger as always, and a `Follower`
reads what was appended (a byte cursor, complete lines only), folds it into its own
`LoopState` (a sink describes an event with what the night knew then) and delivers it. Its
place is saved after each event in `results/<tag>/published/<sink>.json`, so a night killed
and resumed goes on from the last event delivered: each event at least once, in order. A
sink new to a ledger that already has events starts at its end (adding `on_keep:` to a
night halfway does not replay its old keeps), except under `nightshift export`, which
delivers on its own thread what a night's follower did not (`catch_up`).
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Callable, Protocol

from agent.record.events import Event
from agent.record.ledger import LEDGER_FILE, complete_events, read_events
from agent.record.state import LoopState

POLL_S = 0.5            # how often the ledger is looked at for new lines
CURSORS = "published"   # results/<tag>/published/<sink>.json
RETRY_S = (1, 2, 5, 10, 30)   # waits before trying an event again while its receiver is down


class Retry(Exception):
    """Raised by a sink whose receiver is down (a tracker that does not answer): the same
    event is tried again later, and nothing after it is delivered before it."""


class Sink(Protocol):
    name: str           # names its cursor file and its lines in the console

    def deliver(self, event: Event, state: LoopState) -> str | None:
        """Act on `event` (`state` includes it); a line to say when its receiver refused it
        (the event is passed over), else None. Raises `Retry` when the receiver is down. Any
        other exception is a fault of this side (a package that failed to import, a bug): the
        follower stops there and the event waits in the ledger, never passed over."""

    def finish(self) -> None:
        """The night's last events were delivered (its report is written by now)."""


class Follower:
    def __init__(self, results: Path, sink: Sink, say: Callable[[str], None], *,
                 new_from_start: bool = False, retry_s: tuple[float, ...] = RETRY_S) -> None:
        self.ledger = Path(results) / LEDGER_FILE
        self.cursor_path = Path(results) / CURSORS / f"{sink.name}.json"
        self.sink, self.say = sink, say
        self.state = LoopState()
        self.retry_s = retry_s
        self._folded = 0                      # bytes of the ledger folded into `state`
        self._offset = self._start_offset(new_from_start)   # bytes of the ledger delivered
        self.delivered = 0                    # events handed to the sink by this follower
        self.on_delivered: Callable[[int], None] | None = None    # progress, for `export`
        self._said: set[str] = set()          # failures said (each once, not at every event)
        self._stop = threading.Event()
        self._behind = False                  # an event is waiting for its receiver to answer
        self._pending: list[Event] = []       # that line's events (folded, not delivered)
        self._down = False                    # the receiver stopped answering (said once)
        self._faulted = False                 # the sink failed on this side: it delivers no more
        self._thread = threading.Thread(target=self._follow, name=f"publish-{sink.name}", daemon=True)

    def start(self) -> "Follower":
        self._thread.start()
        return self

    def close(self, wait_s: float) -> None:
        """Deliver what the ledger holds now (the night's last events), for `wait_s` at most."""
        self._stop.set()
        self._thread.join(wait_s)
        if self._thread.is_alive() or self._behind:
            self.say(f"{self.sink.name}: not everything was delivered; the rest goes out when the "
                     f"night resumes (or with `nightshift export`)")

    def catch_up(self) -> bool:
        """Deliver what the ledger holds now, on this thread (`nightshift export`); False when
        the receiver stayed down or the sink faulted (said; the rest waits for another try)."""
        done = self._deliver_new()      # False too when the sink faulted
        if done:
            self.sink.finish()
        return done

    def _start_offset(self, new_from_start: bool) -> int:
        try:
            return int(json.loads(self.cursor_path.read_text())["offset"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if new_from_start:
            return 0
        try:
            return self.ledger.stat().st_size      # new to this ledger: from here on
        except FileNotFoundError:
            return 0

    def _follow(self) -> None:
        while True:
            stopping = self._stop.is_set()
            self._behind = not self._deliver_new()
            if self._faulted:
                return
            if stopping:
                if not self._behind:
                    self.sink.finish()
                return
            self._stop.wait(POLL_S)

    def _deliver_new(self) -> bool:
        """Deliver the complete lines appended since; False when a receiver stayed down (the
        line it refused waits, folded already, for the next call, and nothing after it goes)."""
        if self._pending:
            if not all(self._deliver(event) for event in self._pending):
                return False
            self._pending = []
            self._mark()
        try:
            with open(self.ledger, "rb") as handle:
                handle.seek(self._folded)
                data = handle.read()
        except FileNotFoundError:
            return True
        _, used = complete_events(data)          # a line still being written waits
        for line in data[:used].split(b"\n")[:-1]:
            events, _ = complete_events(line + b"\n")    # none for a corrupt or unknown line
            self._folded += len(line) + 1
            for event in events:
                self.state.apply(event)
            if self._folded <= self._offset:      # delivered before the night was resumed
                continue
            if not all(self._deliver(event) for event in events):
                self._pending = events
                return False
            self._mark()
        return True

    def _mark(self) -> None:
        """Everything folded so far was delivered: the cursor moves there."""
        if self._folded > self._offset:
            self._offset = self._folded
            self._save()

    def _deliver(self, event: Event) -> bool:
        """One event to the sink, tried again while its receiver is down and the night goes on.
        An outage is said once, when it begins, and its end once, when an event gets through."""
        for wait in (*self.retry_s, None):
            try:
                failure = self.sink.deliver(event, self.state)
            except Retry as down:
                if not self._down:
                    self._down = True
                    self.say(f"{self.sink.name}: {down}; its events wait for it, nothing is lost; "
                             f"the night goes on")
                if wait is None or self._stop.is_set():
                    return False
                self._stop.wait(wait)
                continue
            except Exception as fault:     # this side failed: stop here rather than pass it over
                self._faulted = True
                self.say(f"{self.sink.name}: stopped at the ledger's {event.kind} event: "
                         f"{type(fault).__name__}: {first_line(fault)}; the night goes on")
                return False
            if self._down:
                self._down = False
                self.say(f"{self.sink.name}: answers again; what waited was delivered")
            self.delivered += 1
            if self.on_delivered is not None:
                self.on_delivered(self.delivered)
            self._report(failure)
            return True
        return False

    def _report(self, failure: str | None) -> None:
        if failure and failure not in self._said:
            self._said.add(failure)
            self.say(f"{self.sink.name}: {failure}; the night goes on")

    def _save(self) -> None:
        self.cursor_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.cursor_path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"offset": self._offset, "time": time.time()}))
        os.replace(temporary, self.cursor_path)



def first_line(error: BaseException, chars: int = 200) -> str:
    """An error in one line for the console: its message's first line, else its type's name."""
    lines = str(error).strip().splitlines()
    return lines[0][:chars] if lines else type(error).__name__


def replay(results: Path, sink: Sink, progress: Callable[[int], None] | None = None) -> list[str]:
    """Every event of a ledger to `sink`, now, on this thread (`nightshift export`): its
    failures, each once. A sink whose receiver does not answer raises `Retry`. Sinks are
    idempotent, so a replay after the night (or a second one) adds only what is missing."""
    state, failures = LoopState(), []
    for count, event in enumerate(read_events(Path(results) / LEDGER_FILE), start=1):
        state.apply(event)
        failure = sink.deliver(event, state)
        if failure and failure not in failures:
            failures.append(failure)
        if progress is not None:
            progress(count)
    sink.finish()
    return failures
