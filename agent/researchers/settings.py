"""The settings of the LLM researchers (`claude:` and `openai:` in program.md), typed.

Each setting is declared once here, as a `Field` (its kind, bounds, whether null is allowed);
agent/program.py builds program.md's parsers from these declarations, so a bad value is
reported like every other field, with the file, the line and the fix
(``program.md:31: field 'claude.cache_ttl': expected one of 5m, 1h, got '2h'``).
The researchers receive the typed `ClaudeSettings` / `OpenAISettings`. Nothing here imports
an SDK: validating program.md never loads anthropic or openai.

Caps of None mean no cap. Prices are USD per million tokens.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

DEFAULT_CLAUDE_MODEL = "claude-sonnet-5-5"   # the one place the default model is named
NONSTREAMING_MAX_TOKENS = 21_333             # above this the SDK demands streaming (10-minute rule)


@dataclass(frozen=True)
class Field:
    """One setting: what program.md's parser accepts for it."""

    kind: str                          # "text" | "int" | "number" | "choice" | "prices"
    minimum: float | None = None
    optional: bool = False             # null is accepted (no cap, not set)
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prices:
    """USD per million tokens, for endpoints the price table does not know."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None  # a prompt-cache hit; None: charged as input


@dataclass(frozen=True)
class LLMSettings:
    """What every LLM researcher has: a model, per-call and per-night caps, retries."""

    model: str = ""
    max_tokens: int = 16_000          # per API call (one turn), thinking included
    max_turns: int = 24               # API calls per proposal before it is rejected
    max_usd: float | None = 20.0      # whole run, across restarts
    max_tokens_total: int | None = None  # input + output + cache reads + cache writes
    fallback_model: str | None = None # used after max_refusals refusals in a row
    max_refusals: int = 2             # refused conversations in a row before the fallback / a stop
    timeout_s: float = 600.0          # one API call; never past the night's deadline
    api_tries: int = 40               # tries per call on 429 / 5xx / timeouts / connection errors
    patience_s: float = 1800.0        # the longest one call waits out an outage before the loop stops
    retry_base_s: float = 4.0         # backoff base * 2**(try-1), capped at retry_max_s,
    retry_max_s: float = 120.0        # unless the server says how long to wait
    max_brief_chars: int = 60_000     # safety net: a longer brief is clipped (head + tail)


@dataclass(frozen=True)
class ClaudeSettings(LLMSettings):
    """`claude:` in program.md."""

    model: str = DEFAULT_CLAUDE_MODEL
    provider: str = "anthropic"       # anthropic | bedrock | vertex: which SDK client
    base_url: str | None = None       # default: the SDK's (ANTHROPIC_BASE_URL, ...)
    region: str | None = None         # bedrock: AWS region; vertex: its region (or env)
    project_id: str | None = None     # vertex: the Google Cloud project (or env)
    effort: str | None = None         # output_config.effort; None: the model's default
    cache_ttl: str = "1h"             # the stable prefix's cache lifetime: 5m | 1h


@dataclass(frozen=True)
class OpenAISettings(LLMSettings):
    """`openai:` in program.md: any OpenAI-compatible Chat Completions endpoint."""

    model: str | None = None          # required: the name the endpoint serves
    max_tokens: int = 8_192
    base_url: str | None = None       # default: OPENAI_BASE_URL, else api.openai.com
    api_key_env: str = "OPENAI_API_KEY"  # the variable holding the key (never program.md)
    prices: Prices | None = None      # None: free on a local endpoint, required on a remote one


_COMMON: dict[str, Field] = {
    "model": Field("text"),
    "max_tokens": Field("int", 1),
    "max_turns": Field("int", 1),
    "max_usd": Field("number", 0, optional=True),
    "max_tokens_total": Field("int", 1, optional=True),
    "fallback_model": Field("text", optional=True),
    "max_refusals": Field("int", 1),
    "timeout_s": Field("number", 0.01),
    "api_tries": Field("int", 1),
    "patience_s": Field("number", 0),
    "retry_base_s": Field("number", 0),
    "retry_max_s": Field("number", 0),
    "max_brief_chars": Field("int", 2_000),
}
CLAUDE_FIELDS: dict[str, Field] = _COMMON | {
    "provider": Field("choice", choices=("anthropic", "bedrock", "vertex")),
    "base_url": Field("text", optional=True),
    "region": Field("text", optional=True),
    "project_id": Field("text", optional=True),
    "effort": Field("choice", optional=True, choices=("low", "medium", "high", "xhigh", "max")),
    "cache_ttl": Field("choice", choices=("5m", "1h")),
}
OPENAI_FIELDS: dict[str, Field] = _COMMON | {
    "model": Field("text", optional=True),   # no default model: the endpoint decides what exists
    "base_url": Field("text", optional=True),
    "api_key_env": Field("text"),
    "prices": Field("prices", optional=True),
}
PRICE_FIELDS: dict[str, Field] = {
    "input": Field("number", 0), "output": Field("number", 0),
    "cached_input": Field("number", 0, optional=True),
}


def check_llm(settings: LLMSettings) -> list[tuple[str, str]]:
    """Cross-field problems as (field, message); the single-field ones are the parsers'."""
    problems = []
    if settings.fallback_model is not None and settings.fallback_model == settings.model:
        problems.append(("fallback_model", f"is the same as model ({settings.model}); name another "
                                           f"model or remove fallback_model"))
    return problems


def check_claude(settings: ClaudeSettings) -> list[tuple[str, str]]:
    problems = check_llm(settings)
    if settings.max_tokens > NONSTREAMING_MAX_TOKENS:
        problems.append(("max_tokens", f"at most {NONSTREAMING_MAX_TOKENS} per turn (the SDK requires "
                                       f"streaming above), got {settings.max_tokens}"))
    return problems


S = TypeVar("S", bound=LLMSettings)


def settings_of(cls: type[S], raw: "S | Mapping[str, Any] | None", section: str,
                check: Callable[[S], list[tuple[str, str]]] = check_llm,
                error: Callable[[str], Exception] = ValueError) -> S:
    """Typed settings from an instance or a plain mapping (tests, notebooks). program.md's
    own values arrive typed already; this only names unknown keys and cross-field problems,
    as `<section>.<key>: ...`."""
    if isinstance(raw, cls):
        settings = raw
    else:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw or {}) - known)
        if unknown:
            raise error(f"{section}.{unknown[0]}: unknown setting; known: {', '.join(sorted(known))}")
        values = dict(raw or {})
        if isinstance(values.get("prices"), Mapping):
            values["prices"] = Prices(**values["prices"])
        settings = cls(**values)
    for name, message in check(settings):
        raise error(f"{section}.{name}: {message}")
    return settings
