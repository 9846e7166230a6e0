"""The user's own commands on a keep and at the night's end (program.md's `on_keep:` and
`on_stop:`): a Slack or phone ping wired without Nightshift knowing the service.

Each runs on this machine, in the repository, through /bin/sh, with the event as one JSON
object on stdin (`keep_event`, `stop_event`; docs/guides/hooks.md lists the fields). Its
environment is an allow-list: PATH, HOME, USER, LOGNAME, LANG, LC_ALL, TZ, the two
NIGHTSHIFT_ variables below, and the names program.md's `hook_env:` lists (a webhook's URL):
an LLM key never reaches a hook unless named. A hook has HOOK_TIMEOUT_S; one that hangs is
killed with everything it started, one that fails is said once in the console, and the night
goes on either way. What a hook prints is appended to results/<tag>/hooks.log with the named
variables' values masked.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.record.events import DecisionMade, Event, LoopStopped
from agent.record.records import Direction, ExitCode, Verdict
from agent.record.state import LoopState
from sandbox.outcome import utc_now

HOOK_TIMEOUT_S = 30.0
HOOK_LOG = "hooks.log"
OUTPUT_CHARS = 4000     # a hook's output kept in hooks.log (its end)
BASE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ")
MASK = "***"


@dataclass(frozen=True)
class Hooks:
    """program.md's hook fields."""

    on_keep: str | None = None
    on_stop: str | None = None
    env: tuple[str, ...] = ()      # `hook_env:`: variables passed on besides BASE_ENV

    def __bool__(self) -> bool:
        return bool(self.on_keep or self.on_stop)


def keep_event(event: DecisionMade, state: LoopState, tag: str, metric: str,
               direction: Direction, results: Path) -> dict[str, Any]:
    """What `on_keep` reads: the kept change, its evidence, and where to look."""
    experiment = state.experiments.get(event.id)
    test = event.decision
    return {
        "event": "keep", "tag": tag, "time": event.time,
        "experiment": event.id, "commit": event.commit, "replaces": event.incumbent,
        "description": experiment.description if experiment else "",
        "hypothesis": experiment.hypothesis if experiment else "",
        "metric": metric, "direction": direction.value,
        "effect": test.effect if test else None,          # the improvement, + = better
        "interval": list(test.interval) if test and test.interval else None,
        "p_value": test.p_value if test else None,
        "seeds": len(test.seeds) if test else 0,
        "reason": event.reason,
        "keeps_so_far": len(state.kept()),
        "report": str(results / "report.html"),
        "show": f"nightshift show {event.id} --tag {tag}",
    }


def stop_event(event: LoopStopped, state: LoopState, tag: str, results: Path) -> dict[str, Any]:
    """What `on_stop` reads: how the night ended (`failed` when not by a stop rule)."""
    return {
        "event": "stop", "tag": tag, "time": event.time,
        "reason": event.reason, "exit_code": int(event.exit_code),
        "failed": event.exit_code not in (ExitCode.OK, ExitCode.INTERRUPTED),
        "interrupted": event.exit_code == ExitCode.INTERRUPTED,
        "experiments": len(state.experiments),
        "kept": [e.id for e in state.kept()],
        "baseline": state.base_commit, "incumbent": state.incumbent,
        "report": str(results / "report.html"),
        "resume": f"nightshift run --tag {tag}",
    }


class HookSink:
    """The follower's sink (agent/publish/follow.py) that runs the hooks."""

    name = "hooks"

    def __init__(self, hooks: Hooks, tag: str, metric: str, direction: Direction, root: Path,
                 results: Path, timeout_s: float = HOOK_TIMEOUT_S) -> None:
        self.hooks, self.tag, self.metric, self.direction = hooks, tag, metric, direction
        self.root, self.results, self.timeout_s = Path(root), Path(results), timeout_s

    def deliver(self, event: Event, state: LoopState) -> str | None:
        if isinstance(event, DecisionMade) and event.verdict == Verdict.KEEP and self.hooks.on_keep:
            payload = keep_event(event, state, self.tag, self.metric, self.direction, self.results)
            return self.run("on_keep", self.hooks.on_keep, payload, event.id)
        if isinstance(event, LoopStopped) and self.hooks.on_stop:
            return self.run("on_stop", self.hooks.on_stop, stop_event(event, state, self.tag, self.results),
                            event.reason)
        return None

    def finish(self) -> None:
        pass

    def run(self, which: str, command: str, payload: dict[str, Any], about: str) -> str | None:
        """Run one hook to its end or its timeout; the failure to say, or None."""
        started = time.monotonic()
        try:
            process = subprocess.Popen(["/bin/sh", "-c", command], cwd=self.root, env=self._env(which),
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as error:
            return self._log(which, about, f"could not start: {error}", b"", started)
        try:
            output, _ = process.communicate(json.dumps(payload).encode(), timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            output, _ = process.communicate()
            return self._log(which, about, f"cut off after {self.timeout_s:g} s", output, started)
        if process.returncode != 0:
            return self._log(which, about, f"failed (exit {process.returncode})", output, started)
        self._log(which, about, "exit 0", output, started)
        return None

    def _env(self, which: str) -> dict[str, str]:
        names = BASE_ENV + self.hooks.env
        env = {name: os.environ[name] for name in names if name in os.environ}
        env.update(NIGHTSHIFT_TAG=self.tag, NIGHTSHIFT_EVENT=which.removeprefix("on_"))
        return env

    def _log(self, which: str, about: str, outcome: str, output: bytes, started: float) -> str | None:
        text = self._masked(output.decode("utf-8", errors="replace"))[-OUTPUT_CHARS:]
        seconds = time.monotonic() - started
        try:
            with open(self.results / HOOK_LOG, "a", encoding="utf-8") as log:
                log.write(f"{utc_now()} {which} ({about}): {outcome} in {seconds:.1f} s\n")
                log.write("".join(f"  {line}\n" for line in text.splitlines()))
        except OSError:
            pass
        if outcome == "exit 0":
            return None
        last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")
        return (f"{which} hook {outcome}" + (f": {last[:160]}" if last else "")
                + f" (results/{self.tag}/{HOOK_LOG})")

    def _masked(self, text: str) -> str:
        for name in self.hooks.env:
            value = os.environ.get(name, "")
            if len(value) >= 4:
                text = text.replace(value, MASK)
        return text


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
