"""One tag as the live page shows it: the report's context and panels, kept current.

The page is the report (agent/review/report.py: `build_context` and templates/report.html.j2)
rendered with the live parts added (templates/live.html.j2 extends it), so every panel the
report has, the page has, with the same numbers. The ledger is followed from a byte cursor
(`LedgerTail`); the state of the night is folded as events arrive. Rendering a long night's
page takes a while (about a second at 500 experiments on one core), so a page is rendered at
most once per ledger version and, while the ledger keeps changing, no more often than three
times its own cost: the server spends at most a quarter of a core on it however many
browsers watch. Each page carries the version it shows, so a browser can tell it is behind.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.record.events import Direction, LoopStarted
from agent.record.state import LoopState, fold
from agent.review.report import build_context, render
from agent.review.serve.live import LiveRuns, ProposalsWatch
from agent.review.serve.tail import LedgerTail

MIN_RENDER_INTERVAL_S = 0.5
LIVE_EVERY_S = 0.5        # the runs in flight are read at most this often, for every browser


@dataclass
class Rendered:
    version: int
    html: str
    context: dict[str, Any]


@dataclass
class TagView:
    tag: str
    tag_dir: Path
    metric: str | None = None          # program.md's, when the ledger does not say
    direction: Direction | None = None
    repo: Path | None = None           # where diffs missing from provenance are looked up
    tail: LedgerTail = field(init=False)
    state: LoopState = field(default_factory=LoopState, init=False)
    proposals: ProposalsWatch = field(default_factory=ProposalsWatch, init=False)
    live_runs: LiveRuns = field(init=False)
    _restarts: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _render_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _rendered: Rendered | None = field(default=None, init=False, repr=False)
    _rendered_at: float = field(default=0.0, init=False)
    _render_cost: float = field(default=0.0, init=False)
    _live: tuple[float, int, dict[str, Any]] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.tail = LedgerTail(self.tag_dir)
        self.live_runs = LiveRuns(self.tag_dir)

    # ---- following the ledger ------------------------------------------------------------

    def refresh(self) -> int:
        """Apply what was appended to the ledger; the version now."""
        with self._lock:
            new = self.tail.poll()
            if self.tail.restarts != self._restarts:
                self._restarts = self.tail.restarts
                self.state, self.proposals = fold(self.tail.events), ProposalsWatch()
                new = list(self.tail.events)
            else:
                for event in new:
                    self.state.apply(event)
            for event in new:
                self.proposals.apply(event)
                if isinstance(event, LoopStarted):
                    self.live_runs.metrics_pattern = event.program.get("metrics_pattern")
            return self.tail.version

    @property
    def exists(self) -> bool:
        return self.tail.path.exists()

    # ---- the page ------------------------------------------------------------------------

    def page(self) -> Rendered:
        """The page at the latest version the rendering budget allows."""
        version = self.refresh()
        with self._render_lock:
            done = self._rendered
            soon = time.monotonic() - self._rendered_at < max(MIN_RENDER_INTERVAL_S, 3 * self._render_cost)
            if done is not None and (done.version == version or soon):
                return done
            began = time.monotonic()
            with self._lock:
                events, version = list(self.tail.events), self.tail.version
            context = build_context(self.tag_dir, metric=self.metric, direction=self.direction,
                                    repo=self.repo, events=events)
            context.update(live=True, link_base=f"/t/{self.tag}/files", version=version,
                           views_lazy=context.pop("views"))
            html = render(context, template="live.html.j2")
            self._rendered = Rendered(version, html, context)
            self._rendered_at = time.monotonic()
            self._render_cost = self._rendered_at - began
            return self._rendered

    def view(self, experiment_id: str) -> str | None:
        """One experiment's view (the report's macro), or None for an unknown id."""
        rendered = self.page()
        view = rendered.context["views_lazy"].get(experiment_id)
        if view is None:
            return None
        return render({"v": view, "metric": rendered.context["metric"],
                       "link_base": rendered.context["link_base"]},
                      template="experiment_fragment.html.j2")

    # ---- now -----------------------------------------------------------------------------

    def live(self) -> dict[str, Any]:
        """The runs in flight and the proposals being written, with the ledger's version."""
        version = self.refresh()
        with self._lock:
            cached = self._live
            if cached is not None and cached[1] == version and time.monotonic() - cached[0] < LIVE_EVERY_S:
                return cached[2]
            snapshot = self.live_runs.snapshot(self.state, self.tail.events, self.proposals)
            snapshot["version"] = version
            self._live = (time.monotonic(), version, snapshot)
            return snapshot

    def summary(self) -> dict[str, Any]:
        """One line of the index page."""
        self.refresh()
        with self._lock:
            state = self.state
            return {"tag": self.tag, "experiments": len(state.experiments),
                    "kept": len(state.kept()), "runs": len(state.runs),
                    "in_flight": len(state.in_flight), "stopped": state.stopped_reason}
