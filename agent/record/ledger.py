"""The ledger: `results/<tag>/ledger.jsonl`, append-only, one fsynced JSON line per event.

A crash loses at most the line being written, which is dropped when the ledger is opened
again. The state of a loop is a fold of its events (`agent.record.state`), and the ledger
keeps that fold as it goes, as Optuna's journal storage does: opening a ledger reads the
file once; `append` writes an event and applies it to `ledger.state`; `refresh` applies
only the lines other processes appended since (`nightshift seed` queues hypotheses into
a running loop), found from a byte cursor, so a night's cost does not grow with its length.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Iterator

from agent.record.events import Event, UnknownEvent, parse_event
from agent.record.state import LoopState
from sandbox.outcome import utc_now   # one clock format for runs and the ledger; re-exported

LEDGER_FILE = "ledger.jsonl"


class Ledger:
    """Appends events to `<results_dir>/ledger.jsonl` and keeps their fold in `state`."""

    def __init__(self, results_dir: Path, snapshot: "Snapshot | None" = None) -> None:
        """Open (creating the folder). `snapshot`, read earlier by `read_snapshot`, saves
        reading the file again: only what was appended since is applied."""
        self.dir = Path(results_dir)
        self.path = self.dir / LEDGER_FILE
        self.dir.mkdir(parents=True, exist_ok=True)
        self._drop_truncated_tail()
        self.state = LoopState()
        self._cursor = 0          # bytes of the file already applied to `state`
        self.reads = 0            # how often the file was read (resume + other writers)
        if snapshot is not None:
            self.state, self._cursor, self.reads = snapshot.state, snapshot.cursor, 1
        self.refresh()

    def append(self, event: Event) -> Event:
        """Write `event` (stamped with the time) as one fsynced line; apply it to the state."""
        if not event.time:
            event = dataclasses.replace(event, time=utc_now())
        text = json.dumps(event.to_dict(), allow_nan=False)
        # The state holds what the file holds: the event as it reads back (NaN metrics become
        # text, int keys strings and back), so the kept fold always equals a fresh one.
        event = parse_event(json.loads(text))
        line = (text + "\n").encode("utf-8")
        try:
            end = self._write_line(line)
        except BaseException:
            # A Ctrl-C lands mostly here, in the fsync, with the line already in the file: the
            # state folds what the file holds before it propagates, so the night's abort
            # closes a run whose start was written (else a fresh read finds it in flight forever).
            self._catch_up()
            raise
        if end - len(line) != self._cursor:
            # Someone else appended since we last looked: their lines come first, as in the file.
            self._apply_range(self._cursor, end - len(line))
        self.state.apply(event)
        self._cursor = end
        return event

    def _write_line(self, line: bytes) -> int:
        """Append `line` and fsync; returns where the file ends. Unbuffered, so a write the
        disk had no room for leaves nothing behind to be flushed later at the end of someone
        else's line; what part of it did reach the file is cut off at once (a full disk is
        not a crash: the file keeps holding whole lines, for readers and for the resume)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = 0
            try:
                while written < len(line):
                    written += os.write(fd, line[written:])
            except OSError:
                if written:
                    try:
                        self._drop_truncated_tail()
                    except OSError:
                        pass   # the disk's error is the one to say; the next open cuts the tail
                raise
            os.fsync(fd)
            return os.lseek(fd, 0, os.SEEK_CUR)
        finally:
            os.close(fd)

    def _catch_up(self) -> None:
        """`refresh` on the way out of a failed append: never raises over the first error."""
        try:
            self.refresh()
        except (OSError, ValueError):
            pass

    def refresh(self) -> LoopState:
        """Apply what other processes appended since the last read (nothing, usually: one
        stat). Returns the state."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return self.state
        if size > self._cursor:
            self._apply_range(self._cursor, size)
        return self.state

    def events(self) -> list[Event]:
        """Every event of the file, read afresh (for tools that want the raw sequence)."""
        return list(read_events(self.path))

    def _apply_range(self, start: int, stop: int) -> None:
        self.reads += 1
        with open(self.path, "rb") as handle:
            handle.seek(start)
            data = handle.read(stop - start)
        self._cursor = start + _apply_complete_lines(self.state, data)

    def _drop_truncated_tail(self) -> None:
        """A crash mid-write leaves a last line without its newline: cut it off so the
        next event starts on a line of its own. (Only the last byte is read, unless it is cut.)"""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) == b"\n":
                return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as handle:
                handle.truncate(keep)
                handle.flush()
                os.fsync(handle.fileno())


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The fold of a ledger's complete lines, read without writing anything."""

    state: LoopState
    cursor: int               # bytes of the file it covers


def read_snapshot(results_dir: Path) -> Snapshot | None:
    """The ledger of `results_dir` folded, read-only (for checks made before a loop may write),
    or None when there is no ledger. Hand it to `Ledger` to open without reading again."""
    path = Path(results_dir) / LEDGER_FILE
    if not path.exists():
        return None
    state = LoopState()
    return Snapshot(state, _apply_complete_lines(state, path.read_bytes()))


def _apply_complete_lines(state: LoopState, data: bytes) -> int:
    """Apply the events of `data`'s complete lines to `state` (a line still being written
    waits for the next read); the number of bytes applied."""
    events, used = complete_events(data)
    for event in events:
        state.apply(event)
    return used


def complete_events(data: bytes) -> tuple[list[Event], int]:
    """The events of `data`'s complete lines (a last line still being written, or torn by a
    crash, waits for the next read), and how many bytes they span: for readers that follow
    a ledger from a byte cursor without writing to it (the live page)."""
    complete = data[:data.rfind(b"\n") + 1]
    return list(_parse_lines(complete.decode("utf-8", errors="replace").splitlines(True))), len(complete)


def read_events(path: Path) -> Iterator[Event]:
    """The events of a ledger file (or of the ledger in folder `path`), in order. Skips a
    truncated, corrupt or unknown line rather than failing the night."""
    path = Path(path)
    if path.is_dir():
        path = path / LEDGER_FILE
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
        yield from _parse_lines(handle)


def _parse_lines(lines) -> Iterator[Event]:
    for line in lines:
        if not line.endswith("\n"):
            return  # truncated by a crash mid-write
        try:
            record = json.loads(line)
            if isinstance(record, dict):
                yield parse_event(record)
        except (UnknownEvent, ValueError, TypeError, KeyError):
            continue
