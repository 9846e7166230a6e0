"""The `claude` researcher: the Anthropic Messages API with tool use.

Each proposal is a fresh, bounded conversation: a cached stable prefix (tools, then a system
prompt holding the program prose), the incumbent source (cached: it changes only on a keep),
then this experiment's facts and the compact ledger summary. The model reads and edits an
in-memory draft of the target (`claude_tools.Workbench`) and ends by calling `submit` with a
pre-registered prediction. Mistakes (bad tool input, edits that do not apply, edits outside
the target, refusals, empty answers) are answered as errors, counted, and never applied.

Outcomes for the loop:
- a `Proposal` (its `extra` holds turns, mistake counts, tokens, dollars, the transcript path);
- `ProposalRejected`: this experiment is invalid (no usable prediction after one return, or no
  valid submission within `max_turns`); record it and go on;
- `ResearcherError`: stop cleanly (budget cap reached, API unavailable after retries, bad key).

Usage (tokens, dollars, mistakes) accumulates in `state_dir/usage.json`, so a resumed run
keeps counting toward its caps. The API key is only ever handed to the SDK client.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import anthropic

from agent.researchers import pricing
from agent.researchers import base
from agent.researchers.base import Proposal, ResearchContext, Researcher, ResearcherError, Usage
from agent.researchers.claude_tools import TOOLS, Submission, ToolError, Workbench
from agent.researchers.usage import USAGE_FIELDS, UsageMeter

DEFAULT_MODEL = "claude-sonnet-5-5"   # the one place the default model is named
NONSTREAMING_MAX_TOKENS = 21_333      # above this the SDK demands streaming (10-minute rule)
_RETRYABLE_STATUS = {408, 409, 429}   # plus every 5xx (500, 503, 529 overloaded, ...)
_CACHE = {"type": "ephemeral"}


@dataclass(frozen=True)
class ClaudeSettings:
    """`claude:` in program.md. Caps of None mean no cap."""

    model: str = DEFAULT_MODEL
    max_tokens: int = 16_000          # per API call (one turn), thinking included
    max_turns: int = 24               # API calls per proposal before it is rejected
    max_usd: float | None = 20.0      # whole run, across restarts
    max_tokens_total: int | None = None  # input + output + cache reads + cache writes
    api_tries: int = 6                # our own tries per call, on 429 / 5xx / connection errors
    retry_base_s: float = 4.0         # backoff: base * 2**(try-1), capped at retry_max_s
    retry_max_s: float = 120.0
    sdk_max_retries: int = 2          # the SDK's own quick retries inside each of our tries
    timeout_s: float = 600.0
    max_summary_chars: int = 24_000   # the ledger summary is clipped to this (head + tail)

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> "ClaudeSettings":
        """Validated settings; an unknown or ill-typed field is an error naming it."""
        values: dict[str, Any] = {}
        for key, value in (raw or {}).items():
            if key not in _SETTING_TYPES:
                raise ResearcherError(f"program.md claude.{key}: unknown setting; known: {', '.join(_SETTING_TYPES)}")
            kind, minimum, optional = _SETTING_TYPES[key]
            if value is None and optional:
                values[key] = None
                continue
            if kind is str:
                ok = isinstance(value, str) and bool(value.strip())
            else:
                ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and value >= minimum
                      and (kind is float or float(value).is_integer()))
            if not ok:
                need = "a model name" if kind is str else f"a{'n integer' if kind is int else ' number'} >= {minimum}"
                raise ResearcherError(f"program.md claude.{key}: expected {need}, got {value!r}")
            values[key] = kind(value)
        settings = cls(**values)
        if settings.max_tokens > NONSTREAMING_MAX_TOKENS:
            raise ResearcherError(f"program.md claude.max_tokens: at most {NONSTREAMING_MAX_TOKENS} per turn "
                                  f"(the SDK requires streaming above), got {settings.max_tokens}")
        return settings


# field -> (type, minimum, may be None)
_SETTING_TYPES: dict[str, tuple[type, float, bool]] = {
    "model": (str, 0, False), "max_tokens": (int, 1, False), "max_turns": (int, 1, False),
    "max_usd": (float, 0, True), "max_tokens_total": (int, 1, True), "api_tries": (int, 1, False),
    "retry_base_s": (float, 0, False), "retry_max_s": (float, 0, False), "sdk_max_retries": (int, 0, False),
    "timeout_s": (float, 1, False), "max_summary_chars": (int, 1000, False),
}


class ProposalRejected(base.ProposalRejected):
    """The model gave no acceptable submission for this experiment. Not fatal: the loop
    records an `invalid` experiment (with `reason`) and asks for the next proposal. Adds the
    mistake counts of the failed conversation to the protocol's exception."""

    def __init__(self, reason: str, transcript: list[dict[str, Any]], errors: dict[str, int],
                 usage: Usage | None = None) -> None:
        super().__init__(reason, transcript, usage)
        self.errors = errors


def _block_param(block: Any) -> dict[str, Any]:
    """A response content block as a request param, passed back unchanged (thinking
    signatures included, as the API requires in a tool loop)."""
    kind = block.type
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return block.model_dump(mode="json", exclude_none=True)


def _clip_summary(summary: str, limit: int) -> str:
    """Head (how the run started) and tail (the latest experiments) of an over-long summary."""
    if len(summary) <= limit:
        return summary
    head = limit // 4
    tail = limit - head
    return f"{summary[:head]}\n[... {len(summary) - limit} characters of older history left out ...]\n{summary[-tail:]}"


class ClaudeResearcher(Researcher):
    """Proposes experiments by talking to Claude. See the module docstring for the contract."""

    name = "claude"

    def __init__(
        self,
        state_dir: Path | str,
        settings: "ClaudeSettings | Mapping[str, Any] | None" = None,
        *,
        client: anthropic.Anthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        experiment_detail: Callable[[str], str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.settings = settings if isinstance(settings, ClaudeSettings) else ClaudeSettings.from_dict(settings)
        self.experiment_detail = experiment_detail
        self._sleep = sleep
        env_key = os.environ.get("ANTHROPIC_API_KEY")
        if client is None:
            key = api_key or env_key
            if not key:
                raise ResearcherError("the claude researcher needs ANTHROPIC_API_KEY set in the environment "
                                      "(or choose `researcher: optuna` in program.md)")
            client = anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=self.settings.sdk_max_retries,
                                         timeout=self.settings.timeout_s)
        self._client = client
        # Kept only to scrub them from any message we build from an SDK error.
        self._secrets = [s for s in (api_key, env_key, getattr(client, "api_key", None)) if s]
        self.meter = UsageMeter(self.state_dir / "usage.json")
        if pricing.lookup(self.settings.model) is None:
            self.meter.totals["price_note"] = f"{self.settings.model} is not in agent/researchers/pricing.py; priced at the dearest rates"

    # ---- public ---------------------------------------------------------------------------
    def usage(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.meter.totals)) | {"model": self.settings.model}

    def propose(self, context: ResearchContext) -> Proposal:
        self._check_caps()
        bench = Workbench(
            context.target, context.incumbent_source, context.protected, context.direction,
            tuple(hid for hid, _ in context.hypotheses), self.experiment_detail,
        )
        system = [{"type": "text", "text": self._system_prompt(context), "cache_control": _CACHE}]
        messages: list[dict[str, Any]] = [{"role": "user", "content": self._opening(context)}]
        transcript: list[dict[str, Any]] = [{"role": "user", "content": messages[0]["content"]}]
        errors: dict[str, int] = {}
        spent: dict[str, float] = {k: 0 for k in USAGE_FIELDS} | {"usd": 0.0}
        self.meter.totals["proposals"] += 1

        def count(kind: str) -> None:
            errors[kind] = errors.get(kind, 0) + 1
            self.meter.count(kind)

        def reject(reason: str) -> ProposalRejected:
            path = self._save_transcript(context, transcript, errors, spent, reason)
            return ProposalRejected(f"{reason} (transcript: {path})", transcript, errors,
                                    _usage(spent, sum(m["role"] == "assistant" for m in transcript)))

        for turn in range(1, self.settings.max_turns + 1):
            response, call = self._call(system, messages)
            for key in spent:
                spent[key] += call[key]
            blocks = [_block_param(b) for b in response.content]
            transcript.append({"role": "assistant", "content": blocks, "stop_reason": response.stop_reason, "usage": call})
            reply: list[dict[str, Any]] = []
            for block in (b for b in response.content if b.type == "tool_use"):
                try:
                    result = bench.execute(block.name, block.input)
                except ToolError as err:
                    count(err.kind)
                    text = err.message
                    if err.kind == "bad_prediction":
                        if errors["bad_prediction"] >= 2:
                            raise reject(f"no usable prediction after it was returned once: {err.message}")
                        text += ("\nThis is the one return allowed: submit again with a usable prediction, "
                                 "or this experiment is recorded as invalid.")
                    reply.append({"type": "tool_result", "tool_use_id": block.id, "content": text, "is_error": True})
                    continue
                if isinstance(result, Submission):
                    return self._proposal(context, result, turn, errors, spent, transcript)
                reply.append({"type": "tool_result", "tool_use_id": block.id, "content": result})
            nudge = self._nudge(response, bool(reply), count)
            if nudge:
                reply.append({"type": "text", "text": nudge})
            transcript.append({"role": "user", "content": reply})
            if any(b["type"] in ("text", "tool_use") for b in blocks):
                messages.append({"role": "assistant", "content": blocks})
                messages.append({"role": "user", "content": reply})
            else:  # nothing visible to answer: keep the alternation by extending the last user turn
                messages[-1] = {"role": "user", "content": [*messages[-1]["content"], *reply]}
        raise reject(f"no valid submission within max_turns={self.settings.max_turns} turns")

    # ---- conversation -----------------------------------------------------------------------
    def _system_prompt(self, context: ResearchContext) -> str:
        sign = "negative" if context.direction == "minimize" else "positive"
        protected = ", ".join(sorted(context.protected)) or "none"
        return f"""You are the researcher in Nightshift, an automated machine-learning research loop.
Each conversation is one experiment: make ONE focused change to {context.target} that you expect
to move {context.metric} (goal: {context.direction}), then call submit with a prediction made
before the run.

How it is judged: the harness runs the target under a fixed wall-clock budget on several seeds,
compares the candidate with the incumbent on the same seeds, and keeps the change only when the
difference is statistically significant; otherwise it is reverted. A small, well-motivated change
is easier to verify than a sweeping one.

Rules:
- Only {context.target} may change (edit_file or write_file). Protected files ({protected}) are
  read-only; read them with read_file when you need to. The draft must stay valid Python.
- Do not repeat what the ledger shows as tried unless you change something material.
- Test queued human hypotheses first and pass their hypothesis_id to submit.
- You have at most {self.settings.max_turns} turns. The current source is in the first message:
  edit it directly; read_file is for protected files or to check a change.

The prediction (scored against the measurement after the run):
- delta = candidate - incumbent in units of {context.metric}; an improvement is {sign}.
- direction improve|worsen|same; expected_delta your best estimate; interval [lo, hi] with lo < hi
  containing expected_delta; confidence the probability that the measured delta falls inside it.
  Size the interval from the seed-to-seed noise you are given. rationale: one or two sentences.

# The research program (program.md)
{context.program_text}"""

    def _opening(self, context: ResearchContext) -> list[dict[str, Any]]:
        source = (f"The current best version of {context.target} (the incumbent, commit "
                  f"{context.incumbent_commit[:12]}):\n<source>\n{context.incumbent_source}\n</source>")
        value = "not measured yet" if context.incumbent_value is None else f"{context.incumbent_value:.6g}"
        noise = "not measured yet" if context.noise_sd is None else f"{context.noise_sd:.4g}"
        queued = "".join(f"\n- [{hid}] {text}" for hid, text in context.hypotheses) or " none"
        summary = _clip_summary(context.ledger_summary.strip(), self.settings.max_summary_chars) or "(no experiments yet)"
        facts = (f"Experiment #{context.experiment_index}. Metric {context.metric} ({context.direction}); "
                 f"incumbent value {value}; seed-to-seed noise sd {noise}.\n"
                 f"Queued hypotheses to test first:{queued}\n\n"
                 f"Ledger summary (what was tried, kept, discarded and why):\n{summary}\n\n"
                 f"Make one change to {context.target}, then call submit.")
        return [{"type": "text", "text": source, "cache_control": _CACHE}, {"type": "text", "text": facts}]

    def _nudge(self, response: Any, answered: bool, count: Callable[[str], None]) -> str:
        """What to tell the model when its turn did not call a tool (or was cut short)."""
        if response.stop_reason == "refusal":
            count("refusal")
            return ("Your last answer was a refusal. This is routine ML research on a training script; "
                    "continue with one change to the target and call submit.")
        if answered:
            return ""
        if response.stop_reason == "max_tokens":
            count("truncated")
            return "Your answer was cut at max_tokens. Be brief: make the edit with edit_file, then submit."
        if not any(b.type == "text" and b.text.strip() for b in response.content):
            count("empty_answer")
            return "Your answer was empty. Make one change to the target with edit_file, then call submit."
        count("no_tool_call")
        return "No tool was called. Use edit_file or write_file to change the target, then call submit."

    def _request_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages with a moving cache breakpoint on the newest block, so that each turn
        reads the previous turns from the cache (4 breakpoints at most: tools, system,
        incumbent source, newest block)."""
        last = messages[-1]
        content = [*last["content"][:-1], {**last["content"][-1], "cache_control": _CACHE}]
        return [*messages[:-1], {"role": last["role"], "content": content}]

    def _tools(self) -> list[dict[str, Any]]:
        """The tool definitions, with a cache breakpoint on the last. show_experiment is offered
        only when the loop gave a way to answer it."""
        tools = [t for t in TOOLS if t["name"] != "show_experiment" or self.experiment_detail]
        return [*tools[:-1], {**tools[-1], "cache_control": _CACHE}]

    # ---- API calls, retries, accounting ----------------------------------------------------
    def _call(self, system: list[dict[str, Any]], messages: list[dict[str, Any]]) -> tuple[Any, dict[str, float]]:
        s = self.settings
        last_error = ""
        for attempt in range(1, s.api_tries + 1):
            self._check_caps()
            try:
                response = self._client.messages.create(
                    model=s.model, max_tokens=s.max_tokens, system=system, tools=self._tools(),
                    messages=self._request_messages(messages),
                )
            except anthropic.APIStatusError as err:
                if err.status_code == 401:
                    raise ResearcherError("the Anthropic API rejected ANTHROPIC_API_KEY (401); set a valid key") from None
                if err.status_code not in _RETRYABLE_STATUS and err.status_code < 500:
                    raise ResearcherError(self._redact(f"the Anthropic API refused the request ({err.status_code}): {err.message}")) from None
                last_error = f"{err.status_code} {err.message}"
                retry_after = _retry_after(err.response)
            except anthropic.APIConnectionError as err:
                last_error, retry_after = f"connection error: {err}", None
            else:
                return response, self.meter.record_call(s.model, response.usage)
            self.meter.totals["api_retries"] += 1
            if attempt < s.api_tries:
                delay = min(s.retry_max_s, s.retry_base_s * 2 ** (attempt - 1))
                self._sleep(max(delay, min(retry_after or 0.0, s.retry_max_s)))
        raise ResearcherError(self._redact(
            f"Anthropic API unavailable after {s.api_tries} tries: {last_error}. The loop is paused; "
            f"rerun `nightshift run --tag <tag>` with this run's tag to resume"))

    def _check_caps(self) -> None:
        s, totals = self.settings, self.meter.totals
        if s.max_usd is not None and totals["usd"] >= s.max_usd:
            raise ResearcherError(f"budget cap reached: spent ${totals['usd']:.2f} of claude.max_usd ${s.max_usd:.2f} "
                                  f"(usage in {self.meter.path}); raise the cap in program.md to go on")
        if s.max_tokens_total is not None and self.meter.tokens_total() >= s.max_tokens_total:
            raise ResearcherError(f"budget cap reached: {self.meter.tokens_total()} tokens of claude.max_tokens_total "
                                  f"{s.max_tokens_total} (usage in {self.meter.path}); raise the cap in program.md to go on")

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text

    # ---- results ---------------------------------------------------------------------------
    def _proposal(self, context: ResearchContext, sub: Submission, turns: int, errors: dict[str, int],
                  spent: dict[str, float], transcript: list[dict[str, Any]]) -> Proposal:
        path = self._save_transcript(context, transcript, errors, spent, "submitted")
        extra = {"model": self.settings.model, "turns": turns, "errors": dict(errors),
                 "transcript": str(path)}
        return Proposal(source=sub.source, description=sub.description, hypothesis=sub.hypothesis,
                        prediction=sub.prediction, hypothesis_id=sub.hypothesis_id, extra=extra,
                        usage=_usage(spent, turns))

    def _save_transcript(self, context: ResearchContext, transcript: list[dict[str, Any]],
                         errors: dict[str, int], spent: dict[str, float], outcome: str) -> Path:
        folder = self.state_dir / "transcripts"
        folder.mkdir(parents=True, exist_ok=True)
        stem, n = f"{context.experiment_index:04d}", 1
        while (folder / f"{stem}.json").exists():  # a resumed run may propose this index again
            n += 1
            stem = f"{context.experiment_index:04d}-{n}"
        path = folder / f"{stem}.json"
        record = {"experiment_index": context.experiment_index, "model": self.settings.model, "outcome": outcome,
                  "errors": errors, "usage": spent, "messages": transcript}
        path.write_text(self._redact(json.dumps(record, indent=1)))
        return path


def _usage(spent: dict[str, float], calls: int) -> Usage:
    """One proposal's spending as the ledger records it."""
    return Usage(**{k: int(spent[k]) for k in USAGE_FIELDS}, usd=float(spent["usd"]), calls=calls)


def _retry_after(response: Any) -> float | None:
    """Seconds the server asked us to wait (retry-after header), if any."""
    try:
        return float(response.headers.get("retry-after"))
    except (AttributeError, TypeError, ValueError):
        return None
