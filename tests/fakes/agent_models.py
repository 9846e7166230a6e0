"""Strict local fakes of the streaming model APIs that real coding-agent CLIs talk to, playing
a scripted agent: `FakeClaudeCodeModel` (Anthropic Messages, server-sent events, for Claude
Code) and `FakeCodexModel` (OpenAI Responses, server-sent events, for Codex).

A script is a list of neutral steps, one per model request, each turned into the tool the CLI
at hand declares:

    shell("cmd")              Claude Code: Bash {command}       Codex: exec_command {cmd}
    write_file(path, text)    Claude Code: Write {file_path}    Codex: apply_patch (*** Add File)
    read_file(path)           Claude Code: Read {file_path}     Codex: exec_command cat PATH
    use_skill(name)           Claude Code: Skill {skill}        Codex: exec_command cat .agents/skills/NAME/SKILL.md
    final("text")             the answer's last text; the CLI's turn ends

A step may instead be a function of the request, `step(turn) -> Step`: `turn.result` is the
tool result the CLI sent back for the previous step (`.output` the command's own output, with
the CLI's wrapper removed; `.exit_code`; `.json()` the first JSON value in the output), so a
script can read what a command printed and decide its next command:

    script = [shell("python -c 'import json; print(json.dumps({\"n\": 3}))'"),
              lambda turn: write_file("n.txt", str(turn.result.json()["n"] * 2)),
              final("done")]

`write_file` ends the text with a newline where it has none (apply_patch writes whole lines),
so both CLIs write the same bytes; a relative path is taken from the fake's `workdir`. Claude
Code's Write refuses to replace a file it has not read: `read_file` it first.
A `Reply` (tests/fakes/server.py) in the script is sent as it is: an API error, say (a 5xx or
429 the CLI retries, taking the next step).

Every HTTP request is kept in `fake.requests`, every tool result in `fake.tool_results`. A
request the real API would refuse (no or a wrong key, a field missing or of the wrong type, a
tool call of the fake's left unanswered, a tool the CLI did not declare, a request past the
end of the script, a step function that raised) is answered 400 in the API's error shape and
listed in `fake.rejections`, so a test asserts `fake.rejections == []`.
"""
from __future__ import annotations

import itertools
import json
import re
import shlex
import time
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable, Iterable, Union

from tests.fakes.prompt_cache import tokens_of
from tests.fakes.server import FakeServer, RecordedRequest, Reply

KEY = "sk-fake-agent-model-key"     # the only key the fakes accept unless told another
_ids = itertools.count(1)


# ---- the script --------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One answer of the scripted agent: a tool call (`shell`, `write_file`, `use_skill`) or
    the final text (`final`)."""
    kind: str
    command: str = ""
    path: str = ""
    text: str = ""
    name: str = ""
    wait_s: float | None = None   # how long the CLI may wait for the command (its default: None)


def shell(command: str, wait_s: float | None = None) -> Step:
    """A shell command; `wait_s` asks the CLI to wait that long for it (Claude Code's Bash
    `timeout`, Codex's exec_command `yield_time_ms`) instead of its default."""
    return Step("shell", command=command, wait_s=wait_s)


def write_file(path: str | Path, text: str) -> Step:
    return Step("write_file", path=str(path), text=text if text.endswith("\n") else text + "\n")


def read_file(path: str | Path) -> Step:
    return Step("read_file", path=str(path))


def use_skill(name: str) -> Step:
    return Step("skill", name=name)


def final(text: str) -> Step:
    if not text.strip():
        raise ValueError("a final text must not be empty (the API refuses empty text blocks)")
    return Step("final", text=text)


@dataclass(frozen=True)
class ToolResult:
    """What the CLI sent back for one of the fake's tool calls."""
    tool: str                   # the CLI's tool name: Bash, Write, Skill, exec_command, apply_patch
    call_id: str
    text: str                   # all the text the CLI sent back
    output: str                 # the command's own output, the CLI's wrapper removed
    exit_code: int | None       # as the CLI reported it; None where it said nothing
    is_error: bool | None       # Claude Code's flag; None for Codex, which has none
    attached: str = ""          # text the CLI sent after the results (Claude Code: a launched skill's body)

    def json(self) -> Any:
        """The first JSON value in `output` (a command may print a line before it)."""
        decoder = json.JSONDecoder()
        for match in re.finditer(r"[\[{]", self.output):
            try:
                return decoder.raw_decode(self.output, match.start())[0]
            except ValueError:
                continue
        raise ValueError(f"no JSON value in the output of {self.tool}: {self.output[:300]!r}")


@dataclass(frozen=True)
class Turn:
    """What a step function sees: the request and the results of the previous step's calls."""
    number: int                             # 1 for the first model request
    request: dict[str, Any]                 # the request body as sent
    results: tuple[ToolResult, ...]         # for the previous step's tool calls, in order
    history: tuple[ToolResult, ...]         # every tool result so far, these included

    @property
    def result(self) -> ToolResult | None:
        return self.results[-1] if self.results else None


Item = Union[Step, Callable[[Turn], Step], Reply]


@dataclass
class _Call:
    tool: str
    call_id: str
    payload: Any


# ---- the shared server side --------------------------------------------------------------

class _AgentModel(FakeServer):
    """Plays a script of `Step`s (or step functions, or raw `Reply`s) and streams each answer
    as server-sent events. Subclasses speak one API."""

    def __init__(self, script: Iterable[Item] = (), *, key: str = KEY, workdir: str | Path | None = None,
                 stream_chunk: int = 24) -> None:
        super().__init__()
        self.key = key
        self.workdir = Path(workdir) if workdir is not None else None
        self.stream_chunk = stream_chunk            # deltas carry this many characters at most
        self.tool_results: list[ToolResult] = []
        self.turns = 0
        self._pending: list[_Call] = []             # the tool calls of the last answer, unanswered
        self.push(*script)

    def push(self, *steps: Item) -> None:
        super().push(*(self._wrap(step) for step in steps))

    # what a subclass provides
    def problems(self, request: RecordedRequest, body: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def results_of(self, body: dict[str, Any], calls: list[_Call]) -> list[ToolResult]:
        raise NotImplementedError

    def render(self, step: Step, body: dict[str, Any]) -> tuple[list[_Call], list[tuple[str, dict[str, Any]]]]:
        raise NotImplementedError

    def refuse(self, status: int, message: str) -> Reply:
        raise NotImplementedError

    # the script
    def _wrap(self, item: Item) -> Callable[[dict[str, Any]], Reply]:
        def answer(body: dict[str, Any]) -> Reply:
            with self._lock:
                self.turns += 1
                number = self.turns
                calls, self._pending = self._pending, []
            results = self.results_of(body, calls)
            with self._lock:
                self.tool_results.extend(results)
                history = tuple(self.tool_results)
            if isinstance(item, Reply):
                return item
            try:
                step = item(Turn(number, body, tuple(results), history)) if callable(item) else item
                if not isinstance(step, Step):
                    raise TypeError(f"step {number} gave {step!r}, not a Step")
                issued, events = self.render(step, body)
            except Exception:   # a script that cannot go on: refused loudly, not a hung CLI
                why = f"step {number} failed: {traceback.format_exc(limit=3)[-1500:]}"
                with self._lock:
                    self.rejections.append(why)
                return self.refuse(400, why)
            with self._lock:
                self._pending = issued
            return Reply(200, {"events": events})
        return answer

    def script_exhausted(self) -> Reply:
        why = "fake model: the script has no step left for this request"
        with self._lock:
            self.rejections.append(why)
        return self.refuse(400, why)

    def validate(self, request: RecordedRequest) -> Reply | None:
        try:
            body = request.json
        except ValueError:
            return self.refuse(400, "the request body is not valid JSON")
        if not isinstance(body, dict):
            return self.refuse(400, "the request body is not a JSON object")
        found = self.problems(request, body)
        if not found:
            return None
        status = 401 if found[0].startswith("auth") else 400
        return self.refuse(status, "; ".join(found))

    def chunks(self, text: str) -> list[str]:
        size = max(1, self.stream_chunk)
        return [text[i:i + size] for i in range(0, len(text), size)] or [""]

    def path_of(self, path: str) -> str:
        if Path(path).is_absolute():
            return path
        if self.workdir is None:
            raise ValueError(f"write_file({path!r}): a relative path needs the fake's workdir")
        return str(self.workdir / path)

    # serving: JSON errors as the base does, answers as server-sent events (chunked)
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self
        base = super()._handler()

        class Handler(base):  # type: ignore[misc, valid-type]
            def _record(self, method: str, body: bytes, status: int) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                with fake._lock:
                    fake.requests.append(RecordedRequest(method, self.path, headers, body, status))

            def _not_found(self, method: str) -> None:
                self._record(method, b"", 404)
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_HEAD(self) -> None:  # noqa: N802
                self._not_found("HEAD")

            def do_GET(self) -> None:  # noqa: N802
                self._not_found("GET")

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = fake._answer(RecordedRequest("POST", self.path, headers, body))
                self._record("POST", body, reply.status)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                try:
                    if reply.status == 200 and "events" in reply.body:
                        self._stream(reply)
                    else:
                        data = json.dumps(reply.body).encode()
                        self.send_response(reply.status)
                        self.send_header("content-type", "application/json")
                        self.send_header("content-length", str(len(data)))
                        for key, value in reply.headers.items():
                            self.send_header(key, value)
                        self.end_headers()
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("cache-control", "no-cache")
                self.send_header("transfer-encoding", "chunked")
                self.send_header("request-id", f"req_fake_{next(_ids)}")
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                for event, data in reply.body["events"]:
                    frame = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        return Handler


# ---- Claude Code: Anthropic Messages, streamed --------------------------------------------

_MESSAGES_FIELDS = {"model", "messages", "max_tokens", "system", "tools", "tool_choice", "temperature",
                    "top_p", "top_k", "stop_sequences", "stream", "metadata", "thinking", "output_config",
                    "service_tier", "cache_control", "container", "context_management", "mcp_servers",
                    "diagnostics", "inference_geo", "speed"}
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_EXIT_CODE = re.compile(r"^Exit code (-?\d+)\s*\n?", re.M)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


class FakeClaudeCodeModel(_AgentModel):
    """The Anthropic Messages API as Claude Code streams it: `HEAD /` answered 404, then
    `POST /v1/messages?beta=true` with `stream: true` and `x-api-key`, each answered by the
    next step as message_start, content blocks (text, tool_use with input_json_delta),
    message_delta with the stop reason, message_stop. Point Claude Code at `fake.url` with
    ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY=fake.key."""

    model = "claude-opus-4-8"

    def route(self, path: str) -> bool:
        return path in ("/v1/messages", "/v1/messages?beta=true")

    def refuse(self, status: int, message: str) -> Reply:
        kind = {401: "authentication_error", 404: "not_found_error"}.get(status, "invalid_request_error")
        return Reply(status, {"type": "error", "error": {"type": kind, "message": message},
                              "request_id": f"req_err_{next(_ids)}"})

    def not_found(self, path: str) -> Reply:
        return self.refuse(404, f"fake model: no route {path}")

    def problems(self, request: RecordedRequest, body: dict[str, Any]) -> list[str]:
        given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
        if given != self.key:         # Claude Code sends x-api-key; the API takes a Bearer token too
            return [f"authentication: the x-api-key or Bearer token is {given or None!r}, not the fake's key"]
        out = []
        if not request.headers.get("anthropic-version"):
            out.append("anthropic-version: header is required")
        extra = sorted(set(body) - _MESSAGES_FIELDS)
        if extra:
            out.append(f"{extra[0]}: Extra inputs are not permitted")
        if body.get("stream") is not True:
            out.append("stream: this fake answers streamed requests only (Claude Code streams)")
        if not isinstance(body.get("model"), str) or not body["model"]:
            out.append("model: Field required")
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            out.append(f"max_tokens: expected a positive integer, got {max_tokens!r}")
        names = []
        for i, tool in enumerate(body.get("tools") or []):
            if "input_schema" not in tool and tool.get("type"):       # a server tool (web search)
                names.append(tool.get("name", ""))
                continue
            if not _TOOL_NAME.match(tool.get("name", "")):
                out.append(f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
            if not isinstance(tool.get("input_schema"), dict) or tool["input_schema"].get("type") != "object":
                out.append(f"tools.{i}.input_schema: must be a JSON schema of type object")
            names.append(tool.get("name", ""))
        if len(set(names)) != len(names):
            out.append("tools: Tool names must be unique.")
        system = body.get("system")
        if system is not None and not isinstance(system, (str, list)):
            out.append("system: Input should be a valid string or list of text blocks")
        return out + self._message_problems(body.get("messages"))

    def _message_problems(self, messages: Any) -> list[str]:
        if not isinstance(messages, list) or not messages:
            return ["messages: at least one message is required"]
        out = []
        if messages[0].get("role") != "user":
            out.append('messages.0.role: the first message must use the "user" role')
        pending: set[str] = set()
        last = None
        for i, message in enumerate(messages):
            role = message.get("role")
            content = message.get("content")
            if role == "system":        # mid-conversation system text (a beta Claude Code sends)
                if not _text_of(content).strip():
                    out.append(f"messages.{i}: a system message needs text")
                continue
            if role not in ("user", "assistant"):
                out.append(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'")
                continue
            if role == last:
                out.append(f'messages.{i}: roles must alternate between "user" and "assistant"')
            last = role
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list) or not blocks:
                out.append(f"messages.{i}: all messages must have non-empty content")
                continue
            answered = set()
            for j, block in enumerate(blocks):
                kind = block.get("type") if isinstance(block, dict) else None
                where = f"messages.{i}.content.{j}"
                if kind == "text" and not str(block.get("text", "")).strip():
                    out.append(f"{where}: text content blocks must contain non-whitespace text")
                elif kind == "tool_use":
                    if role != "assistant" or not isinstance(block.get("input"), dict) or not block.get("id"):
                        out.append(f"{where}: a tool_use block needs an id and a dict input, in an assistant message")
                elif kind == "tool_result":
                    if role != "user" or block.get("tool_use_id") not in pending:
                        out.append(f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                                   f"{block.get('tool_use_id')}. Each `tool_result` block must have a "
                                   f"corresponding `tool_use` block in the previous message.")
                    answered.add(block.get("tool_use_id"))
                elif kind not in ("text", "thinking", "redacted_thinking", "image", "document"):
                    out.append(f"{where}.type: unknown content block type {kind!r}")
            if role == "user" and pending - answered:
                out.append(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                           f"after: {', '.join(sorted(pending - answered))}")
            pending = ({b.get("id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"}
                       if role == "assistant" else set())
        if pending:
            out.append(f"messages: the last tool_use ids have no tool_result: {', '.join(sorted(pending))}")
        mine = {c.call_id for c in self._pending}
        spoken = [m for m in messages if m.get("role") != "system"]   # a reminder may follow the results
        content = spoken[-1].get("content") if spoken else None
        sent = {b.get("tool_use_id") for b in content
                if isinstance(b, dict) and b.get("type") == "tool_result"} if isinstance(content, list) else set()
        if mine - sent:
            out.append(f"messages: the fake's tool calls {', '.join(sorted(mine - sent))} got no tool_result")
        return out

    def results_of(self, body: dict[str, Any], calls: list[_Call]) -> list[ToolResult]:
        by_id = {c.call_id: c for c in calls}
        content = body["messages"][-1].get("content")
        attached = "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text") \
            if isinstance(content, list) else ""
        out = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result" or block.get("tool_use_id") not in by_id:
                continue
            call = by_id[block["tool_use_id"]]
            text = _text_of(block.get("content"))
            is_error = bool(block.get("is_error"))
            code = _EXIT_CODE.search(text) if call.tool == "Bash" else None
            exit_code = int(code.group(1)) if code else (0 if call.tool == "Bash" and not is_error else None)
            output = _EXIT_CODE.sub("", text, count=1) if code else text
            if call.tool == "Read" and not is_error:     # "N<tab>line" per line: the file's own text
                output = "\n".join(line.split("\t", 1)[-1] for line in text.split("\n"))
            out.append(ToolResult(call.tool, call.call_id, text, output, exit_code, is_error, attached))
        return out

    def _declared(self, body: dict[str, Any], name: str) -> None:
        if name not in {t.get("name") for t in body.get("tools") or []}:
            raise ValueError(f"the script calls {name}, which the CLI did not declare "
                             f"(declared: {sorted(t.get('name') for t in body.get('tools') or [])})")

    def render(self, step: Step, body: dict[str, Any]) -> tuple[list[_Call], list[tuple[str, dict[str, Any]]]]:
        if step.kind == "shell":
            call = ("Bash", {"command": step.command, "description": "Run the scripted command",
                             **({} if step.wait_s is None else {"timeout": int(step.wait_s * 1000)})})
        elif step.kind == "write_file":
            call = ("Write", {"file_path": self.path_of(step.path), "content": step.text})
        elif step.kind == "read_file":
            call = ("Read", {"file_path": self.path_of(step.path)})
        elif step.kind == "skill":
            call = ("Skill", {"skill": step.name})
        elif step.kind == "final":
            call = None
        else:
            raise ValueError(f"unknown step kind {step.kind!r}")
        message_id = f"msg_fake_{next(_ids):06d}"
        input_tokens = tokens_of(body.get("messages"))
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": {
                "id": message_id, "type": "message", "role": "assistant", "model": body.get("model") or self.model,
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0, "output_tokens": 1, "service_tier": "standard"}}}),
            ("ping", {"type": "ping"}),
        ]
        issued = []
        if call is None:
            events.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                                   "content_block": {"type": "text", "text": ""}}))
            for piece in self.chunks(step.text):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                       "delta": {"type": "text_delta", "text": piece}}))
            produced, stop = step.text, "end_turn"
        else:
            name, tool_input = call
            self._declared(body, name)
            call_id = f"toolu_fake_{next(_ids):06d}"
            issued.append(_Call(name, call_id, tool_input))
            events.append(("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                "type": "tool_use", "id": call_id, "name": name, "input": {}}}))
            produced = json.dumps(tool_input)
            for piece in self.chunks(produced):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                       "delta": {"type": "input_json_delta", "partial_json": piece}}))
            stop = "tool_use"
        events += [
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": tokens_of(produced)}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        return issued, events


# ---- Codex: OpenAI Responses, streamed ----------------------------------------------------

_RESPONSES_FIELDS = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "reasoning",
                     "store", "stream", "include", "prompt_cache_key", "text", "client_metadata", "service_tier",
                     "max_output_tokens", "metadata", "previous_response_id", "truncation", "user", "temperature",
                     "top_p"}
_INPUT_ITEMS = {"message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
                "reasoning", "local_shell_call", "local_shell_call_output", "web_search_call", "compaction",
                "tool_search_call", "tool_search_output"}
_PROCESS_EXIT = re.compile(r"^(?:Process exited with code |Exit code: )(-?\d+)$", re.M)   # exec_command, apply_patch


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(p.get("text", "") for p in output if isinstance(p, dict))
    return ""


class FakeCodexModel(_AgentModel):
    """The OpenAI Responses API as Codex streams it: `POST /v1/responses` with `stream: true`
    and `Authorization: Bearer`, each answered by the next step as response.created,
    response.in_progress, output items (function_call exec_command, custom_tool_call
    apply_patch, message) with their deltas, and response.completed with usage. Point Codex
    at `fake.url` (ends in /v1) through a model provider whose env_key holds fake.key."""

    @property
    def url(self) -> str:
        return super().url + "/v1"

    def route(self, path: str) -> bool:
        return path == "/v1/responses"

    def refuse(self, status: int, message: str) -> Reply:
        kind = "invalid_request_error"
        return Reply(status, {"error": {"message": message, "type": kind, "param": None,
                                        "code": "invalid_api_key" if status == 401 else None}})

    def not_found(self, path: str) -> Reply:
        return self.refuse(404, f"Invalid URL (POST {path})")

    def problems(self, request: RecordedRequest, body: dict[str, Any]) -> list[str]:
        if request.headers.get("authorization") != f"Bearer {self.key}":
            return [f"authentication: Authorization is {request.headers.get('authorization')!r}, "
                    f"not Bearer and the fake's key"]
        out = []
        extra = sorted(set(body) - _RESPONSES_FIELDS)
        if extra:
            out.append(f"Unknown parameter: '{extra[0]}'.")
        if body.get("stream") is not True:
            out.append("stream: this fake answers streamed requests only (Codex streams)")
        if not isinstance(body.get("model"), str) or not body["model"]:
            out.append("Missing required parameter: 'model'.")
        names = []
        for i, tool in enumerate(body.get("tools") or []):
            kind = tool.get("type")
            if kind == "function":
                if not isinstance(tool.get("parameters"), dict) or tool["parameters"].get("type") != "object":
                    out.append(f"Invalid schema for function '{tool.get('name')}': schema must be of type object")
            elif kind == "custom":
                if not tool.get("name"):
                    out.append(f"tools[{i}]: a custom tool needs a name")
            if kind in ("function", "custom"):
                names.append(tool.get("name"))
        if len(set(names)) != len(names):
            out.append("tools: names must be unique")
        items = body.get("input")
        if isinstance(items, str) and items:
            items = [{"type": "message", "role": "user", "content": items}]
        if not isinstance(items, list) or not items:
            return out + ["Missing required parameter: 'input'."]
        calls: set[str] = set()
        outputs: set[str] = set()
        for i, item in enumerate(items):
            kind = item.get("type") or ("message" if "role" in item else None)     # a message's type is optional
            if kind not in _INPUT_ITEMS:
                out.append(f"Invalid value: input[{i}].type {kind!r}")
            elif kind == "message":
                if item.get("role") not in ("user", "developer", "system", "assistant"):
                    out.append(f"input[{i}].role: {item.get('role')!r} is not a role")
            elif kind in ("function_call", "custom_tool_call"):
                if not item.get("call_id"):
                    out.append(f"input[{i}]: a {kind} needs a call_id")
                calls.add(item.get("call_id"))
            elif kind in ("function_call_output", "custom_tool_call_output"):
                if item.get("call_id") not in calls:
                    out.append(f"No tool call found for {kind} with call_id {item.get('call_id')}.")
                outputs.add(item.get("call_id"))
        missing = {c.call_id for c in self._pending} - outputs
        if missing:
            out.append(f"No tool output found for the fake's calls {', '.join(sorted(missing))}.")
        return out

    def results_of(self, body: dict[str, Any], calls: list[_Call]) -> list[ToolResult]:
        by_id = {c.call_id: c for c in calls}
        out = []
        for item in body.get("input") if isinstance(body.get("input"), list) else []:
            if item.get("type") not in ("function_call_output", "custom_tool_call_output") or \
                    item.get("call_id") not in by_id:
                continue
            call = by_id.pop(item["call_id"])
            text = _output_text(item.get("output"))
            code = _PROCESS_EXIT.search(text)
            output = text.split("\nOutput:\n", 1)[1] if "\nOutput:\n" in text else text
            out.append(ToolResult(call.tool, call.call_id, text, output, int(code.group(1)) if code else None, None))
        return out

    def _declared(self, body: dict[str, Any], name: str, kind: str) -> None:
        declared = {(t.get("type"), t.get("name")) for t in body.get("tools") or []}
        if (kind, name) not in declared:
            raise ValueError(f"the script calls {kind} tool {name}, which Codex did not declare "
                             f"(declared: {sorted(n for _, n in declared if n)})")

    def render(self, step: Step, body: dict[str, Any]) -> tuple[list[_Call], list[tuple[str, dict[str, Any]]]]:
        sequence = itertools.count()
        events: list[tuple[str, dict[str, Any]]] = []

        def event(kind: str, **data: Any) -> None:
            events.append((kind, {"type": kind, "sequence_number": next(sequence), **data}))

        response = {"id": f"resp_fake_{next(_ids):06d}", "object": "response", "created_at": int(time.time()),
                    "status": "in_progress", "model": body.get("model"), "output": [], "usage": None}
        event("response.created", response=response)
        event("response.in_progress", response=response)
        issued = []
        if step.kind == "final":
            item_id = f"msg_fake_{next(_ids):06d}"
            item = {"type": "message", "id": item_id, "status": "in_progress", "role": "assistant", "content": []}
            event("response.output_item.added", output_index=0, item=item)
            event("response.content_part.added", item_id=item_id, output_index=0, content_index=0,
                  part={"type": "output_text", "text": "", "annotations": []})
            for piece in self.chunks(step.text):
                event("response.output_text.delta", item_id=item_id, output_index=0, content_index=0,
                      delta=piece, logprobs=[])
            part = {"type": "output_text", "text": step.text, "annotations": []}
            event("response.output_text.done", item_id=item_id, output_index=0, content_index=0, text=step.text,
                  logprobs=[])
            event("response.content_part.done", item_id=item_id, output_index=0, content_index=0, part=part)
            done = {**item, "status": "completed", "content": [part]}
            produced = step.text
        elif step.kind in ("shell", "read_file", "skill"):
            command = {"shell": step.command, "read_file": f"cat {shlex.quote(step.path)}",
                       "skill": f"cat .agents/skills/{step.name}/SKILL.md"}[step.kind]
            self._declared(body, "exec_command", "function")
            item_id, call_id = f"fc_fake_{next(_ids):06d}", f"call_fake_{next(_ids):06d}"
            arguments = json.dumps({"cmd": command, **({} if step.wait_s is None
                                                       else {"yield_time_ms": int(step.wait_s * 1000)})})
            item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": "exec_command",
                    "arguments": "", "status": "in_progress"}
            event("response.output_item.added", output_index=0, item=item)
            for piece in self.chunks(arguments):
                event("response.function_call_arguments.delta", item_id=item_id, output_index=0, delta=piece)
            event("response.function_call_arguments.done", item_id=item_id, output_index=0, arguments=arguments)
            done = {**item, "arguments": arguments, "status": "completed"}
            issued.append(_Call("exec_command", call_id, {"cmd": command}))
            produced = arguments
        elif step.kind == "write_file":
            self._declared(body, "apply_patch", "custom")
            path = self.path_of(step.path) if self.workdir is not None else step.path
            patch = "*** Begin Patch\n*** Add File: " + path + "\n" + \
                "".join("+" + line + "\n" for line in step.text.removesuffix("\n").split("\n")) + "*** End Patch\n"
            item_id, call_id = f"ctc_fake_{next(_ids):06d}", f"call_fake_{next(_ids):06d}"
            item = {"type": "custom_tool_call", "id": item_id, "call_id": call_id, "name": "apply_patch",
                    "input": "", "status": "in_progress"}
            event("response.output_item.added", output_index=0, item=item)
            for piece in self.chunks(patch):
                event("response.custom_tool_call_input.delta", item_id=item_id, output_index=0, delta=piece)
            event("response.custom_tool_call_input.done", item_id=item_id, output_index=0, input=patch)
            done = {**item, "input": patch, "status": "completed"}
            issued.append(_Call("apply_patch", call_id, patch))
            produced = patch
        else:
            raise ValueError(f"unknown step kind {step.kind!r}")
        event("response.output_item.done", output_index=0, item=done)
        input_tokens, output_tokens = tokens_of(body.get("input")), tokens_of(produced)
        event("response.completed", response={
            **response, "status": "completed", "output": [done],
            "usage": {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": input_tokens + output_tokens}})
        return issued, events


__all__ = ["KEY", "FakeClaudeCodeModel", "FakeCodexModel", "Step", "ToolResult", "Turn",
           "final", "shell", "use_skill", "write_file"]
