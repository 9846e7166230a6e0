"""The proposal inbox and the external researcher that reads it: ids claimed once under
concurrent agents, hostile files turned into reasons, the ledger's ids never taken twice."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

from agent.researchers.inbox import AgentProposal, Inbox, InboxError
from agent.record.records import Prediction
from agent.researchers import ProposalRejected, ResearcherDone, ResearcherError
from agent.researchers.external import ExternalResearcher

BASE = "a" * 40


def proposal(n: int = 0) -> AgentProposal:
    return AgentProposal(base=BASE, source=f"X = {n}\n", description=f"X {n}", hypothesis="h",
                         prediction=Prediction("same", 0.0, (-0.1, 0.1), 0.7))


def test_agents_proposing_at_once_get_distinct_ids_and_whole_files(tmp_path):
    inbox = Inbox(tmp_path)
    ids: list[str] = []
    lock = threading.Lock()

    def agent(k: int) -> None:
        for n in range(10):
            got = inbox.submit(proposal(k * 100 + n))
            with lock:
                ids.append(got)

    threads = [threading.Thread(target=agent, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ids) == [f"p{n:04d}" for n in range(1, 41)]
    sources = {inbox.read(i).source for i in ids}
    assert len(sources) == 40                      # no file overwritten, none half-written
    assert not [p for p in inbox.path.iterdir() if p.name.startswith(".incoming")]


@pytest.mark.parametrize("text, says", [
    ("{not json", "unreadable"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"base": BASE, "source": "x"}), "missing description, hypothesis, prediction"),
    (json.dumps({**proposal().to_dict(), "base": "HEAD~1"}), "full commit sha"),
    (json.dumps({**proposal().to_dict(), "prediction": {"direction": "up"}}), "bad prediction"),
    (json.dumps({**proposal().to_dict(), "source": 7}), "source must be a string"),
], ids=["not-json", "not-an-object", "fields-missing", "base-not-a-sha", "bad-prediction",
        "source-not-text"])
def test_a_hostile_file_is_a_reason_not_a_crash(tmp_path, text, says):
    inbox = Inbox(tmp_path)
    inbox.path.mkdir()
    (inbox.path / "p0001.json").write_text(text)
    with pytest.raises(InboxError, match="p0001") as caught:
        inbox.read("p0001")
    assert says in str(caught.value)
    researcher = ExternalResearcher(tmp_path, silence_s=60)
    with pytest.raises(ProposalRejected) as rejected:
        researcher.propose(None)
    assert says in rejected.value.reason and rejected.value.extra == {"proposal": "p0001"}


def test_the_researcher_takes_each_proposal_once_oldest_first(tmp_path):
    inbox = Inbox(tmp_path)
    for n in range(3):
        inbox.submit(proposal(n))
    researcher = ExternalResearcher(tmp_path, taken={"p0001"}, silence_s=60)   # the ledger holds p0001
    first, second = researcher.propose(None), researcher.propose(None)
    assert (first.extra["proposal"], second.extra["proposal"]) == ("p0002", "p0003")
    assert first.base == BASE and first.source == "X = 1\n"
    inbox.end("enough")
    with pytest.raises(ResearcherDone, match="the agent ended the night: enough"):
        researcher.propose(None)


def test_a_silent_agent_ends_the_wait_but_the_nights_news_restarts_the_clock(tmp_path):
    now = [1000.0]
    (tmp_path / "ledger.jsonl").write_text("")
    researcher = ExternalResearcher(tmp_path, silence_s=30, clock=lambda: now[0])
    os.utime(tmp_path / "ledger.jsonl", (1010.0, 1010.0))     # a run ended at 1010
    now[0] = 1035.0                                            # 25 s of quiet since: not yet
    raised: list[Exception] = []

    def wait() -> None:
        try:
            researcher.propose(None)
        except ResearcherError as error:
            raised.append(error)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive()
    now[0] = 1041.0                                            # 31 s: the agent is silent
    waiter.join(5)
    assert not waiter.is_alive() and "no proposal from the agent" in str(raised[0])
