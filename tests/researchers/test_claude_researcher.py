"""The claude researcher, driven through the real `anthropic` SDK against a local fake server.

Each test scripts what "Claude" answers and checks what the researcher does with it and what
it sent. No test needs the network.
"""
from __future__ import annotations

import json
from pathlib import Path

import anthropic
import pytest

from agent.record.records import Direction
from agent.researchers.base import ResearchContext, ResearcherError
from agent.researchers.claude import ClaudeResearcher, ProposalRejected
from agent.researchers.settings import DEFAULT_CLAUDE_MODEL as DEFAULT_MODEL
from agent.researchers.tool_specs import TOOL_NAMES
from tests.fakes.anthropic_api import FakeAnthropic, error, message, text, tool_use

CLIENT_KEY = "sk-test-client-secret-0123456789"
ENV_KEY = "sk-ant-env-secret-9876543210"
TARGET = "train/train.py"
SOURCE = (
    "# ---- Knobs ----\n"
    "LR = 0.01            # learning rate\n"
    "WARMUP = 10          # warmup steps\n"
    "print('val_bpb: 1.0')\n"
)
PREPARE = "DATA_SEED = 1\n"
PREDICTION = {"direction": "improve", "expected_delta": -0.02, "interval": [-0.05, 0.01],
              "confidence": 0.8, "rationale": "a higher LR converges further within a short budget"}
GOOD_EDIT = {"path": TARGET, "old_string": "LR = 0.01", "new_string": "LR = 0.02"}


def submit(prediction: object = PREDICTION, **overrides: object) -> dict:
    call = {"description": "LR 0.01 -> 0.02", "hypothesis": "the run is under-trained at this LR"}
    if prediction is not None:
        call["prediction"] = prediction
    return call | overrides


def make_context(**overrides: object) -> ResearchContext:
    values = dict(
        program_text="Lower val_bpb on the tiny model.", target=TARGET, incumbent_source=SOURCE,
        incumbent_commit="0123456789abcdef" * 2, protected={"train/prepare.py": PREPARE},
        ledger_summary="", metric="val_bpb", direction=Direction.MINIMIZE, noise_sd=0.01,
        incumbent_value=1.0, experiment_index=1,
    )
    return ResearchContext(**(values | overrides))


@pytest.fixture
def fake():
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def researcher_for(tmp_path: Path, fake: FakeAnthropic, sleeps: list[float]):
    def build(**settings: object) -> ClaudeResearcher:
        client = anthropic.Anthropic(base_url=fake.url, api_key=CLIENT_KEY, max_retries=0)
        return ClaudeResearcher(state_dir=tmp_path / "state", settings={"retry_base_s": 1.0, "api_tries": 3} | settings,
                                client=client, sleep=sleeps.append)
    return build


def tool_results(request_json: dict) -> list[dict]:
    """The tool_result blocks of the newest user message the server received."""
    return [b for b in request_json["messages"][-1]["content"] if b["type"] == "tool_result"]


# ---- the happy path ------------------------------------------------------------------------

def test_a_good_edit_with_a_prediction_becomes_a_proposal(fake, researcher_for):
    fake.push(message([text("Raise LR."), tool_use("edit_file", GOOD_EDIT)]), message([tool_use("submit", submit())]))
    researcher = researcher_for()

    proposal = researcher.propose(make_context())

    assert proposal.source == SOURCE.replace("LR = 0.01", "LR = 0.02")
    assert proposal.description == "LR 0.01 -> 0.02"
    assert proposal.prediction.direction == "improve"
    assert proposal.prediction.interval == (-0.05, 0.01)
    assert proposal.prediction.confidence == 0.8
    assert proposal.extra["turns"] == 2 and proposal.extra["errors"] == {}
    assert (researcher.state_dir.parent / proposal.extra["transcript"]).exists()
    second = fake.requests[1].json
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert tool_results(second)[0].get("is_error") is not True
    usage = researcher.usage()
    assert usage["calls"] == 2 and usage["input_tokens"] + usage["cache_creation_input_tokens"] > 0 and usage["usd"] > 0
    assert usage["usd"] == pytest.approx(proposal.usage.usd) and proposal.usage.calls == 2


def test_the_request_carries_tools_cached_prefix_and_no_secret(fake, researcher_for, monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_KEY)
    fake.push(message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())]))
    researcher = researcher_for()

    researcher.propose(make_context())

    body = fake.requests[0].json
    assert body["model"] == DEFAULT_MODEL
    assert [t["name"] for t in body["tools"]] == [n for n in TOOL_NAMES if n != "show_experiment"]  # no callback
    assert all("cache_control" not in tool for tool in body["tools"])   # the system's breakpoint covers them
    assert body["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "Lower val_bpb on the tiny model." in body["system"][0]["text"]
    opening = body["messages"][0]["content"]
    assert opening[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"} and SOURCE in opening[0]["text"]
    assert json.dumps(body).count("cache_control") <= 4  # the API allows 4 breakpoints
    # The key travels in the header (so the recording would show a leak), never in a body or a file.
    assert any(CLIENT_KEY in value for value in fake.requests[0].headers.values())
    for request in fake.requests:
        assert CLIENT_KEY.encode() not in request.body and ENV_KEY.encode() not in request.body
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert CLIENT_KEY not in path.read_text() and ENV_KEY not in path.read_text()


def test_without_a_client_the_key_comes_from_the_environment(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_KEY)
    fake.push(message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())]))
    researcher = ClaudeResearcher(state_dir=tmp_path, settings={"base_url": fake.url})

    researcher.propose(make_context())

    assert any(ENV_KEY in value for value in fake.requests[0].headers.values())


def test_without_a_key_construction_fails_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "no-profiles"))
    with pytest.raises(ResearcherError, match="ANTHROPIC_API_KEY"):
        ClaudeResearcher(state_dir=tmp_path)


# ---- mistakes are answered, counted, never applied -----------------------------------------

def test_an_edit_to_a_protected_file_is_refused_and_counted(fake, researcher_for):
    forbidden = {"path": "train/prepare.py", "old_string": "DATA_SEED = 1", "new_string": "DATA_SEED = 2"}
    fake.push(message([tool_use("edit_file", forbidden)]),
              message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())]))
    researcher = researcher_for()
    context = make_context()

    proposal = researcher.propose(context)

    answer = tool_results(fake.requests[1].json)[0]
    assert answer["is_error"] is True and "only file you may edit is train/train.py" in answer["content"]
    assert proposal.extra["errors"] == {"outside_target": 1}
    assert researcher.usage()["errors"]["outside_target"] == 1
    assert context.protected["train/prepare.py"] == PREPARE
    assert "DATA_SEED" not in proposal.source


def test_an_edit_that_breaks_the_syntax_is_not_applied_and_the_model_is_told(fake, researcher_for):
    broken = {"path": TARGET, "old_string": "LR = 0.01", "new_string": "LR = (0.02"}
    fake.push(message([tool_use("edit_file", broken)]),
              message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())]))

    proposal = researcher_for().propose(make_context())

    answer = tool_results(fake.requests[1].json)[0]
    assert answer["is_error"] is True
    assert "NOT applied" in answer["content"] and "line 2" in answer["content"]
    assert "(0.02" not in proposal.source and "LR = 0.02" in proposal.source
    assert proposal.extra["errors"] == {"syntax_error": 1}


@pytest.mark.parametrize("bad_input, kind", [
    ({"path": TARGET, "new_string": "x"}, "bad_input"),                        # old_string missing
    ({"path": TARGET, "old_string": 7, "new_string": "x"}, "bad_input"),       # wrong type
    ({"path": TARGET, "old_string": "LR = 0.5", "new_string": "LR = 1"}, "edit_not_found"),
    ({"path": TARGET, "old_string": "  # ", "new_string": " #"}, "edit_not_unique"),
    ({"path": "../../etc/passwd", "old_string": "a", "new_string": "b"}, "outside_target"),
])
def test_malformed_or_inapplicable_edits_are_tool_errors(fake, researcher_for, bad_input, kind):
    fake.push(message([tool_use("edit_file", bad_input)]),
              message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())]))

    proposal = researcher_for().propose(make_context())

    assert tool_results(fake.requests[1].json)[0]["is_error"] is True
    assert proposal.extra["errors"] == {kind: 1}
    assert proposal.source == SOURCE.replace("LR = 0.01", "LR = 0.02")


def test_an_unknown_tool_and_a_non_object_input_are_tool_errors(fake, researcher_for):
    fake.push(message([tool_use("run_shell", {"cmd": "rm -rf /"}), tool_use("read_file", "train/train.py")]),
              message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())]))

    proposal = researcher_for().propose(make_context())

    answers = tool_results(fake.requests[1].json)
    assert [a["is_error"] for a in answers] == [True, True]
    assert proposal.extra["errors"] == {"unknown_tool": 1, "bad_input": 1}


def test_refusals_and_empty_answers_are_counted_and_answered(fake, researcher_for):
    fake.push(message([], stop_reason="refusal"), message([], stop_reason="end_turn"),
              message([text("I think LR is too low.")]),
              message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())]))

    proposal = researcher_for().propose(make_context())

    assert proposal.extra["errors"] == {"refusal": 1, "empty_answer": 1, "no_tool_call": 1}
    for request in fake.requests:  # the conversation stays a valid alternation
        roles = [m["role"] for m in request.json["messages"]]
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]
        assert request.body.count(b'"cache_control"') <= 4
    assert len(fake.requests[1].json["messages"]) == 1       # the refusal ended that conversation
    assert fake.rejections == []


def test_thinking_blocks_are_passed_back_unchanged(fake, researcher_for):
    thinking = {"type": "thinking", "thinking": "LR looks low.", "signature": "sig-opaque-123"}
    fake.push(message([thinking, tool_use("edit_file", GOOD_EDIT)]), message([tool_use("submit", submit())]))

    researcher_for().propose(make_context())

    assert fake.requests[1].json["messages"][1]["content"][0] == thinking


def test_reading_files_shows_the_draft_and_protected_files_only(fake, researcher_for):
    fake.push(message([tool_use("edit_file", GOOD_EDIT), tool_use("read_file", {"path": "./train/train.py"}),
                       tool_use("read_file", {"path": "train/prepare.py"}), tool_use("read_file", {"path": "secrets.env"}),
                       tool_use("show_draft_diff", {})]),
              message([tool_use("submit", submit())]))

    proposal = researcher_for().propose(make_context())

    edit, draft, prepare, other, diff = tool_results(fake.requests[1].json)
    assert "2\tLR = 0.02" in draft["content"] and "DATA_SEED = 1" in prepare["content"]
    assert other["is_error"] is True and "not readable" in other["content"]
    assert "-LR = 0.01" in diff["content"] and "+LR = 0.02" in diff["content"]
    assert proposal.extra["errors"] == {"outside_target": 1}


def test_show_experiment_uses_the_loops_callback(fake, tmp_path, sleeps):
    asked: list[str] = []

    def detail(experiment_id: str) -> str:
        asked.append(experiment_id)
        return "diff --git a/train/train.py ...\nlog tail: val_bpb: 1.01"
    fake.push(message([tool_use("show_experiment", {"experiment_id": "e007"})]),
              message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())]))
    client = anthropic.Anthropic(base_url=fake.url, api_key=CLIENT_KEY, max_retries=0)
    researcher = ClaudeResearcher(state_dir=tmp_path, client=client, experiment_detail=detail)

    researcher.propose(make_context())

    assert "show_experiment" in [t["name"] for t in fake.requests[0].json["tools"]]
    assert asked == ["e007"] and "val_bpb: 1.01" in tool_results(fake.requests[1].json)[0]["content"]


# ---- the pre-registered prediction ---------------------------------------------------------

def test_a_missing_prediction_is_sent_back_once_then_a_fixed_one_is_accepted(fake, researcher_for):
    fake.push(message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit(prediction=None))]),
              message([tool_use("submit", submit())]))

    proposal = researcher_for().propose(make_context())

    answer = tool_results(fake.requests[1].json)[1]
    assert answer["is_error"] is True and "prediction is missing" in answer["content"]
    assert "one return allowed" in answer["content"]
    assert proposal.extra["errors"] == {"bad_prediction": 1}
    assert proposal.prediction.expected_delta == -0.02


def test_a_second_unusable_prediction_rejects_the_experiment_and_the_next_starts_fresh(fake, researcher_for):
    wrong_sign = PREDICTION | {"expected_delta": 0.02, "interval": [0.0, 0.05]}
    fake.push(message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit(prediction=None))]),
              message([tool_use("submit", submit(prediction=wrong_sign))]))
    researcher = researcher_for()

    with pytest.raises(ProposalRejected) as caught:
        researcher.propose(make_context())

    assert "no usable prediction" in caught.value.reason and "negative expected_delta" in caught.value.reason
    assert caught.value.errors == {"bad_prediction": 2}
    saved = json.loads((researcher.state_dir.parent / caught.value.extra["transcript"]).read_text())
    assert saved["outcome"].startswith("no usable prediction") and "response" in saved["calls"][-1]
    fake.push(message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())]))
    researcher.propose(make_context(experiment_index=2))
    assert len(fake.requests[-1].json["messages"]) == 1


# ---- failures of the API, caps, persistence ------------------------------------------------

def test_rate_limits_and_overloads_are_retried_with_backoff(fake, researcher_for, sleeps):
    fake.push(error(429, "rate_limit_error"), error(529, "overloaded_error"),
              message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())]))

    proposal = researcher_for(retry_base_s=1.5).propose(make_context())

    assert sleeps == [1.5, 3.0]
    assert researcher_for().usage()["retries"] == 2  # persisted, read back by a new instance
    assert proposal.usage.retries == 2
    assert proposal.extra["turns"] == 1
    assert len(fake.requests) == 3


def test_an_api_that_stays_down_pauses_the_loop_with_a_clean_error(fake, researcher_for, sleeps):
    fake.push(error(500, "api_error"), error(529, "overloaded_error"), error(503, "api_error"))

    with pytest.raises(ResearcherError) as caught:
        researcher_for(api_tries=3).propose(make_context())

    message_ = str(caught.value)
    assert "anthropic API: unavailable after 3 tries" in message_ and "nightshift run --tag" in message_
    assert CLIENT_KEY not in message_
    assert len(sleeps) == 2


def test_a_bad_request_rejects_the_proposal_without_retrying(fake, researcher_for, sleeps):
    fake.push(error(400, "invalid_request_error", "max_tokens: too large"))
    with pytest.raises(ProposalRejected, match="rejected the request \\(400: invalid_request_error: max_tokens"):
        researcher_for().propose(make_context())
    assert sleeps == [] and len(fake.requests) == 1


def test_a_second_fresh_conversation_rejected_means_the_settings_are_wrong(fake, researcher_for):
    fake.push(error(400, "invalid_request_error", "output_config.effort: not supported"),
              error(400, "invalid_request_error", "output_config.effort: not supported"))
    researcher = researcher_for()
    with pytest.raises(ProposalRejected):
        researcher.propose(make_context())
    with pytest.raises(ResearcherError, match="rejects even a fresh conversation.*claude.model"):
        researcher.propose(make_context(experiment_index=2))


def test_max_turns_without_a_submission_rejects_the_experiment(fake, researcher_for):
    fake.push(message([tool_use("read_file", {"path": TARGET})]), message([tool_use("read_file", {"path": TARGET})]))
    with pytest.raises(ProposalRejected, match="max_turns=2"):
        researcher_for(max_turns=2).propose(make_context())


def test_the_dollar_cap_stops_the_loop_and_survives_a_restart(fake, researcher_for):
    expensive = {"input_tokens": 400_000, "output_tokens": 10_000,
                 "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}  # $0.90 at Sonnet 5.5 rates
    fake.push(message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())], usage=expensive))
    researcher_for(max_usd=0.5).propose(make_context())
    restarted = researcher_for(max_usd=0.5)

    assert restarted.usage()["usd"] == pytest.approx(0.9)
    with pytest.raises(ResearcherError, match="budget cap reached: spent \\$0.90 of claude.max_usd \\$0.50"):
        restarted.propose(make_context(experiment_index=2))
    assert len(fake.requests) == 1


def test_the_token_cap_counts_cache_reads_and_writes(fake, researcher_for):
    usage = {"input_tokens": 10, "output_tokens": 10, "cache_read_input_tokens": 600, "cache_creation_input_tokens": 400}
    fake.push(message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())], usage=usage))
    researcher = researcher_for(max_tokens_total=1000)
    researcher.propose(make_context())

    assert researcher.usage()["cache_read_input_tokens"] == 600
    with pytest.raises(ResearcherError, match="budget cap reached: 1020 tokens"):
        researcher.propose(make_context(experiment_index=2))


def test_settings_given_as_a_mapping_name_an_unknown_key():
    with pytest.raises(ResearcherError, match="claude.modle: unknown setting"):
        ClaudeResearcher(state_dir=Path("/nonexistent"), settings={"modle": "x"}, client=object())


# ---- a long night stays bounded ------------------------------------------------------------

def ledger_line(i: int) -> str:
    verdict = "keep" if i % 17 == 0 else ("crash" if i % 23 == 0 else "discard")
    return (f"e{i:03d} {verdict:8s} val_bpb {1.0 - i * 1e-4:.4f} (delta {(-1) ** i * 0.003:+.4f} ± 0.004, p=0.{i % 97:02d}) "
            f"LR {0.01 + i * 1e-4:.4f}; predicted improve -0.002 [-0.006, 0.002] @0.8; not significant at alpha 0.05")


def test_two_hundred_proposals_keep_the_request_bounded(fake, researcher_for):
    def answer(request: dict) -> object:
        source = request["messages"][0]["content"][0]["text"]
        line = next(l for l in source.splitlines() if l.startswith("LR = "))
        edit = {"path": TARGET, "old_string": line, "new_string": line.replace("LR = ", "LR = 1.01 * ")}
        return message([tool_use("edit_file", edit), tool_use("submit", submit())])
    researcher = researcher_for(max_brief_chars=24_000)
    source, sizes = SOURCE, []

    for i in range(1, 201):
        fake.push(answer)
        summary = "\n".join(ledger_line(j) for j in range(1, i))
        proposal = researcher.propose(make_context(experiment_index=i, incumbent_source=source, ledger_summary=summary))
        sizes.append(len(fake.requests[-1].body))
        if i % 17 == 0:
            source = proposal.source

    assert researcher.usage()["calls"] == 200
    assert len(summary) > researcher.settings.max_brief_chars  # the clip was exercised
    assert max(sizes) < 40_000, max(sizes)  # system + tools + source + clipped summary
    print(f"\nrequest bytes: first {sizes[0]}, #100 {sizes[99]}, #200 {sizes[-1]}, max {max(sizes)} "
          f"(~{max(sizes) // 4} tokens); raw summary at #200: {len(summary)} chars")
