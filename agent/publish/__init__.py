"""What a night tells the places people already look, as it runs: the user's own commands on
a keep or at the end (`hooks.py`), fed by a follower of the ledger (`follow.py`) that keeps
its place in a cursor file, so a kill or a slow receiver never loses or slows anything.

The ledger stays the one record: everything here reads it, nothing here writes it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from agent.publish.follow import Follower, Sink
from agent.publish.hooks import HOOK_TIMEOUT_S, Hooks, HookSink
from agent.publish.settings import Tracking
from agent.record.records import Direction

CLOSE_S = HOOK_TIMEOUT_S + 5     # a night's end waits this long at most for its last deliveries


class PublishError(Exception):
    """A tracker program.md names cannot be used here (its package is not installed)."""


def missing_packages(tracking: Tracking) -> str | None:
    """What `tracking:` needs that this environment lacks, with the fix; None when nothing."""
    import importlib.util

    for name, wanted, extra in (("mlflow", tracking.mlflow.uri, "mlflow"),
                                ("wandb", tracking.wandb.project, "wandb")):
        if wanted and importlib.util.find_spec(name) is None:
            return (f"tracking.{name} needs the {name} package, which is not installed: "
                    f"pip install -e '.[{extra}]' (or remove tracking.{name} from program.md)")
    return None


def sinks(hooks: Hooks, tracking: Tracking, tag: str, results: Path, *, root: Path, metric: str,
          direction: Direction) -> list[Sink]:
    """The sinks program.md asks for: its hooks, its trackers."""
    found: list[Sink] = []
    if hooks:
        found.append(HookSink(hooks, tag, metric, direction, root, results))
    if tracking.mlflow.uri:
        from agent.publish.mlflow_sink import MlflowSink

        found.append(MlflowSink(tracking.mlflow, tag, metric, root, results))
    if tracking.wandb.project:
        from agent.publish.wandb_sink import WandbSink

        found.append(WandbSink(tracking.wandb, tag, metric, root, results))
    return found


def start_publishing(hooks: Hooks, tracking: Tracking, tag: str, results: Path, *, root: Path,
                     metric: str, direction: Direction, say: Callable[[str], None]) -> list[Follower]:
    """A follower for each sink program.md asks for (`Program.hooks`, `Program.tracking`),
    started; none when it asks for none. `root` is the repository (the hooks run there, the
    diffs come from it); `say` prints a line (from the followers' threads)."""
    problem = missing_packages(tracking)
    if problem:
        raise PublishError(problem)
    return [Follower(results, sink, say).start()
            for sink in sinks(hooks, tracking, tag, results, root=root, metric=metric, direction=direction)]


def stop_publishing(followers: list[Follower]) -> None:
    """Deliver the night's last events (its stop), CLOSE_S at most; a second Ctrl-C skips it."""
    try:
        for follower in followers:
            follower.close(CLOSE_S)
    except KeyboardInterrupt:
        pass
