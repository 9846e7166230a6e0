"""The `claude` researcher: the Anthropic Messages API with tool use.

The conversation itself (tools, mistakes, refusals, cut answers, retries, caps) is
conversation.py's; this module is how the Messages API is written and read:

- the client is the SDK's own for `claude.provider`: `anthropic.Anthropic` (ANTHROPIC_API_KEY
  or ANTHROPIC_AUTH_TOKEN, ANTHROPIC_BASE_URL), `AnthropicBedrock` (AWS credentials or
  AWS_BEARER_TOKEN_BEDROCK, the region from claude.region or AWS_REGION) or
  `AnthropicVertex` (Google ADC, or GOOGLE_OAUTH_ACCESS_TOKEN; CLOUD_ML_REGION,
  ANTHROPIC_VERTEX_PROJECT_ID). Keys are only ever handed to that client;
- the prompt is cached in at most 4 breakpoints: the system prompt (which follows the tools,
  so it covers them), the incumbent's source with the test's setup, the closed history, and
  a moving breakpoint on the newest block, so each turn reads the previous ones from the
  cache. The stable ones live `claude.cache_ttl` (1h by default: an experiment usually
  takes longer than 5 minutes); the moving one 5 minutes;
- an answer is sent back as it came, thinking blocks untouched, except text blocks that
  are empty or whitespace only (the API refuses them in a request);
- `claude.effort` becomes `output_config.effort`.
"""
from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import anthropic

from agent.researchers import pricing
from agent.researchers.base import ResearcherError, Usage
from agent.researchers.conversation import Dialect, LLMResearcher, ProposalRejected, Turn
from agent.researchers.prompt import Part
from agent.researchers.settings import ClaudeSettings, check_claude, settings_of
from agent.researchers.tool_specs import tools_for
from agent.researchers.tools import ToolCall, ToolResult

__all__ = ["ClaudeResearcher", "ClaudeSettings", "ProposalRejected", "make_client"]

_MOVING = {"type": "ephemeral"}          # the newest block: read back within seconds
# Environment variables that hold credentials for one of the three clients.
_SECRET_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
               "AWS_BEARER_TOKEN_BEDROCK", "GOOGLE_OAUTH_ACCESS_TOKEN")


_NO_CREDENTIALS = ("the claude researcher needs ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) set in the "
                   "environment, or claude.provider bedrock | vertex in program.md (or choose "
                   "`researcher: optuna`)")


def make_client(settings: ClaudeSettings, env: Mapping[str, str] | None = None) -> Any:
    """The SDK's client for `settings.provider`, with the SDK's own credential conventions.
    Our retry loop counts every try, so the SDK's own retries are off."""
    env = os.environ if env is None else env
    common = {"max_retries": 0, "timeout": settings.timeout_s}
    if settings.base_url:
        common["base_url"] = settings.base_url
    try:
        if settings.provider == "bedrock":
            if not env.get("AWS_BEARER_TOKEN_BEDROCK") and importlib.util.find_spec("botocore") is None:
                # the SDK signs with AWS credentials through botocore, imported only at the first request
                raise ResearcherError("claude.provider bedrock signs requests with AWS credentials "
                                      "through botocore, which is not installed: pip install -e "
                                      "'.[bedrock]' (or set AWS_BEARER_TOKEN_BEDROCK to a Bedrock API key)")
            return anthropic.AnthropicBedrock(aws_region=settings.region, **common)
        if settings.provider == "vertex":
            token = env.get("GOOGLE_OAUTH_ACCESS_TOKEN") or None
            if token is None:
                try:
                    import google.auth  # noqa: F401  (the SDK's way to Application Default Credentials)
                except ImportError:
                    raise ResearcherError("claude.provider vertex needs Google credentials: pip install "
                                          "-e '.[vertex]' (Application Default Credentials), or set "
                                          "GOOGLE_OAUTH_ACCESS_TOKEN=$(gcloud auth print-access-token)") from None
            region = settings.region or env.get("CLOUD_ML_REGION")
            if not region:
                raise ResearcherError("claude.provider vertex needs a region: set claude.region in "
                                      "program.md or CLOUD_ML_REGION")
            project = settings.project_id or env.get("ANTHROPIC_VERTEX_PROJECT_ID")
            extra = {"project_id": project} if project else {}
            return anthropic.AnthropicVertex(region=region, access_token=token, **extra, **common)
        client = anthropic.Anthropic(**common)
    except ValueError as err:   # the SDK's word for missing configuration (a region, ...)
        raise ResearcherError(f"claude.provider {settings.provider}: {err}") from None
    except anthropic.AnthropicError as err:   # no key, token or profile the SDK could use
        raise ResearcherError(f"{_NO_CREDENTIALS} ({err})") from None
    if not (client.api_key or client.auth_token or getattr(client, "credentials", None)):
        raise ResearcherError(_NO_CREDENTIALS)
    return client


def _block_param(block: Any) -> dict[str, Any] | None:
    """A response block as a request param, passed back unchanged (thinking signatures
    included, as the API requires in a tool loop); None for a text block with nothing in it."""
    kind = block.type
    if kind == "text":
        return {"type": "text", "text": block.text} if block.text.strip() else None
    if kind == "tool_use":
        tool_input = block.input if isinstance(block.input, dict) else {}
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return block.model_dump(mode="json", exclude_none=True, warnings=False)


def _usage(usage: Any) -> Usage:
    split = getattr(usage, "cache_creation", None)
    return Usage(input_tokens=int(usage.input_tokens or 0), output_tokens=int(usage.output_tokens or 0),
                 cache_read_input_tokens=int(usage.cache_read_input_tokens or 0),
                 cache_creation_input_tokens=int(usage.cache_creation_input_tokens or 0),
                 cache_creation_1h_input_tokens=int(getattr(split, "ephemeral_1h_input_tokens", 0) or 0))


@dataclass
class _Conversation:
    system: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]] = field(default_factory=list)


class AnthropicDialect(Dialect):
    sdk = anthropic

    def __init__(self, client: Any, settings: ClaudeSettings) -> None:
        self.client = client.with_options(max_retries=0) if hasattr(client, "with_options") else client
        self.settings = settings
        self.provider = settings.provider
        self._stable = {"type": "ephemeral"} | ({"ttl": "1h"} if settings.cache_ttl == "1h" else {})

    def start(self, system: str, parts: Sequence[Part], tool_names: Sequence[str]) -> _Conversation:
        tools = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                 for t in tools_for(tuple(tool_names))]
        content = [{"type": "text", "text": p.text} | ({"cache_control": self._stable} if p.stable else {})
                   for p in parts if p.text.strip()]
        return _Conversation(system=[{"type": "text", "text": system, "cache_control": self._stable}],
                             tools=tools, messages=[{"role": "user", "content": content}])

    def request(self, conversation: _Conversation, model: str) -> dict[str, Any]:
        last = conversation.messages[-1]
        newest = {**last["content"][-1]}
        newest.setdefault("cache_control", _MOVING)
        messages = [*conversation.messages[:-1],
                    {"role": last["role"], "content": [*last["content"][:-1], newest]}]
        body = {"model": model, "max_tokens": self.settings.max_tokens, "system": conversation.system,
                "tools": conversation.tools, "messages": messages}
        if self.settings.effort:
            body["output_config"] = {"effort": self.settings.effort}
        return body

    def send(self, request: dict[str, Any], timeout: float) -> tuple[Turn, dict[str, Any]]:
        response = self.client.messages.create(**request, timeout=timeout)
        blocks = [b for b in (_block_param(block) for block in response.content) if b is not None]
        calls = tuple(ToolCall(b.id, b.name, b.input) for b in response.content if b.type == "tool_use")
        text = "\n".join(b.text.strip() for b in response.content if b.type == "text" and b.text.strip())
        details = getattr(response, "stop_details", None)
        refusal = ""
        if response.stop_reason == "refusal":
            category = getattr(details, "category", None) or "no category"
            explanation = getattr(details, "explanation", None) or "no explanation"
            refusal = f"{category}: {explanation}"
        turn = Turn(calls=calls, text=text, stop=response.stop_reason or "end_turn",
                    usage=_usage(response.usage), refusal=refusal, message=blocks)
        return turn, response.model_dump(mode="json", exclude_none=True, warnings=False)

    def extend(self, conversation: _Conversation, turn: Turn, results: Sequence[ToolResult], note: str) -> None:
        reply: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": r.call_id, "content": r.text}
                                       | ({"is_error": True} if r.is_error else {}) for r in results]
        if note:
            reply.append({"type": "text", "text": note})
        blocks = turn.message or []
        if any(b["type"] in ("text", "tool_use") for b in blocks):
            conversation.messages += [{"role": "assistant", "content": blocks}, {"role": "user", "content": reply}]
        elif reply:   # nothing visible to answer: keep the alternation by extending our last turn
            last = conversation.messages[-1]
            conversation.messages[-1] = {"role": "user", "content": [*last["content"], *reply]}

    def price(self, model: str) -> pricing.ModelPrice:
        return pricing.price_for(model)


class ClaudeResearcher(LLMResearcher):
    """Proposes experiments by talking to Claude (module docstring; conversation.py)."""

    name = "claude"

    def __init__(self, state_dir: Path | str, settings: ClaudeSettings | Mapping[str, Any] | None = None, *,
                 client: Any = None, experiment_detail: Callable[[str], str] | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 env: Mapping[str, str] | None = None) -> None:
        typed = settings_of(ClaudeSettings, settings, "claude", check_claude, ResearcherError)
        env = os.environ if env is None else env
        client = client if client is not None else make_client(typed, env)
        secrets = [env.get(name) for name in _SECRET_ENV] + [
            getattr(client, attr, None) for attr in ("api_key", "auth_token", "access_token", "aws_secret_key",
                                                     "aws_session_token")]
        super().__init__(state_dir, typed, AnthropicDialect(client, typed), experiment_detail=experiment_detail,
                         sleep=sleep, clock=clock, secrets=[s for s in secrets if isinstance(s, str)])
        self.hints = {401: "check the credentials in the environment (ANTHROPIC_API_KEY, ...)",
                      404: f"check claude.model ({typed.model}) and claude.base_url in program.md"}
        for model in filter(None, (typed.model, typed.fallback_model)):
            if pricing.lookup(model) is None:
                self.meter.note("price_note", f"{model} is not in agent/researchers/pricing.py; "
                                              f"priced at the dearest rates")
