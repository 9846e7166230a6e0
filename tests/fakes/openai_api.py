"""A strict local fake of an OpenAI-compatible Chat Completions endpoint (POST /v1/chat/completions).

It checks requests as OpenAI's API does where a client can go wrong: a model it serves;
messages in known roles; every assistant `tool_calls` answered by `tool` messages (one per
id, before anything else) and no `tool` message answering an unknown id; assistant content
present unless it calls tools; tool definitions of type function with an object schema;
`max_tokens` and `max_completion_tokens` not both. A violation is answered 400 in OpenAI's
error shape and listed in `fake.rejections`. Usage counts prompt tokens (4 characters a
token) with OpenAI's automatic prefix caching (`prompt_tokens_details.cached_tokens`, in
128-token steps past 1024 tokens). Replies: `completion`, `call`, `refused`, `cut`, `error`.
"""
from __future__ import annotations

import itertools
import json
import re
from typing import Any, Iterable

from tests.fakes.prompt_cache import tokens_of
from tests.fakes.server import FakeServer, RecordedRequest, Reply, Script

_ids = itertools.count(1)
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_TOP_LEVEL = {"model", "messages", "tools", "tool_choice", "max_tokens", "max_completion_tokens",
              "temperature", "top_p", "stop", "seed", "parallel_tool_calls", "reasoning_effort",
              "stream", "n", "user", "metadata", "store", "prompt_cache_key", "response_format"}


def call(name: str, arguments: Any, id: str | None = None) -> dict[str, Any]:
    """A tool call; `arguments` is JSON-encoded unless given as a string already (cut ones are)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": id or f"call_{next(_ids):04d}", "type": "function", "function": {"name": name, "arguments": text}}


def completion(content: str | None = None, tool_calls: list[dict[str, Any]] | None = None,
               finish_reason: str | None = None, refusal: str | None = None,
               completion_tokens: int | None = None) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = finish_reason or ("tool_calls" if tool_calls else "stop")
    body = {"id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": 1_800_000_000,
            "model": "", "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": None}
    if completion_tokens is not None:
        body["_completion_tokens"] = completion_tokens
    return Reply(200, body)


def refused(text: str = "I can't help with that.") -> Reply:
    return completion(content=None, refusal=text)


def cut(content: str | None = None, tool_calls: list[dict[str, Any]] | None = None) -> Reply:
    """An answer stopped at the output limit (finish_reason "length")."""
    return completion(content, tool_calls, finish_reason="length")


def error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
          headers: dict[str, str] | None = None, delay_s: float = 0.0) -> Reply:
    return Reply(status, {"error": {"message": message, "type": kind, "param": None, "code": code}},
                 headers or {}, delay_s)


def problems(body: dict[str, Any], models: set[str]) -> list[str]:
    out = []
    extra = sorted(set(body) - _TOP_LEVEL)
    if extra:
        out.append(f"Unrecognized request argument supplied: {extra[0]}")
    if body.get("model") not in models:
        return [f"The model `{body.get('model')}` does not exist or you do not have access to it."]
    if "max_tokens" in body and "max_completion_tokens" in body:
        out.append("max_tokens and max_completion_tokens cannot both be set")
    for i, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") or {}
        if tool.get("type") != "function" or not _NAME.match(function.get("name", "")):
            out.append(f"Invalid 'tools[{i}]': expected a function with a valid name")
        elif not isinstance(function.get("parameters", {"type": "object"}), dict) or \
                function.get("parameters", {}).get("type", "object") != "object":
            out.append(f"Invalid schema for function '{function['name']}': schema must be a JSON Schema of 'type: \"object\"'")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return out + ["[] is too short - 'messages'"]
    pending: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            out.append(f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'tool'.")
            continue
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                out.append(f"Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                           f"message with 'tool_calls' (messages[{i}], id {message.get('tool_call_id')!r}).")
            pending.discard(message.get("tool_call_id"))
            if not isinstance(message.get("content"), str):
                out.append(f"messages[{i}].content: a tool message needs string content")
            continue
        if pending:
            out.append(f"An assistant message with 'tool_calls' must be followed by tool messages responding to "
                       f"each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                       f"{', '.join(sorted(pending))}")
            pending = set()
        content = message.get("content")
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if content is None and not calls:
                out.append(f"messages[{i}]: an assistant message needs content or tool_calls")
            for tool_call in calls:
                function = tool_call.get("function") or {}
                if tool_call.get("type") != "function" or not tool_call.get("id") or \
                        not isinstance(function.get("arguments"), str):
                    out.append(f"messages[{i}].tool_calls: each needs an id, type function and string arguments")
                pending.add(tool_call.get("id"))
        elif not isinstance(content, str) or not content:
            out.append(f"Invalid 'messages[{i}].content': string too short or not a string")
    if pending:
        out.append(f"The following tool_call_ids did not have response messages: {', '.join(sorted(pending))}")
    return out


class FakeOpenAI(FakeServer):
    """Chat Completions on 127.0.0.1 (`url` ends in /v1). `models` are those it serves;
    `key`, when given, the only bearer token it accepts."""

    def __init__(self, script: Iterable[Script] = (), *, models: Iterable[str] = ("qwen3-coder",),
                 key: str | None = None) -> None:
        super().__init__(script)
        self.models = set(models)
        self.key = key
        self._prefixes: set[str] = set()

    @property
    def url(self) -> str:
        return super().url + "/v1"

    def route(self, path: str) -> bool:
        return path == "/v1/chat/completions"

    def not_found(self, path: str) -> Reply:
        return error(404, f"Invalid URL (POST {path})", code="unknown_url")

    def script_exhausted(self) -> Reply:
        return error(400, "fake server: the script has no reply left")

    def validate(self, request: RecordedRequest) -> Reply | None:
        auth = request.headers.get("authorization", "")
        if self.key is not None and auth != f"Bearer {self.key}":
            return error(401, "Incorrect API key provided.", code="invalid_api_key")
        try:
            body = request.json
        except ValueError:
            return error(400, "We could not parse the JSON body of your request.")
        found = problems(body, self.models)
        if found and found[0].startswith("The model"):
            return error(404, found[0], code="model_not_found")
        return error(400, found[0]) if found else None

    def _cached(self, body: dict[str, Any]) -> tuple[int, int]:
        """(prompt tokens, cached tokens): the longest whole-message prefix seen before."""
        messages = [json.dumps([body.get("tools")])] + [json.dumps(m, sort_keys=True) for m in body["messages"]]
        sizes = [tokens_of(m) for m in messages]
        cached, running = 0, 0
        key = ""
        for text, size in zip(messages, sizes):
            key = str(hash((key, text)))
            if key in self._prefixes:
                running += size
                cached = running
            else:
                running += size
            self._prefixes.add(key)
        total = sum(sizes)
        cached = cached // 128 * 128 if cached >= 1024 else 0
        return total, min(cached, total)

    def complete(self, request: RecordedRequest, reply: Reply) -> Reply:
        body = dict(reply.body)
        prompt, cached = self._cached(request.json)
        produced = body.pop("_completion_tokens", None)
        message = body["choices"][0]["message"]
        if produced is None:
            produced = max(1, tokens_of(json.dumps(message)))
        if body.get("usage") is None:
            body["usage"] = {"prompt_tokens": prompt, "completion_tokens": produced,
                             "total_tokens": prompt + produced,
                             "prompt_tokens_details": {"cached_tokens": cached}}
        body["model"] = request.json.get("model")
        return Reply(200, body, reply.headers, reply.delay_s)
