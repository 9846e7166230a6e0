"""What a night tells the places people already look, as it runs: the user's own commands on
a keep or at the end (`hooks.py`), fed by a follower of the ledger (`follow.py`) that keeps
its place in a cursor file, so a kill or a slow receiver never loses or slows anything.

The ledger stays the one record: everything here reads it, nothing here writes it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from agent.publish.follow import Follower
from agent.publish.hooks import HOOK_TIMEOUT_S, Hooks, HookSink
from agent.record.records import Direction

CLOSE_S = HOOK_TIMEOUT_S + 5     # a night's end waits this long at most for its last deliveries


def start_publishing(hooks: Hooks, tag: str, results: Path, *, root: Path, metric: str,
                     direction: Direction, say: Callable[[str], None]) -> list[Follower]:
    """The followers program.md asks for (`Program.hooks`), started; none when it asks for none.
    `root` is the repository the hooks run in; `say` prints a line (from the followers' threads)."""
    followers = []
    if hooks:
        sink = HookSink(hooks, tag, metric, direction, root, results)
        followers.append(Follower(results, sink, say).start())
    return followers


def stop_publishing(followers: list[Follower]) -> None:
    """Deliver the night's last events (its stop), CLOSE_S at most; a second Ctrl-C skips it."""
    try:
        for follower in followers:
            follower.close(CLOSE_S)
    except KeyboardInterrupt:
        pass
