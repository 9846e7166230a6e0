"""The `openai` researcher: any OpenAI-compatible Chat Completions endpoint with tool calls.

Hosted providers, vLLM, Ollama, llama.cpp, LM Studio: whatever serves `/v1/chat/completions`
with `tools`, through the official `openai` SDK (`pip install -e '.[openai]'`). The tools,
the prediction, the validation and every rule of the conversation are the claude
researcher's (conversation.py, tools.py); this module is how Chat Completions are written
and read. Settings under `openai:` in program.md:

- `model` (required), `base_url` (else OPENAI_BASE_URL, else api.openai.com), the key in the
  variable `api_key_env` names (OPENAI_API_KEY by default; a local endpoint needs none);
- `prices: {input, output, cached_input}` in USD per million tokens. A local endpoint
  (localhost, a loopback or private address) costs nothing unless prices say otherwise; a
  remote one must be given its prices, so that `max_usd` caps real dollars, not guesses.

Chat Completions has no cache breakpoints: providers that cache (OpenAI, vLLM's prefix cache)
reuse the longest prefix seen, so the prompt keeps its stable parts first, as claude's does.
Answers cut at the output limit (`finish_reason: length`) and refusals (`refusal`,
`content_filter`) are handled as conversation.py says.
"""
from __future__ import annotations

import ipaddress
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import urlparse

import openai

from agent.researchers import pricing
from agent.researchers.base import ResearcherError, Usage
from agent.researchers.conversation import Dialect, LLMResearcher, Turn
from agent.researchers.prompt import Part
from agent.researchers.settings import OpenAISettings, check_llm, settings_of
from agent.researchers.tool_specs import tools_for
from agent.researchers.tools import ToolCall, ToolResult

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_LOCAL_NAMES = ("localhost", "host.docker.internal")
_STOP = {"tool_calls": "tool_use", "function_call": "tool_use", "stop": "end_turn", "length": "max_tokens",
         "content_filter": "refusal"}


def is_local(url: str) -> bool:
    """Whether `url` points at this machine or a private network (a model you run yourself)."""
    host = (urlparse(url).hostname or "").lower()
    if host in _LOCAL_NAMES or host.endswith(".localhost") or host.endswith(".local"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


@dataclass
class _Conversation:
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]] = field(default_factory=list)


class ChatDialect(Dialect):
    sdk = openai
    provider = "openai-compatible"

    def __init__(self, client: Any, settings: OpenAISettings, base_url: str, price: pricing.ModelPrice) -> None:
        self.client, self.settings, self._price = client, settings, price
        # OpenAI's own API wants max_completion_tokens (its reasoning models refuse max_tokens);
        # the servers people run locally know max_tokens.
        self._limit = "max_completion_tokens" if urlparse(base_url).hostname == "api.openai.com" else "max_tokens"

    def start(self, system: str, parts: Sequence[Part], tool_names: Sequence[str]) -> _Conversation:
        tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                   "parameters": t["parameters"]}}
                 for t in tools_for(tuple(tool_names))]
        opening = "\n\n".join(p.text for p in parts if p.text.strip())
        return _Conversation(tools=tools, messages=[{"role": "system", "content": system},
                                                    {"role": "user", "content": opening}])

    def request(self, conversation: _Conversation, model: str) -> dict[str, Any]:
        return {"model": model, "messages": list(conversation.messages), "tools": conversation.tools,
                self._limit: self.settings.max_tokens}

    def send(self, request: dict[str, Any], timeout: float) -> tuple[Turn, dict[str, Any]]:
        response = self.client.chat.completions.create(**request, timeout=timeout)
        raw = response.model_dump(mode="json", exclude_none=True, warnings=False)
        if not response.choices:
            return Turn(calls=(), text="", stop="end_turn", usage=_usage(response.usage)), raw
        choice = response.choices[0]
        message = choice.message
        calls, sent = [], []
        for n, tool_call in enumerate(message.tool_calls or []):
            function = getattr(tool_call, "function", None)
            if function is None:
                continue
            call_id = tool_call.id or f"call_{n}"            # some local servers leave ids out
            arguments = function.arguments or "{}"
            problem, value = None, None
            try:
                value = json.loads(arguments)
            except ValueError as err:
                problem = f"the arguments are not valid JSON ({err}); send one JSON object"
            calls.append(ToolCall(call_id, function.name, value, problem))
            sent.append({"id": call_id, "type": "function",
                         "function": {"name": function.name, "arguments": arguments}})
        text = (message.content or "").strip()
        stop = _STOP.get(choice.finish_reason or "stop", choice.finish_reason or "end_turn")
        if calls and stop == "end_turn":
            stop = "tool_use"                                 # local servers often say "stop"
        refusal = ""
        if getattr(message, "refusal", None) or stop == "refusal":
            stop, refusal = "refusal", (message.refusal or f"finish_reason {choice.finish_reason}")
        assistant = {"role": "assistant", "content": text or None} | ({"tool_calls": sent} if sent else {})
        return Turn(calls=tuple(calls), text=text, stop=stop, usage=_usage(response.usage),
                    refusal=refusal, message=assistant), raw

    def extend(self, conversation: _Conversation, turn: Turn, results: Sequence[ToolResult], note: str) -> None:
        assistant = turn.message or {}
        if assistant.get("content") or assistant.get("tool_calls"):
            conversation.messages.append(assistant)
        conversation.messages += [{"role": "tool", "tool_call_id": r.call_id,
                                   "content": ("ERROR: " if r.is_error else "") + r.text} for r in results]
        if note:
            conversation.messages.append({"role": "user", "content": note})

    def price(self, model: str) -> pricing.ModelPrice:
        return self._price


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0)
    prompt = int(usage.prompt_tokens or 0)
    return Usage(input_tokens=max(0, prompt - cached), output_tokens=int(usage.completion_tokens or 0),
                 cache_read_input_tokens=cached)


class OpenAIResearcher(LLMResearcher):
    """Proposes experiments through an OpenAI-compatible endpoint (module docstring)."""

    name = "openai"

    def __init__(self, state_dir: Path | str, settings: OpenAISettings | Mapping[str, Any] | None = None, *,
                 client: Any = None, experiment_detail: Callable[[str], str] | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 env: Mapping[str, str] | None = None) -> None:
        typed = settings_of(OpenAISettings, settings, "openai", check_llm, ResearcherError)
        env = os.environ if env is None else env
        if not typed.model:
            raise ResearcherError("openai.model is not set: name the model your endpoint serves in "
                                  "program.md (e.g. openai: {model: qwen3-coder, base_url: "
                                  "http://127.0.0.1:8000/v1})")
        base_url = typed.base_url or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        local = is_local(base_url)
        key = env.get(typed.api_key_env) or None
        if key is None and not local:
            raise ResearcherError(f"the openai researcher needs {typed.api_key_env} set in the environment "
                                  f"for {base_url} (or openai.api_key_env naming the variable that holds it)")
        if typed.prices is not None:
            price = pricing.ModelPrice.of(typed.prices.input, typed.prices.output, typed.prices.cached_input)
        elif local:
            price = pricing.FREE     # a model you run yourself is not charged phantom dollars
        else:
            raise ResearcherError(f"openai.prices is not set for {base_url}: give its USD per million tokens "
                                  f"in program.md, e.g. openai: {{prices: {{input: 0.5, output: 1.5, "
                                  f"cached_input: 0.05}}}}, so that max_usd caps real dollars")
        if client is None:
            # A local server needs no key, but the SDK insists on one: any placeholder works.
            client = openai.OpenAI(api_key=key or "no-key-needed-locally", base_url=base_url,
                                   max_retries=0, timeout=typed.timeout_s)
        dialect = ChatDialect(client, typed, base_url, price)
        dialect.provider = "local" if local else (urlparse(base_url).hostname or "openai-compatible")
        super().__init__(state_dir, typed, dialect, experiment_detail=experiment_detail, sleep=sleep,
                         clock=clock, secrets=[key, getattr(client, "api_key", None)])
        self.hints = {401: f"check {typed.api_key_env} in the environment",
                      404: f"check openai.model ({typed.model}) and the base URL ({base_url})"}
        self.meter.note("endpoint", f"{base_url} ({'local, free' if price == pricing.FREE else 'priced'})")
