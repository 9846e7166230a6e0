"""The scripted fake models themselves, without the CLIs: their streams parse in the real SDKs
(Anthropic's, OpenAI's), steps become each API's tool calls, a step function reads the
previous tool result, and what a strict API would refuse is refused and listed."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import anthropic
import pytest

from tests.fakes.agent_models import (
    KEY,
    FakeClaudeCodeModel,
    FakeCodexModel,
    ToolResult,
    final,
    read_file,
    shell,
    use_skill,
    write_file,
)
from tests.needs import needs

CLAUDE_TOOLS = [{"name": name, "description": name, "input_schema": {"type": "object", "properties": {}}}
                for name in ("Bash", "Write", "Read", "Skill")]
CODEX_TOOLS = [{"type": "function", "name": "exec_command", "description": "run",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
               {"type": "custom", "name": "apply_patch", "description": "patch"}]


def claude(fake: FakeClaudeCodeModel, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.url, api_key=key, max_retries=0)


def ask_claude(client: anthropic.Anthropic, messages: list) -> anthropic.types.Message:
    with client.messages.stream(model="claude-opus-4-8", max_tokens=1000, messages=messages,
                                tools=CLAUDE_TOOLS) as stream:
        return stream.get_final_message()


def test_claude_steps_stream_as_tool_use_and_text_the_sdk_parses(tmp_path):
    seen = []

    def second(turn):
        seen.append(turn)
        return write_file("out.txt", str(turn.result.json()["n"] + 1))

    script = [shell("echo '{\"n\": 41}'"), second, read_file("/etc/hostname"), use_skill("night-shift"),
              final("a final answer longer than one streamed chunk of text")]
    with FakeClaudeCodeModel(script, workdir=tmp_path, stream_chunk=5) as fake:
        client = claude(fake)
        messages = [{"role": "user", "content": "go"}]
        answers = []
        for output in ('{"n": 41}', "File created", "1\thost\n2\t", "Launching skill: night-shift"):
            answer = ask_claude(client, messages)
            answers.append(answer)
            (call,) = answer.content
            messages += [{"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                       "content": output}]}]
        last = ask_claude(client, messages)

    assert [(a.stop_reason, a.content[0].name, a.content[0].input) for a in answers] == [
        ("tool_use", "Bash", {"command": "echo '{\"n\": 41}'", "description": "Run the scripted command"}),
        ("tool_use", "Write", {"file_path": str(tmp_path / "out.txt"), "content": "42\n"}),
        ("tool_use", "Read", {"file_path": "/etc/hostname"}),
        ("tool_use", "Skill", {"skill": "night-shift"})]
    assert last.stop_reason == "end_turn" and last.content[0].text == "a final answer longer than one streamed chunk of text"
    assert last.usage.input_tokens > 0 and last.usage.output_tokens > 0
    assert fake.rejections == []
    assert seen[0].number == 2 and seen[0].result == ToolResult("Bash", answers[0].content[0].id, '{"n": 41}',
                                                                '{"n": 41}', 0, False)
    assert [r.tool for r in fake.tool_results] == ["Bash", "Write", "Read", "Skill"]
    assert fake.tool_results[2].output == "host\n"                          # line numbers taken off


def test_claude_exit_code_and_error_flag_are_read_from_the_tool_result():
    with FakeClaudeCodeModel([shell("false"), lambda turn: final(f"exit {turn.result.exit_code}")]) as fake:
        client = claude(fake)
        call = ask_claude(client, [{"role": "user", "content": "go"}]).content[0]
        last = ask_claude(client, [{"role": "user", "content": "go"},
                                   {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
                                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                                 "is_error": True, "content": "Exit code 1\nboom"}]}])
    assert last.content[0].text == "exit 1"
    assert (fake.tool_results[0].exit_code, fake.tool_results[0].is_error, fake.tool_results[0].output) == (1, True, "boom")


def test_claude_fake_refuses_and_lists_what_the_api_would_refuse():
    with FakeClaudeCodeModel([shell("ls"), final("x")]) as fake:
        with pytest.raises(anthropic.AuthenticationError):
            ask_claude(claude(fake, key="sk-wrong"), [{"role": "user", "content": "go"}])
        call = ask_claude(claude(fake), [{"role": "user", "content": "go"}]).content[0]
        with pytest.raises(anthropic.BadRequestError, match="got no tool_result|without `tool_result`"):
            ask_claude(claude(fake), [{"role": "user", "content": "go"},
                                      {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
                                      {"role": "user", "content": "I ignore your tool call"}])
        with pytest.raises(anthropic.BadRequestError, match="stream"):
            claude(fake).messages.create(model="claude-opus-4-8", max_tokens=10, tools=CLAUDE_TOOLS,
                                         messages=[{"role": "user", "content": "go"}])
    assert len(fake.rejections) == 3 and "'sk-wrong', not the fake's key" in fake.rejections[0]


def test_claude_fake_refuses_a_request_past_the_script_and_a_tool_never_declared(tmp_path):
    with FakeClaudeCodeModel([final("only")]) as fake:
        ask_claude(claude(fake), [{"role": "user", "content": "go"}])
        with pytest.raises(anthropic.BadRequestError, match="no step left"):
            ask_claude(claude(fake), [{"role": "user", "content": "again"}])
    with FakeClaudeCodeModel([write_file("a.txt", "x")], workdir=tmp_path) as fake:
        with pytest.raises(anthropic.BadRequestError, match="did not declare"):
            claude(fake).messages.create(model="claude-opus-4-8", max_tokens=10, tools=CLAUDE_TOOLS[:1],
                                         messages=[{"role": "user", "content": "go"}], stream=True)
    assert "Write, which the CLI did not declare" in fake.rejections[0]


def test_a_head_request_is_answered_404_and_logged():
    with FakeClaudeCodeModel([]) as fake:
        request = urllib.request.Request(fake.url + "/", method="HEAD")
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=5)
    assert answer.value.code == 404
    assert [(r.method, r.path, r.status) for r in fake.requests] == [("HEAD", "/", 404)]


def _responses(fake: FakeCodexModel, body: dict, key: str = KEY) -> list[tuple[str, dict]]:
    """POST /v1/responses and the server-sent events it streams back."""
    request = urllib.request.Request(fake.url + "/responses", data=json.dumps(body).encode(), method="POST",
                                     headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        frames = answer.read().decode().split("\n\n")
    events = []
    for frame in filter(None, frames):
        name, data = frame.split("\n", 1)
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def test_codex_steps_stream_as_responses_events(tmp_path):
    def second(turn):
        return write_file("out.txt", f"{turn.result.json()['n']}\nsecond line")

    with FakeCodexModel([shell("echo '{\"n\": 7}'"), second, final("done and dusted")], workdir=tmp_path,
                        stream_chunk=4) as fake:
        base = {"model": "gpt-5.5", "stream": True, "tools": CODEX_TOOLS,
                "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]}
        first = _responses(fake, base)
        call = first[-1][1]["response"]["output"][0]
        base["input"] += [call, {"type": "function_call_output", "call_id": call["call_id"],
                                 "output": "Chunk ID: 1\nProcess exited with code 0\nOutput:\n{\"n\": 7}\n"}]
        patch = _responses(fake, base)
        item = patch[-1][1]["response"]["output"][0]
        base["input"] += [item, {"type": "custom_tool_call_output", "call_id": item["call_id"],
                                 "output": "Exit code: 0\nOutput:\nSuccess."}]
        last = _responses(fake, base)

    assert [name for name, _ in first] == [
        "response.created", "response.in_progress", "response.output_item.added",
        *["response.function_call_arguments.delta"] * -(-len(call["arguments"]) // 4),
        "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert all(data["type"] == name for name, data in first + patch + last)
    assert [data["sequence_number"] for _, data in first] == list(range(len(first)))
    assert (call["type"], call["name"], json.loads(call["arguments"])) == \
        ("function_call", "exec_command", {"cmd": "echo '{\"n\": 7}'"})
    assert "".join(d["delta"] for n, d in first if n.endswith(".delta")) == call["arguments"]
    assert (item["type"], item["name"]) == ("custom_tool_call", "apply_patch")
    assert item["input"] == f"*** Begin Patch\n*** Add File: {tmp_path / 'out.txt'}\n+7\n+second line\n*** End Patch\n"
    assert "".join(d["delta"] for n, d in patch if n == "response.custom_tool_call_input.delta") == item["input"]
    done = last[-1][1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["text"] == "done and dusted"
    assert done["usage"]["total_tokens"] == done["usage"]["input_tokens"] + done["usage"]["output_tokens"]
    assert [(r.tool, r.exit_code, r.output) for r in fake.tool_results] == [
        ("exec_command", 0, '{"n": 7}\n'), ("apply_patch", 0, "Success.")]
    assert fake.rejections == []


@needs("openai")
def test_codex_fake_streams_what_the_openai_sdk_parses():
    import openai

    with FakeCodexModel([shell("ls -la"), final("bye")]) as fake:
        client = openai.OpenAI(base_url=fake.url, api_key=KEY, max_retries=0)
        with client.responses.stream(model="gpt-5.5", input="go", tools=CODEX_TOOLS) as stream:
            response = stream.get_final_response()
        call = response.output[0]
        with client.responses.stream(model="gpt-5.5", tools=CODEX_TOOLS, input=[
                {"role": "user", "content": "go"}, call.model_dump(exclude_none=True),
                {"type": "function_call_output", "call_id": call.call_id, "output": "Process exited with code 2"}]) as stream:
            last = stream.get_final_response()
    assert (call.name, json.loads(call.arguments)) == ("exec_command", {"cmd": "ls -la"})
    assert last.output_text == "bye" and fake.rejections == []
    assert fake.tool_results[0].exit_code == 2


def test_codex_fake_refuses_a_wrong_key_and_an_unanswered_call():
    with FakeCodexModel([shell("ls"), final("x")]) as fake:
        base = {"model": "gpt-5.5", "stream": True, "tools": CODEX_TOOLS,
                "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]}
        with pytest.raises(urllib.error.HTTPError) as refused:
            _responses(fake, base, key="sk-wrong")
        assert refused.value.code == 401
        _responses(fake, base)
        with pytest.raises(urllib.error.HTTPError) as refused:
            _responses(fake, base)                                       # the call was never answered
        assert refused.value.code == 400
        assert "No tool output found" in json.loads(refused.value.read())["error"]["message"]
    assert len(fake.rejections) == 2 and "Authorization" in fake.rejections[0]
