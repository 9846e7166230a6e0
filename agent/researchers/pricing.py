"""Dollar prices of Claude models: the one place they are written down.

Prices are USD per million tokens, from the model pages and the pricing page of
platform.claude.com (read 2026). `cache_write` is the 5-minute ephemeral write price (what
`cache_control: {"type": "ephemeral"}` buys, 1.25 x input); `cache_write_1h` the 1-hour one
(`"ttl": "1h"`, 2 x input); `cache_read` is a cache hit (0.1 x input). When Anthropic
changes a price, edit `PRICES` and nothing else.

Bedrock and Vertex model ids (`us.anthropic.claude-sonnet-4-5-20250929-v1:0`,
`claude-sonnet-4-5@20250929`) cost what their Anthropic alias costs. Endpoints this table
does not know (the `openai` researcher's) are priced from program.md (`ModelPrice.of`).

An unknown model is priced at `FALLBACK`, the most expensive rate of every kind in the table,
so that a budget cap errs on the side of stopping early rather than overspending.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

PER_MILLION = 1_000_000


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens of each kind. `long_prompt`, when set, replaces every rate for a
    request whose prompt (input + cache reads + cache writes) exceeds `long_prompt_threshold`."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    cache_write_1h: float
    long_prompt: "ModelPrice | None" = None
    long_prompt_threshold: int = 0

    @classmethod
    def anthropic(cls, input: float, output: float, cache_read: float, **long: object) -> "ModelPrice":
        """Anthropic's rule: a 5-minute write is 1.25 x input, a 1-hour write 2 x input."""
        return cls(input=input, output=output, cache_write=input * 1.25, cache_read=cache_read,
                   cache_write_1h=input * 2, **long)

    @classmethod
    def of(cls, input: float, output: float, cached_input: float | None = None) -> "ModelPrice":
        """A price given in program.md: a cache hit at `cached_input` (else at input), and no
        separate cache writes (OpenAI-compatible endpoints do not bill them)."""
        hit = input if cached_input is None else cached_input
        return cls(input=input, output=output, cache_write=input, cache_read=hit, cache_write_1h=input)

    def cost_usd(
        self,
        input_tokens: int,
        output_tokens: int,
        cache_read_input_tokens: int = 0,
        cache_creation_input_tokens: int = 0,
        cache_creation_1h_input_tokens: int = 0,
    ) -> float:
        """The dollar cost of ONE request with these token counts. `cache_creation_input_tokens`
        counts every cache write; `cache_creation_1h_input_tokens` says how many of them were
        1-hour writes (the rest were 5-minute ones)."""
        prompt = input_tokens + cache_read_input_tokens + cache_creation_input_tokens
        rate = self
        if self.long_prompt is not None and prompt > self.long_prompt_threshold:
            rate = self.long_prompt
        hour = min(cache_creation_1h_input_tokens, cache_creation_input_tokens)
        return (
            input_tokens * rate.input
            + output_tokens * rate.output
            + cache_read_input_tokens * rate.cache_read
            + (cache_creation_input_tokens - hour) * rate.cache_write
            + hour * rate.cache_write_1h
        ) / PER_MILLION


_OPUS_4_5_TO_5 = ModelPrice.anthropic(input=5.0, output=25.0, cache_read=0.50)
_SONNET_4 = ModelPrice.anthropic(input=3.0, output=15.0, cache_read=0.30)
_SONNET_5 = ModelPrice.anthropic(input=2.0, output=10.0, cache_read=0.20)
_FABLE_5 = ModelPrice.anthropic(input=10.0, output=50.0, cache_read=1.00)
_FABLE_5_1 = ModelPrice.anthropic(input=10.0, output=50.0, cache_read=0.25)

PRICES: Mapping[str, ModelPrice] = MappingProxyType({
    "claude-fable-5-1": _FABLE_5_1,
    "claude-mythos-5-1": _FABLE_5_1,
    "claude-fable-5": _FABLE_5,
    "claude-mythos-5": _FABLE_5,
    "claude-opus-5-5": ModelPrice.anthropic(input=4.0, output=20.0, cache_read=0.20),
    "claude-opus-5": _OPUS_4_5_TO_5,
    "claude-opus-4-8": _OPUS_4_5_TO_5,
    "claude-opus-4-7": _OPUS_4_5_TO_5,
    "claude-opus-4-6": _OPUS_4_5_TO_5,
    "claude-opus-4-5": _OPUS_4_5_TO_5,
    # Sonnet 5.5 cache reads were reported cut to $0.10 in Oct 2026; we keep the page's
    # $0.20 until confirmed: overestimating keeps the budget cap on the safe side.
    "claude-sonnet-5-5": _SONNET_5,
    "claude-sonnet-5": _SONNET_5,
    "claude-sonnet-4-6": _SONNET_4,
    "claude-sonnet-4-5": _SONNET_4,
    "claude-sonnet-4": _SONNET_4,
    "claude-haiku-5-5": ModelPrice.anthropic(
        input=0.10, output=0.50, cache_read=0.01,
        long_prompt=ModelPrice.anthropic(input=0.50, output=2.50, cache_read=0.05),
        long_prompt_threshold=100_000,
    ),
    "claude-haiku-4-5": ModelPrice.anthropic(input=1.0, output=5.0, cache_read=0.10),
})

FALLBACK = ModelPrice(
    input=max(p.input for p in PRICES.values()),
    output=max(p.output for p in PRICES.values()),
    cache_write=max(p.cache_write for p in PRICES.values()),
    cache_read=max(p.cache_read for p in PRICES.values()),
    cache_write_1h=max(p.cache_write_1h for p in PRICES.values()),
)
FREE = ModelPrice(input=0.0, output=0.0, cache_write=0.0, cache_read=0.0, cache_write_1h=0.0)

# Dated snapshots ("claude-sonnet-4-5-20250929", Vertex's "...@20250929"), context variants
# ("...[1m]") and Bedrock ids ("us.anthropic.claude-...-v1:0") cost the same as their alias.
_SUFFIX = re.compile(r"(-v\d+(:\d+)?)?([-@]\d{8})?(\[[^\]]*\])?(-v\d+(:\d+)?)?$")
_PLATFORM_PREFIX = re.compile(r"^(?:[a-z]+\.)?anthropic\.")


def lookup(model: str) -> ModelPrice | None:
    """The price of `model`, or None when the table does not know it."""
    bare = _PLATFORM_PREFIX.sub("", model)
    return PRICES.get(model) or PRICES.get(bare) or PRICES.get(_SUFFIX.sub("", bare))


def price_for(model: str) -> ModelPrice:
    """The price of `model`; `FALLBACK` (the dearest rates) when it is unknown."""
    return lookup(model) or FALLBACK


def cost_usd(
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_read_input_tokens: int = 0,
    cache_creation_input_tokens: int = 0,
    cache_creation_1h_input_tokens: int = 0,
) -> float:
    """The dollar cost of one request to `model` (see `ModelPrice.cost_usd`)."""
    return price_for(model).cost_usd(
        input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens,
        cache_creation_1h_input_tokens,
    )
