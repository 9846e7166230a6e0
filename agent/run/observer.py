"""What the loop tells a display (the CLI's live view, a benchmark's silence)."""
from __future__ import annotations

from typing import Protocol

from agent.record.events import DecisionMade, Role, RunFinished
from cluster.protocol import Dispatched, Slot


class Observer(Protocol):
    """Every method is optional to act on."""

    def message(self, text: str) -> None: ...
    def run_started(self, run_id: str, slot: Slot, commit: str, seed: int, role: Role,
                    experiment: str | None, budget_s: float, label: str) -> None: ...
    def output(self, run_id: str, line: str) -> None: ...
    def dispatched(self, news: Dispatched) -> None: ...     # a queue's: queued, or began on a node
    def run_finished(self, run: RunFinished) -> None: ...
    def decided(self, event: DecisionMade) -> None: ...


class QuietObserver:
    def message(self, text: str) -> None: pass
    def run_started(self, run_id: str, slot: Slot, commit: str, seed: int, role: Role,
                    experiment: str | None, budget_s: float, label: str) -> None: pass
    def output(self, run_id: str, line: str) -> None: pass
    def dispatched(self, news: Dispatched) -> None: pass
    def run_finished(self, run: RunFinished) -> None: pass
    def decided(self, event: DecisionMade) -> None: pass
