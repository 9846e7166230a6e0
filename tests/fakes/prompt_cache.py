"""A model of Anthropic's prompt cache, so the fake's usage figures behave like the API's.

A request is a sequence of blocks (tools, then system blocks, then each message's content
blocks). A block carrying `cache_control` is a breakpoint: the prefix up to it is written to
the cache (for its TTL) unless already there. A later request reads the longest cached prefix
that ends at a block boundary at most `LOOKBACK` blocks before one of its breakpoints. Usage
then splits the prompt as the API does: `cache_read_input_tokens` (the prefix found),
`cache_creation_input_tokens` (from there to the last breakpoint, by TTL) and `input_tokens`
(after the last breakpoint). Tokens are estimated at 4 characters each; prefixes shorter
than `MIN_TOKENS` are never cached, as on the real API.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

LOOKBACK = 20
MIN_TOKENS = 1024
TTL_S = {"5m": 300.0, "1h": 3600.0}


def tokens_of(value: Any) -> int:
    """About 4 characters a token, as Anthropic's tokenizer does on English and code."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return max(1, len(text) // 4)


def _strip(block: Any) -> Any:
    return {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block


def blocks_of(body: dict[str, Any]) -> list[tuple[str, Any, str | None]]:
    """(role, block without cache_control, breakpoint TTL or None), in the order the API caches."""
    out: list[tuple[str, Any, str | None]] = []

    def ttl(block: Any) -> str | None:
        control = block.get("cache_control") if isinstance(block, dict) else None
        return (control.get("ttl") or "5m") if isinstance(control, dict) else None

    for tool in body.get("tools") or []:
        out.append(("tools", _strip(tool), ttl(tool)))
    system = body.get("system")
    for block in ([{"type": "text", "text": system}] if isinstance(system, str) else system or []):
        out.append(("system", _strip(block), ttl(block)))
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in ([{"type": "text", "text": content}] if isinstance(content, str) else content or []):
            out.append((message.get("role", "?"), _strip(block), ttl(block)))
    return out


@dataclass
class PromptCache:
    clock: Callable[[], float] = time.monotonic
    min_tokens: int = MIN_TOKENS
    entries: dict[str, tuple[float, str]] = field(default_factory=dict)   # prefix hash -> (expiry, ttl)

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        """The usage block of the API's answer to `body`, updating the cache as the API would."""
        now = self.clock()
        blocks = blocks_of(body)
        hashes, sizes, running = [], [], hashlib.sha256()
        for role, block, _ in blocks:
            running.update(json.dumps([role, block], sort_keys=True).encode())
            hashes.append(running.hexdigest())
            sizes.append(tokens_of(block))
        prefix = [0]
        for size in sizes:
            prefix.append(prefix[-1] + size)
        breakpoints = [i for i, (_, _, ttl) in enumerate(blocks) if ttl]
        hit = -1                                   # index of the last block read from the cache
        for b in breakpoints:
            for j in range(b, max(-1, b - LOOKBACK), -1):
                entry = self.entries.get(hashes[j])
                if entry and entry[0] > now:
                    hit = max(hit, j)
                    break
        if hit >= 0:
            _, ttl = self.entries[hashes[hit]]
            self.entries[hashes[hit]] = (now + TTL_S[ttl], ttl)   # a read refreshes the entry
        written = {"5m": 0, "1h": 0}
        start = hit + 1
        for b in breakpoints:
            if b < start:
                continue
            ttl = blocks[b][2]
            if prefix[b + 1] >= self.min_tokens:
                written[ttl] += prefix[b + 1] - prefix[start]
                self.entries[hashes[b]] = (now + TTL_S[ttl], ttl)
                start = b + 1
        read = prefix[hit + 1]
        created = written["5m"] + written["1h"]
        return {"input_tokens": prefix[-1] - read - created, "output_tokens": 0,
                "cache_read_input_tokens": read, "cache_creation_input_tokens": created,
                "cache_creation": {"ephemeral_5m_input_tokens": written["5m"],
                                   "ephemeral_1h_input_tokens": written["1h"]}}
