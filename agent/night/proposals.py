"""The researcher's own thread: proposals are prepared while runs train.

Every call to the researcher (`propose`, and `observe` after a decision) goes through one
thread, in the order asked, so a researcher never sees two calls at once (unless it says it
can take more: `Researcher.concurrency`) and its state (an Optuna study, a cost meter) needs
no locks. The loop asks for a proposal with the context of the moment; the answer arrives on
the loop's event queue as a `Ready` item, which records the incumbent the researcher saw, so
the loop can tell whether it must be rebased before it runs.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from agent.record.state import Experiment
from agent.researchers import (Outcome, Proposal, ProposalRejected, ResearchContext, Researcher,
                               ResearcherError)


@dataclass
class Ready:
    """A finished call to `propose`: a proposal, or why there is none."""

    context: ResearchContext              # what the researcher was shown
    proposal: Proposal | None = None
    rejected: ProposalRejected | None = None
    error: ResearcherError | None = None  # the researcher cannot go on: stop the night
    attempts: int = 1                     # how often this index was asked (conflicts ask again)
    researcher: str = ""                  # the name of the researcher that made it
    request_id: str | None = None         # the ledger's proposal_asked that asked for it
    duration_s: float | None = None       # how long the researcher took

    @property
    def proposed_on(self) -> str:
        """The commit the proposal edits: its own base where it names one, else the incumbent
        the researcher was shown."""
        if self.proposal is not None and self.proposal.base:
            return self.proposal.base
        return self.context.incumbent_commit


@dataclass
class ProposalThread:
    """Runs researcher calls one at a time in a daemon thread; results go to `deliver`."""

    researcher: Researcher
    deliver: Callable[[Ready], None]
    _calls: "queue.Queue[tuple[str, Any] | None]" = field(default_factory=queue.Queue)
    _preparing: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    @property
    def preparing(self) -> int:
        """Proposals asked for and not yet taken by the loop (`received`): one on its way
        through the event queue still counts, so the loop never asks twice for one slot."""
        with self._lock:
            return self._preparing

    def received(self, ready: Ready) -> None:
        """The loop took `ready` off its event queue."""
        with self._lock:
            self._preparing -= 1

    @property
    def capacity(self) -> int:
        """How many proposals may be in preparation at once."""
        return max(1, int(getattr(self.researcher, "concurrency", 1)))

    def propose(self, context: ResearchContext, attempts: int = 1,
                request_id: str | None = None) -> None:
        with self._lock:
            self._preparing += 1
        self._put(("propose", (context, attempts, request_id)))

    def observe(self, experiment: Experiment, outcome: Outcome) -> None:
        self._put(("observe", (experiment, outcome)))

    def stop(self) -> None:
        """No more calls; a call in progress finishes in the background (the thread is a
        daemon: a slow API call never holds up Ctrl-C, and its answer is dropped)."""
        self._calls.put(None)

    def _put(self, call: tuple[str, Any]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="nightshift-researcher",
                                            daemon=True)
            self._thread.start()
        self._calls.put(call)

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            kind, args = call
            if kind == "observe":
                try:
                    self.researcher.observe(*args)
                except Exception:   # learning from an outcome must never end a night
                    pass
                continue
            context, attempts, request_id = args
            ready = Ready(context=context, attempts=attempts, researcher=self.researcher.name,
                          request_id=request_id)
            began = time.monotonic()
            try:
                ready.proposal = self.researcher.propose(context)
            except ProposalRejected as rejected:
                ready.rejected = rejected
            except ResearcherError as error:
                ready.error = error
            except Exception as error:   # a researcher bug: stop the night with its message
                ready.error = ResearcherError(f"the {self.researcher.name} researcher failed: "
                                              f"{type(error).__name__}: {error}")
            ready.duration_s = round(time.monotonic() - began, 3)
            self.deliver(ready)


@dataclass
class Arm:
    """One researcher of the night and the share of its experiments it should propose."""

    thread: ProposalThread
    share: float

    @property
    def name(self) -> str:
        return self.thread.researcher.name


class Researchers:
    """The night's researchers: one, or an LLM with its LLM-free control arm (program.md
    `control: 0.25`: a quarter of the experiments proposed by the Optuna researcher, on the same
    harness, incumbent and seeds, so the report can compare the two).

    Each researcher has its own thread, so the control arm proposes while the LLM thinks; the
    next proposal is asked of the arm furthest below its share."""

    def __init__(self, arms: list[tuple[Researcher, float]], deliver: Callable[[Ready], None]) -> None:
        self.arms = [Arm(ProposalThread(researcher, deliver), share) for researcher, share in arms]
        self._by_name = {arm.name: arm for arm in self.arms}

    @property
    def preparing(self) -> int:
        return sum(arm.thread.preparing for arm in self.arms)

    @property
    def capacity(self) -> int:
        return sum(arm.thread.capacity for arm in self.arms)

    def next_arm(self, proposed: dict[str, int]) -> Arm | None:
        """The arm to ask next, given how many experiments each arm proposed so far (None when
        every arm already prepares as many as it may)."""
        free = [a for a in self.arms if a.thread.preparing < a.thread.capacity]
        if not free:
            return None
        total = sum(proposed.get(a.name, 0) + a.thread.preparing for a in self.arms) + 1
        return max(free, key=lambda a: a.share * total - proposed.get(a.name, 0) - a.thread.preparing)

    def choose(self, arm: Arm | None = None, name: str | None = None) -> Arm:
        """`arm`, else the arm called `name`, else the first."""
        return arm or (self._by_name.get(name) if name else None) or self.arms[0]

    def propose(self, context: ResearchContext, attempts: int = 1, arm: Arm | None = None,
                name: str | None = None, request_id: str | None = None) -> None:
        self.choose(arm, name).thread.propose(context, attempts, request_id)

    def observe(self, experiment: Experiment, outcome: Outcome) -> None:
        """Tell the researcher that proposed `experiment` (the ledger's record) how it ended."""
        arm = self._by_name.get(experiment.researcher)
        if arm is not None:
            arm.thread.observe(experiment, outcome)

    def received(self, ready: Ready) -> None:
        arm = self._by_name.get(ready.researcher) or self.arms[0]
        arm.thread.received(ready)

    def stop(self) -> None:
        for arm in self.arms:
            arm.thread.stop()
