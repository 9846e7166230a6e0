"""The external researcher: an agent outside the harness (Claude Code, Codex, a script, a
person) proposes, the night measures and decides.

The agent checks out the incumbent (`nightshift checkout`), edits the target there and hands the
edit over with `nightshift propose`, which files it in the tag's inbox (agent/researchers/inbox.py).
`propose` here takes the oldest proposal the night has not taken yet, waiting for one while the
agent thinks; the loop treats it as any researcher's: rebased onto a newer incumbent, gated,
committed, measured, decided, and recorded with its id (`extra.proposal`), which is how
`nightshift wait` finds the verdict. A file that cannot be used becomes an invalid experiment
naming what is wrong with it.

The night stops, with the reason, when the agent says it is done (`nightshift done`) and every
proposal was taken, or when the agent stays silent for `silence_s`: no proposal while the night
itself had nothing new (its ledger unchanged: no run ended, no verdict). Time the agent spends
waiting on runs does not count; the clock starts when the night goes quiet.

"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable

from agent.researchers.inbox import Inbox, InboxError
from agent.record.ledger import LEDGER_FILE
from agent.researchers.base import (Proposal, ProposalRejected, ResearchContext, Researcher,
                                    ResearcherDone, ResearcherError)

POLL_S = 0.2
DEFAULT_SILENCE_S = 3600.0


class ExternalResearcher(Researcher):
    name = "external"
    concurrency = 2       # one proposal waiting beside the one being admitted: no idle worker

    def __init__(self, results: Path, *, taken: Iterable[str] = (), silence_s: float = DEFAULT_SILENCE_S,
                 clock: Callable[[], float] = time.time) -> None:
        """`results`: the tag's folder (its inbox and ledger); `taken`: the proposal ids the
        ledger already holds (a resumed night does not take them again)."""
        self.inbox = Inbox(results)
        self.ledger = Path(results) / LEDGER_FILE
        self.silence_s = silence_s
        self._clock = clock
        self._handed: set[str] = set(taken)   # one thread calls propose (agent/night/proposals.py)
        self._last_heard = clock()

    def propose(self, context: ResearchContext) -> Proposal:
        while True:
            proposal_id = self._next()
            if proposal_id is not None:
                self._last_heard = self._clock()
                return self._proposal(proposal_id)
            ended = self.inbox.ended()
            if ended is not None:
                raise ResearcherDone("the agent ended the night" + (f": {ended}" if ended else ""))
            silent = self._clock() - max(self._last_heard, self._last_news())
            if silent >= self.silence_s:
                raise ResearcherError(
                    f"no proposal from the agent for {silent / 60:.0f} min (--agent-silence "
                    f"{self.silence_s / 60:g}m): the night stops; `nightshift run --tag ... "
                    f"--researcher external` resumes it")
            time.sleep(POLL_S)

    def _last_news(self) -> float:
        """When the night last recorded anything (its ledger's modification time). A verdict
        reaches the agent through the ledger, not through `observe`: this researcher's thread
        is the one waiting here, so an `observe` queued behind it would come too late."""
        try:
            return self.ledger.stat().st_mtime
        except OSError:
            return 0.0

    def _next(self) -> str | None:
        for proposal_id in self.inbox.ids():
            if proposal_id not in self._handed:
                self._handed.add(proposal_id)
                return proposal_id
        return None

    def _proposal(self, proposal_id: str) -> Proposal:
        try:
            filed = self.inbox.read(proposal_id)
        except InboxError as error:
            raise ProposalRejected(str(error), extra={"proposal": proposal_id}) from None
        return Proposal(source=filed.source, description=filed.description,
                        hypothesis=filed.hypothesis, prediction=filed.prediction,
                        base=filed.base, extra={"proposal": proposal_id, "agent": filed.agent})
