"""The openai researcher, through the real `openai` SDK against a strict fake Chat Completions server.

The same tools, prediction and rules as the claude researcher; what is checked here is how
Chat Completions are written and read, what a local endpoint costs, and where the key goes.
"""
from __future__ import annotations

import json

import pytest

from tests.needs import require

pytestmark = require("openai")   # before the imports below, which import the SDK

from agent.researchers.base import ResearcherError
from agent.researchers.conversation import ProposalRejected
from agent.researchers.openai_researcher import OpenAIResearcher, is_local
from tests.fakes.openai_api import FakeOpenAI, call, completion, cut, error, refused
from tests.researchers.test_claude_researcher import GOOD_EDIT, SOURCE, TARGET, make_context, submit

KEY = "sk-openai-fake-secret-1234567890abcd"


@pytest.fixture
def fake():
    with FakeOpenAI(key=KEY) as server:
        yield server


@pytest.fixture
def researcher_for(tmp_path, fake):
    def build(**settings) -> OpenAIResearcher:
        env = {"OPENAI_API_KEY": KEY}
        return OpenAIResearcher(state_dir=tmp_path / "state", env=env, sleep=lambda s: None,
                                settings={"model": "qwen3-coder", "base_url": fake.url} | settings)
    return build


def good_turn():
    return completion(tool_calls=[call("edit_file", GOOD_EDIT), call("submit", submit())])


def tool_messages(request) -> list[dict]:
    return [m for m in request.json["messages"] if m["role"] == "tool"]


def test_a_proposal_over_chat_completions_with_tool_calls(fake, researcher_for):
    fake.push(completion("Raising LR.", [call("edit_file", GOOD_EDIT)]), completion(tool_calls=[call("submit", submit())]))
    researcher = researcher_for()

    proposal = researcher.propose(make_context())

    assert fake.rejections == []
    assert proposal.source == SOURCE.replace("LR = 0.01", "LR = 0.02")
    assert proposal.prediction.interval == (-0.05, 0.01) and proposal.extra["turns"] == 2
    first, second = (r.json for r in fake.requests)
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert {t["function"]["name"] for t in first["tools"]} >= {"read_file", "edit_file", "write_file", "submit"}
    assert "max_tokens" in first and "max_completion_tokens" not in first   # what local servers know
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert SOURCE in first["messages"][1]["content"]
    assert all(KEY.encode() not in r.body for r in fake.requests)
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_a_local_endpoint_costs_nothing_and_needs_no_key(fake, tmp_path):
    fake.key = None
    fake.push(good_turn())
    researcher = OpenAIResearcher(state_dir=tmp_path, env={}, settings={"model": "qwen3-coder", "base_url": fake.url})

    proposal = researcher.propose(make_context())

    assert proposal.usage.input_tokens + proposal.usage.cache_read_input_tokens > 0
    assert proposal.usage.usd == 0.0 and researcher.usage()["usd"] == 0.0


def test_a_remote_endpoint_must_be_given_its_prices(tmp_path):
    with pytest.raises(ResearcherError, match="openai.prices is not set"):
        OpenAIResearcher(state_dir=tmp_path, env={"OPENAI_API_KEY": KEY}, settings={"model": "gpt-x"})
    with pytest.raises(ResearcherError, match="OPENAI_API_KEY"):
        OpenAIResearcher(state_dir=tmp_path, env={}, settings={"model": "gpt-x", "prices": {"input": 1, "output": 2}})
    with pytest.raises(ResearcherError, match="openai.model is not set"):
        OpenAIResearcher(state_dir=tmp_path, env={"OPENAI_API_KEY": KEY})


def test_given_prices_are_charged_cache_hits_included(fake, researcher_for):
    fake.push(completion(tool_calls=[call("read_file", {"path": TARGET})]), good_turn())

    proposal = researcher_for(prices={"input": 1.0, "output": 4.0, "cached_input": 0.1}).propose(make_context())

    u = proposal.usage
    assert u.usd == pytest.approx((u.input_tokens * 1.0 + u.output_tokens * 4.0 + u.cache_read_input_tokens * 0.1) / 1e6)
    assert u.cache_read_input_tokens > 0        # the second call re-sent the first call's prefix


@pytest.mark.parametrize("url, local", [("http://127.0.0.1:8000/v1", True), ("http://localhost:11434/v1", True),
                                        ("http://192.168.1.20:8080/v1", True), ("http://10.0.0.7/v1", True),
                                        ("https://api.openai.com/v1", False), ("https://api.together.xyz/v1", False)])
def test_what_counts_as_a_local_endpoint(url, local):
    assert is_local(url) is local


def test_a_call_cut_at_the_output_limit_is_not_executed(fake, researcher_for):
    half = json.dumps({"path": TARGET, "content": SOURCE.replace("LR = 0.01", "LR = 0.5")})[:60]
    fake.push(cut(tool_calls=[call("write_file", half)]), good_turn())

    proposal = researcher_for().propose(make_context())

    assert fake.rejections == []
    answer = tool_messages(fake.requests[1])[0]
    assert "NOT executed" in answer["content"] and answer["content"].startswith("ERROR: ")
    assert proposal.source == SOURCE.replace("LR = 0.01", "LR = 0.02")
    assert proposal.extra["errors"] == {"truncated": 1}


def test_arguments_that_are_not_json_are_answered_as_a_mistake(fake, researcher_for):
    fake.push(completion(tool_calls=[call("edit_file", "{path: train/train.py")]), good_turn())

    proposal = researcher_for().propose(make_context())

    assert "not valid JSON" in tool_messages(fake.requests[1])[0]["content"]
    assert proposal.extra["errors"] == {"bad_input": 1}


def test_a_refusal_starts_a_fresh_conversation(fake, researcher_for):
    fake.push(completion(tool_calls=[call("read_file", {"path": TARGET})]), refused(), good_turn())

    proposal = researcher_for().propose(make_context())

    assert fake.rejections == []
    assert [m["role"] for m in fake.requests[2].json["messages"]] == ["system", "user"]
    assert proposal.extra["errors"] == {"refusal": 1}


def test_whitespace_and_prose_answers_are_nudged(fake, researcher_for):
    fake.push(completion("\n\n"), completion("I would raise the LR."), good_turn())

    proposal = researcher_for().propose(make_context())

    assert fake.rejections == []
    assert proposal.extra["errors"] == {"empty_answer": 1, "no_tool_call": 1}


def test_rate_limits_are_retried_as_the_server_asks(fake, tmp_path):
    sleeps = []
    fake.push(error(429, "Rate limit reached", "requests", headers={"retry-after": "2"}), good_turn())
    researcher = OpenAIResearcher(state_dir=tmp_path, env={"OPENAI_API_KEY": KEY}, sleep=sleeps.append,
                                  settings={"model": "qwen3-coder", "base_url": fake.url})

    proposal = researcher.propose(make_context())

    assert sleeps == [2.0] and proposal.usage.retries == 1


def test_an_unknown_model_or_key_stops_with_the_fix(fake, researcher_for, tmp_path):
    with pytest.raises(ResearcherError, match="openai.model \\(llama-9\\)"):
        researcher_for(model="llama-9").propose(make_context())
    wrong = OpenAIResearcher(state_dir=tmp_path / "w", env={"OPENAI_API_KEY": "sk-wrong-key-000000000000"},
                             settings={"model": "qwen3-coder", "base_url": fake.url})
    with pytest.raises(ResearcherError, match="OPENAI_API_KEY") as caught:
        wrong.propose(make_context())
    assert "sk-wrong-key" not in str(caught.value)


def test_a_bad_request_rejects_the_proposal(fake, researcher_for):
    fake.push(error(400, "This model's maximum context length is 8192 tokens", code="context_length_exceeded"))
    with pytest.raises(ProposalRejected, match="maximum context length"):
        researcher_for().propose(make_context())
