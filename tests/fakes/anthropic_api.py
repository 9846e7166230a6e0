"""A strict local fake of the Anthropic Messages API (and its Bedrock and Vertex routes).

Every request is checked as the real API checks it (see `problems`); one that breaks a rule
is answered 400 `invalid_request_error` in the API's error shape and listed in
`fake.rejections`. Usage is computed by a model of the prompt cache (`prompt_cache`) unless
the script gives it. Replies are built with the helpers below: `message`, `text`,
`tool_use`, `thinking`, `refusal`, `cut` (a max_tokens stop), `overloaded` (529 with the
API's retry headers), `timeout` (an answer that outlasts the client) and `error`.

    with FakeAnthropic([message([tool_use("submit", {...})])]) as fake:
        client = anthropic.Anthropic(base_url=fake.url, api_key="sk-test", max_retries=0)
        ...
        assert fake.rejections == []
"""
from __future__ import annotations

import hashlib
import itertools
import re
import time
import typing
from typing import Any, Callable, Iterable

from anthropic.types.model import Model

from tests.fakes.prompt_cache import PromptCache, tokens_of
from tests.fakes.server import FakeServer, RecordedRequest, Reply, Script

_ids = itertools.count(1)
KNOWN_MODELS = frozenset(typing.get_args(typing.get_args(Model)[0]))   # the SDK's model list
MAX_BREAKPOINTS = 4
_TOP_LEVEL = {"model", "messages", "max_tokens", "system", "tools", "tool_choice", "temperature",
              "top_p", "top_k", "stop_sequences", "stream", "metadata", "thinking", "output_config",
              "service_tier", "cache_control", "container", "diagnostics", "inference_geo", "speed",
              "user_profile_id", "workspace_id"}
_PLATFORM_KEYS = {"anthropic_version", "anthropic_beta"}
_EFFORTS = {"low", "medium", "high", "xhigh", "max"}
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_BEDROCK = re.compile(r"^/model/(?P<model>[^/]+)/invoke$")
_VERTEX = re.compile(r"^/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/(?P<model>[^/:]+):rawPredict$")


def max_output_tokens(model: str) -> int:
    return 128_000 if any(k in model for k in ("opus", "fable", "mythos")) else 64_000


def base_model(model: str) -> str:
    """claude-... from a Bedrock id (us.anthropic.claude-...-v1:0) or a Vertex one (...@date)."""
    model = re.sub(r"^(?:[a-z]+\.)?anthropic\.", "", model)
    return re.sub(r"(-v\d+(?::\d+)?|@\d{8})$", "", model)


# ---- replies -----------------------------------------------------------------------------

def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, tool_input: Any, id: str | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": id or f"toolu_{next(_ids):04d}", "name": name, "input": tool_input}


def thinking(value: str) -> dict[str, Any]:
    signature = "sig_" + hashlib.sha256(value.encode()).hexdigest()[:24]
    return {"type": "thinking", "thinking": value, "signature": signature}


def message(content: list[dict[str, Any]], stop_reason: str | None = None,
            usage: dict[str, Any] | None = None, model: str = "claude-sonnet-5-5",
            stop_details: dict[str, Any] | None = None, output_tokens: int | None = None) -> Reply:
    """A 200 Messages answer. stop_reason defaults to tool_use when a tool is called, else
    end_turn; usage defaults to the prompt cache's figures and `output_tokens` (or an
    estimate from the content)."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    body = {"id": f"msg_{next(_ids):06d}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "stop_details": stop_details, "usage": usage}
    if output_tokens is not None:
        body["_output_tokens"] = output_tokens
    return Reply(200, body)


def refusal(category: str = "frontier_llm", explanation: str = "declined by the policy classifier",
            content: list[dict[str, Any]] | None = None) -> Reply:
    return message(content or [], stop_reason="refusal",
                   stop_details={"type": "refusal", "category": category, "explanation": explanation})


def cut(content: list[dict[str, Any]]) -> Reply:
    """An answer stopped at max_tokens: its last block is cut where the limit fell."""
    return message(content, stop_reason="max_tokens")


def error(status: int, kind: str, text_: str = "", headers: dict[str, str] | None = None,
          delay_s: float = 0.0) -> Reply:
    """An API error as Anthropic sends it, e.g. error(429, "rate_limit_error")."""
    body = {"type": "error", "error": {"type": kind, "message": text_ or kind.replace("_", " ")},
            "request_id": f"req_err_{next(_ids)}"}
    return Reply(status, body, headers or {}, delay_s)


def overloaded(retry_after_ms: int = 10) -> Reply:
    return error(529, "overloaded_error", "Overloaded",
                 {"x-should-retry": "true", "retry-after-ms": str(retry_after_ms)})


def timeout(seconds: float) -> Reply:
    """A reply that arrives only after `seconds`: longer than the client waits, a timeout."""
    return error(504, "timeout_error", "the fake waited on purpose", delay_s=seconds)


def invalid(message_: str) -> Reply:
    return error(400, "invalid_request_error", message_)


# ---- the rules ---------------------------------------------------------------------------

def _text_ok(block: dict[str, Any], where: str) -> str | None:
    value = block.get("text")
    if not isinstance(value, str) or not value:
        return f"{where}: text content blocks must be non-empty"
    if not value.strip():
        return f"{where}: text content blocks must contain non-whitespace text"
    return None


def _cache_problems(body: dict[str, Any]) -> list[str]:
    controls = []
    for tool in body.get("tools") or []:
        controls.append(tool.get("cache_control"))
    system = body.get("system")
    for block in system if isinstance(system, list) else []:
        controls.append(block.get("cache_control"))
    for message_ in body.get("messages") or []:
        content = message_.get("content")
        for block in content if isinstance(content, list) else []:
            controls.append(block.get("cache_control") if isinstance(block, dict) else None)
    controls = [c for c in controls if c is not None]
    problems = []
    if len(controls) > MAX_BREAKPOINTS:
        problems.append(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                        f"Found {len(controls)}.")
    ttls = []
    for control in controls:
        if not isinstance(control, dict) or control.get("type") != "ephemeral" or \
                control.get("ttl", "5m") not in ("5m", "1h"):
            problems.append(f"cache_control: invalid value {control!r}")
        else:
            ttls.append(control.get("ttl", "5m"))
    if "1h" in ttls and "5m" in ttls[:len(ttls) - ttls[::-1].index("1h") - 1]:
        problems.append("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block")
    return problems


def problems(body: dict[str, Any], *, model: str | None, issued: dict[str, str],
             thinking_of: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Every rule the real API enforces that a client can break. `issued` maps the signatures
    of thinking blocks the fake sent to their text; `thinking_of` maps a tool_use id to the
    thinking blocks sent before it."""
    out: list[str] = []
    if model is None or base_model(model) not in KNOWN_MODELS:
        return [f"model: {model!r} is not a model the API knows"]
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        out.append(f"max_tokens: expected a positive integer, got {max_tokens!r}")
    elif max_tokens > max_output_tokens(base_model(model)):
        out.append(f"max_tokens: {max_tokens} > {max_output_tokens(base_model(model))}, which is the "
                   f"maximum allowed number of output tokens for {model}")
    if body.get("stream"):
        out.append("stream: this fake answers non-streaming requests only")
    effort = (body.get("output_config") or {}).get("effort")
    if effort is not None and effort not in _EFFORTS:
        out.append(f"output_config.effort: Input should be one of {sorted(_EFFORTS)}")
    config = body.get("thinking")
    if isinstance(config, dict) and config.get("type") == "enabled":
        budget = config.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024 or (isinstance(max_tokens, int) and budget >= max_tokens):
            out.append("thinking.budget_tokens: must be >= 1024 and less than max_tokens")
    names = []
    for i, tool in enumerate(body.get("tools") or []):
        name = tool.get("name", "")
        if not _TOOL_NAME.match(name):
            out.append(f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            out.append(f"tools.{i}.input_schema: must be a JSON schema of type object")
        names.append(name)
    if len(set(names)) != len(names):
        out.append("tools: Tool names must be unique.")
    system = body.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            if block.get("type") != "text":
                out.append(f"system.{i}: only text blocks are allowed")
            elif (problem := _text_ok(block, f"system.{i}")):
                out.append(problem)
    elif system is not None and (not isinstance(system, str) or not system.strip()):
        out.append("system: text content blocks must contain non-whitespace text")
    out += _cache_problems(body)
    out += _message_problems(body.get("messages"), issued, thinking_of)
    return out


def _message_problems(messages: Any, issued: dict[str, str],
                      thinking_of: dict[str, list[dict[str, Any]]]) -> list[str]:
    if not isinstance(messages, list) or not messages:
        return ["messages: at least one message is required"]
    out: list[str] = []
    if messages[0].get("role") != "user":
        out.append("messages.0.role: the first message must use the \"user\" role")
    pending: set[str] = set()           # tool_use ids of the previous assistant turn, unanswered
    seen_ids: set[str] = set()
    last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    for i, message_ in enumerate(messages):
        role = message_.get("role")
        if role not in ("user", "assistant"):
            out.append(f"messages.{i}.role: Input should be 'user' or 'assistant'")
            continue
        if i and messages[i - 1].get("role") == role:
            out.append(f"messages.{i}: roles must alternate between \"user\" and \"assistant\"")
        content = message_.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        final_assistant = role == "assistant" and i == len(messages) - 1
        if not isinstance(content, list) or (not content and not final_assistant):
            out.append(f"messages.{i}: all messages must have non-empty content except for the "
                       f"optional final assistant message")
            continue
        answered: set[str] = set()
        seen_other = False
        for j, block in enumerate(content):
            where = f"messages.{i}.content.{j}"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                if (problem := _text_ok(block, where)):
                    out.append(problem)
                seen_other = True
            elif kind == "tool_use":
                if role != "assistant":
                    out.append(f"{where}: tool_use blocks may only appear in assistant messages")
                if block.get("id") in seen_ids:
                    out.append(f"{where}: tool_use ids must be unique")
                seen_ids.add(block.get("id"))
                if not isinstance(block.get("input"), dict):
                    out.append(f"{where}.input: Input should be a valid dictionary")
            elif kind == "tool_result":
                if role != "user":
                    out.append(f"{where}: tool_result blocks may only appear in user messages")
                elif block.get("tool_use_id") not in pending:
                    out.append(f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                               f"{block.get('tool_use_id')}. Each `tool_result` block must have a "
                               f"corresponding `tool_use` block in the previous message.")
                elif seen_other:
                    out.append(f"{where}: tool_result blocks must come before any other content "
                               f"in the user message")
                answered.add(block.get("tool_use_id"))
            elif kind in ("thinking", "redacted_thinking"):
                if role != "assistant":
                    out.append(f"{where}: thinking blocks may only appear in assistant messages")
                elif kind == "thinking" and issued.get(block.get("signature")) != block.get("thinking"):
                    out.append(f"{where}: Invalid `signature` in `thinking` block (thinking blocks "
                               f"must be passed back unchanged)")
            else:
                out.append(f"{where}.type: unknown content block type {kind!r}")
        if role == "user":
            if pending - answered:
                out.append(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                           f"immediately after: {', '.join(sorted(pending - answered))}. Each "
                           f"`tool_use` block must have a corresponding `tool_result` block in the next message.")
            pending = set()
        else:
            pending = {b.get("id") for b in content if isinstance(b, dict) and b.get("type") == "tool_use"}
            if i == last_assistant:
                given = [b for b in content if isinstance(b, dict) and b.get("type") == "thinking"]
                for tool_id in pending:
                    for needed in thinking_of.get(tool_id, []):
                        if needed not in given:
                            out.append(f"messages.{i}.content: Expected `thinking` or "
                                       f"`redacted_thinking`, but found `tool_use`. When thinking is "
                                       f"enabled, a final assistant message must start with a thinking block")
    if pending and messages[-1].get("role") == "assistant":
        pass  # a final assistant turn (prefill) may end in tool_use only when continuing; not ours
    return out


# ---- the server --------------------------------------------------------------------------

class FakeAnthropic(FakeServer):
    """The Messages API on 127.0.0.1. `credentials`, when given, are the only keys/tokens it
    accepts (x-api-key or Authorization: Bearer); `clock` drives the prompt cache's TTLs."""

    def __init__(self, script: Iterable[Script] = (), *, credentials: Iterable[str] = (),
                 clock: Callable[[], float] = time.monotonic, min_cache_tokens: int | None = None) -> None:
        super().__init__(script)
        self.credentials = set(credentials)
        self.cache = PromptCache(clock=clock)
        if min_cache_tokens is not None:
            self.cache.min_tokens = min_cache_tokens
        self._issued: dict[str, str] = {}
        self._thinking_of: dict[str, list[dict[str, Any]]] = {}

    def route(self, path: str) -> bool:
        return path.startswith("/v1/messages") or bool(_BEDROCK.match(path) or _VERTEX.match(path))

    def not_found(self, path: str) -> Reply:
        return error(404, "not_found_error", f"fake server: no route {path}")

    def script_exhausted(self) -> Reply:
        return invalid("fake server: the script has no reply left")

    @staticmethod
    def model_of(request: RecordedRequest) -> str | None:
        platform = _BEDROCK.match(request.path) or _VERTEX.match(request.path)
        if platform:
            from urllib.parse import unquote
            return unquote(platform["model"])
        return request.json.get("model")

    def _authorized(self, request: RecordedRequest) -> bool:
        given = request.headers.get("x-api-key") or request.headers.get("authorization", "")
        given = given.removeprefix("Bearer ")
        if not given:
            return False
        if given.startswith("AWS4-HMAC-SHA256"):   # a SigV4 signature: check the access key id
            return not self.credentials or any(f"Credential={c}/" in given for c in self.credentials)
        return not self.credentials or given in self.credentials

    def validate(self, request: RecordedRequest) -> Reply | None:
        if not self._authorized(request):
            return error(401, "authentication_error", "invalid x-api-key")
        try:
            body = request.json
        except ValueError:
            return invalid("the request body is not valid JSON")
        platform = request.path != "/v1/messages" and not request.path.startswith("/v1/messages?")
        allowed = _TOP_LEVEL | (_PLATFORM_KEYS if platform else set())
        if platform:
            if "model" in body:
                return invalid("model: Extra inputs are not permitted (the model is in the URL)")
            if "anthropic_version" not in body:
                return invalid("anthropic_version: Field required")
        elif "anthropic-version" not in request.headers:
            return invalid("anthropic-version: header is required")
        extra = sorted(set(body) - allowed)
        if extra:
            return invalid(f"{extra[0]}: Extra inputs are not permitted")
        found = problems(body, model=self.model_of(request), issued=self._issued, thinking_of=self._thinking_of)
        if found and found[0].startswith("model:"):
            return error(404, "not_found_error", found[0])
        return invalid(found[0]) if found else None

    def complete(self, request: RecordedRequest, reply: Reply) -> Reply:
        body = dict(reply.body)
        content = body.get("content") or []
        before: list[dict[str, Any]] = []
        for block in content:            # remember what a client must pass back unchanged
            if block.get("type") == "thinking":
                self._issued[block["signature"]] = block["thinking"]
                before.append(block)
            elif block.get("type") == "tool_use":
                self._thinking_of[block["id"]] = list(before)
        output = body.pop("_output_tokens", None)
        if body.get("usage") is None:
            usage = self.cache.usage(request.json)
            usage["output_tokens"] = output if output is not None else max(1, tokens_of(content))
            body["usage"] = usage
        else:
            self.cache.usage(request.json)
        body["model"] = self.model_of(request) or body.get("model")
        return Reply(200, body, reply.headers, reply.delay_s)
