"""The claude researcher against the strict fake: each defect of issue 13, reproduced.

The fake refuses (400, in the API's error shape) every request the real Messages API would
refuse, and lists it in `fake.rejections`; each test asserts that list stays empty, so "no
400 was sent" is checked, not assumed.
"""
from __future__ import annotations

import json

import anthropic
import pytest

from agent.researchers.base import ResearcherError
from agent.researchers.claude import ClaudeResearcher, ProposalRejected
from tests.fakes.anthropic_api import (FakeAnthropic, cut, error, message, overloaded, refusal, text,
                                       thinking, timeout, tool_use)
from tests.researchers.test_claude_researcher import (GOOD_EDIT, SOURCE, TARGET, make_context, submit,
                                                      tool_results)

KEY = "sk-ant-strict-secret-4242"


class Clock:
    """Simulated wall clock: `sleep` advances it, so deadlines are tested without waiting."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now, self.sleeps = now, []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake():
    with FakeAnthropic(credentials=[KEY]) as server:
        yield server


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def researcher_for(tmp_path, fake, clock):
    def build(timeout_s: float = 30.0, **settings) -> ClaudeResearcher:
        client = anthropic.Anthropic(base_url=fake.url, api_key=KEY, max_retries=0, timeout=timeout_s)
        return ClaudeResearcher(state_dir=tmp_path / "state", client=client, sleep=clock.sleep,
                                clock=clock.time, settings={"retry_base_s": 1.0, "timeout_s": timeout_s} | settings)
    return build


def good_turn():
    return message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())])


# ---- 1. whitespace-only text blocks ---------------------------------------------------------

def test_a_whitespace_only_text_block_is_not_sent_back(fake, researcher_for):
    fake.push(message([text("\n\n"), tool_use("edit_file", GOOD_EDIT)]),
              message([text("  ")]),                     # nothing visible at all
              message([tool_use("submit", submit())]))

    proposal = researcher_for().propose(make_context())

    assert fake.rejections == []
    assert proposal.source == SOURCE.replace("LR = 0.01", "LR = 0.02")
    for request in fake.requests:
        for m in request.json["messages"]:
            for block in m["content"] if isinstance(m["content"], list) else []:
                assert block.get("type") != "text" or block["text"].strip()


def test_a_conversation_level_400_rejects_the_proposal_not_the_night(fake, researcher_for):
    fake.push(message([tool_use("edit_file", GOOD_EDIT)]),
              error(400, "invalid_request_error", "messages.3: something the API did not like"))
    researcher = researcher_for()

    with pytest.raises(ProposalRejected) as caught:
        researcher.propose(make_context())

    assert "400" in caught.value.reason and "did not like" in caught.value.reason
    assert caught.value.errors.get("api_rejected") == 1
    fake.push(good_turn())
    assert researcher.propose(make_context(experiment_index=2)).description == "LR 0.01 -> 0.02"


# ---- 2. tool calls cut at max_tokens -------------------------------------------------------

def test_tool_calls_cut_at_max_tokens_are_never_executed(fake, researcher_for):
    half = SOURCE.replace("LR = 0.01", "LR = 0.05")[:40]          # parses, but is cut short
    fake.push(cut([text("Rewriting the file."), tool_use("write_file", {"path": TARGET, "content": half}),
                   tool_use("submit", submit(hypothesis="the run is under-tr"))]),
              good_turn())

    proposal = researcher_for().propose(make_context())

    assert fake.rejections == []
    answers = tool_results(fake.requests[1].json)
    assert [a["is_error"] for a in answers] == [True, True]
    assert "max_tokens" in answers[0]["content"] and "NOT executed" in answers[0]["content"]
    assert proposal.source == SOURCE.replace("LR = 0.01", "LR = 0.02")
    assert proposal.hypothesis == "the run is under-trained at this LR"
    assert proposal.extra["errors"] == {"truncated": 1}


# ---- 3. refusals -----------------------------------------------------------------------------

def test_a_refusal_starts_a_fresh_conversation(fake, researcher_for):
    fake.push(message([tool_use("read_file", {"path": TARGET})]), refusal(), good_turn())

    researcher = researcher_for()
    proposal = researcher.propose(make_context())

    assert fake.rejections == []
    fresh = fake.requests[2].json
    assert len(fresh["messages"]) == 1                      # not an argument with the refusal
    assert "routine" not in json.dumps(fresh)
    assert proposal.extra["errors"] == {"refusal": 1}
    transcript = json.loads((researcher.state_dir.parent / proposal.extra["transcript"]).read_text())
    assert any("frontier_llm" in json.dumps(call) for call in transcript["calls"])


def test_refusals_in_a_row_switch_to_the_fallback_model_then_stop_cleanly(fake, researcher_for):
    fake.push(refusal(), refusal(), good_turn())
    researcher = researcher_for(max_refusals=2, fallback_model="claude-opus-5-5")

    proposal = researcher.propose(make_context())

    assert [r.json["model"] for r in fake.requests] == ["claude-sonnet-5-5"] * 2 + ["claude-opus-5-5"]
    assert proposal.extra["model"] == "claude-opus-5-5"
    fake.push(refusal(), refusal())
    with pytest.raises(ResearcherError, match="refused 2 times in a row.*frontier_llm"):
        researcher.propose(make_context(experiment_index=2))


# ---- 4. parallel tool calls: all or nothing --------------------------------------------------

def test_parallel_edits_apply_all_or_nothing(fake, researcher_for):
    bad = {"path": TARGET, "old_string": "WARMUP = 99", "new_string": "WARMUP = 20"}
    fixed = {"path": TARGET, "old_string": "WARMUP = 10", "new_string": "WARMUP = 20"}
    fake.push(message([tool_use("edit_file", GOOD_EDIT), tool_use("edit_file", bad), tool_use("submit", submit())]),
              message([tool_use("edit_file", GOOD_EDIT), tool_use("edit_file", fixed), tool_use("submit", submit())]))

    proposal = researcher_for().propose(make_context())

    first = tool_results(fake.requests[1].json)
    assert [a["is_error"] for a in first] == [True, True, True]
    assert "not applied" in first[0]["content"] and "submit" in first[2]["content"]
    assert "LR = 0.02" in proposal.source and "WARMUP = 20" in proposal.source
    assert proposal.source.count("LR = 0.02") == 1


# ---- 5. overloads and timeouts ---------------------------------------------------------------

def test_a_burst_of_overloads_is_waited_out_as_the_server_asks(fake, researcher_for, clock):
    fake.push(*[overloaded(retry_after_ms=250)] * 8, good_turn())

    proposal = researcher_for().propose(make_context())

    assert proposal.description == "LR 0.01 -> 0.02"
    assert clock.sleeps == [0.25] * 8
    assert proposal.usage.retries == 8


def test_retries_stop_at_the_nights_deadline(fake, researcher_for, clock):
    fake.push(*[overloaded(retry_after_ms=20_000)] * 40)

    deadline = clock.now + 60
    with pytest.raises(ProposalRejected, match="deadline \\(--hours\\)"):
        researcher_for().propose(make_context(deadline=deadline))

    assert deadline <= clock.now <= deadline + 1     # waited the night out, not beyond
    assert len(fake.requests) == 3                    # at 0 s, 20 s and 40 s: no try past the deadline


def test_timeouts_are_retried_counted_and_bounded_by_the_deadline(fake, researcher_for, clock):
    fake.push(timeout(3.0), good_turn())
    researcher = researcher_for(timeout_s=0.5)

    proposal = researcher.propose(make_context())

    assert proposal.usage.timeouts == 1 and researcher.usage()["timeouts"] == 1
    assert proposal.usage.usd > 0          # a timed-out call is charged its prompt, to keep caps safe


# ---- thinking, credentials, breakpoints -------------------------------------------------------

def test_thinking_blocks_are_passed_back_unchanged_and_whitespace_around_them_dropped(fake, researcher_for):
    fake.push(message([thinking("LR looks low."), text(" \n"), tool_use("edit_file", GOOD_EDIT)]),
              message([thinking("Now submit."), tool_use("submit", submit())]))

    researcher_for().propose(make_context())

    assert fake.rejections == []
    assert fake.requests[1].json["messages"][1]["content"][0] == thinking("LR looks low.")


def test_an_auth_token_alone_is_honoured(fake, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    fake.push(good_turn())

    ClaudeResearcher(state_dir=tmp_path).propose(make_context())

    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_the_cache_ttl_setting_marks_the_stable_prefix_and_stays_within_four_breakpoints(fake, researcher_for):
    fake.push(message([tool_use("read_file", {"path": TARGET})]), good_turn())

    researcher_for(cache_ttl="1h").propose(make_context(ledger_summary="e0001 discard something"))

    assert fake.rejections == []
    body = fake.requests[1].json
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert json.dumps(body).count("cache_control") <= 4


def test_an_unknown_model_stops_with_the_fix(fake, researcher_for):
    with pytest.raises(ResearcherError, match="claude.model"):
        researcher_for(model="claude-sonnet-9-9").propose(make_context())


def test_no_try_waits_past_the_nights_deadline(fake, researcher_for, clock):
    fake.push(timeout(5.0))                       # would answer after 5 s; the night ends in 1.5 s
    started = __import__("time").monotonic()

    with pytest.raises(ProposalRejected, match="deadline"):
        researcher_for(timeout_s=600).propose(make_context(deadline=clock.now + 1.5))

    assert __import__("time").monotonic() - started < 4.0     # the try's timeout was cut to the deadline
    assert len(fake.requests) == 1


# ---- 5. transcripts ---------------------------------------------------------------------------

def test_each_proposal_leaves_a_transcript_of_its_calls_with_secrets_removed(fake, researcher_for, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    fake.push(overloaded(), message([text("Raising LR."), tool_use("edit_file", GOOD_EDIT)]),
              error(400, "invalid_request_error", f"echoing what we were sent: x-api-key {KEY}"))
    researcher = researcher_for()

    with pytest.raises(ProposalRejected) as caught:
        researcher.propose(make_context())

    assert KEY not in caught.value.reason and "[redacted]" in caught.value.reason
    path = researcher.state_dir.parent / caught.value.extra["transcript"]
    saved = path.read_text()
    assert KEY not in saved
    record = json.loads(saved)
    assert record["system"][0]["text"].startswith("You are the researcher")
    first, second = record["calls"]
    assert first["failed_tries"][0]["kind"] == "retry" and first["response"]["content"][0]["text"] == "Raising LR."
    assert first["new_messages"][0]["role"] == "user" and second["from_message"] == 1
    assert [m["role"] for m in second["new_messages"]] == ["assistant", "user"]
    assert second["failed_tries"][0]["status"] == 400 and "[redacted]" in second["failed_tries"][0]["message"]
