"""What a person watching `nightshift run` sees: one line per event, a live bar per run."""
from __future__ import annotations

import re
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

_LOSS = re.compile(r"\bloss[:= ]\s*([0-9.]+(?:e[-+]?\d+)?|nan|inf)", re.IGNORECASE)


class RichObserver:
    """Implements agent.loop.Observer with rich: messages, a budget bar with the last loss."""

    def __init__(self, console: Console | None = None, metric: str = "val_bpb") -> None:
        self.console = console or Console(highlight=False)
        self.metric = metric
        self._progress: Progress | None = None
        self._task = None
        self._started = 0.0
        self._budget = 0.0

    def message(self, text: str) -> None:
        self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {text}")

    def run_started(self, run: dict[str, Any], budget_s: float, label: str) -> None:
        self._started, self._budget = time.monotonic(), budget_s
        if not self.console.is_terminal:
            return   # a live bar in a log file is only noise; the finished line says it all
        who = run.get("experiment") or "incumbent"
        title = f"{who} seed {run['seed']} {run['role']}: {label[:60]}"
        self._progress = Progress(
            TextColumn("  {task.description}"), BarColumn(bar_width=24),
            TextColumn("{task.fields[loss]}"), TimeRemainingColumn(),
            console=self.console, transient=True)
        self._task = self._progress.add_task(title, total=budget_s, loss="")
        self._progress.start()

    def output(self, line: str) -> None:
        if self._progress is None:
            return
        match = _LOSS.search(line)
        fields = {"loss": f"loss {match.group(1)}"} if match else {}
        elapsed = min(time.monotonic() - self._started, self._budget)
        self._progress.update(self._task, completed=elapsed, **fields)

    def run_finished(self, run: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        value = run.get("metric")
        shown = f"{self.metric} {value:.4f}" if value is not None else run.get("reason", "")[:80]
        colour = "green" if run["status"] == "ok" else "red"
        self.console.print(f"  seed {run['seed']} {run['role']:<9} [{colour}]{run['status']}[/{colour}] "
                           f"{shown} ({run.get('duration_s', 0):.0f}s)")

    def decided(self, event: dict[str, Any]) -> None:
        decision = event.get("decision") or {}
        verdict = event["verdict"]
        colour = {"keep": "bold green", "discard": "yellow", "inconclusive": "cyan"}.get(verdict, "red")
        evidence = ""
        if decision.get("effect") is not None:
            lo, hi = decision.get("interval") or (float("nan"), float("nan"))
            p = decision.get("p_value")
            evidence = (f" effect {decision['effect']:+.4f} [{lo:+.4f}, {hi:+.4f}]"
                        + (f" p={p:.3g}" if p is not None else "")
                        + f" on {len(decision.get('seeds', []))} seeds")
        self.console.print(f"[{colour}]{event['id']} {verdict.upper()}[/{colour}]{evidence}"
                           f" — {event.get('reason', '')[:100]}")
