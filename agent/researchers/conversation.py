"""One proposal as a conversation with a model, the same for every API.

`LLMResearcher.propose` runs a bounded tool-use conversation: the model reads and edits an
in-memory draft of the target (`tools.Workbench`) and ends by calling `submit` with a
pre-registered prediction. What differs between APIs (how messages are written, sent and
read back) is a `Dialect`; claude.py and openai_researcher.py each provide one. What is
decided here, once for all of them:

- mistakes (bad input, edits that do not apply, edits outside the target, empty answers)
  are answered as tool errors, counted, and never applied; one turn's edits are
  all-or-nothing;
- an answer cut at `max_tokens` is never executed: its tool calls are answered "NOT
  executed" and the model is asked to be brief;
- a refusal ends that conversation: the next call starts a fresh one (a fresh draft);
  after `max_refusals` refusals in a row the `fallback_model` takes over, and when it too
  refuses that often the researcher stops the night (ResearcherError, exit 3);
- a request the API rejects (a conversation-level 4xx) rejects this proposal only; twice
  in a row on a fresh conversation means the settings are wrong, and the night stops;
- retries, timeouts and the night's deadline are calls.py's; the dollar and token caps are
  checked before every try.

Outcomes: a `Proposal`; `ProposalRejected` (the loop records an invalid experiment and goes
on); `ResearcherError` (the loop stops cleanly with its message). Every proposal leaves a
transcript (transcript.py) whose path, relative to the tag's folder, is in `extra`.
"""
from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from agent.researchers import base
from agent.researchers.base import Proposal, ResearchContext, Researcher, ResearcherError, Usage
from agent.researchers.calls import OutOfTime, Rejected, RetryPolicy, call_with_retries
from agent.researchers.pricing import ModelPrice
from agent.researchers.prompt import Part, opening, system_prompt
from agent.researchers.settings import LLMSettings
from agent.researchers.tool_specs import TOOL_NAMES
from agent.researchers.tools import Submission, ToolCall, ToolResult, Workbench
from agent.researchers.transcript import Redactor, Transcript
from agent.researchers.usage import UsageMeter


@dataclass(frozen=True)
class Turn:
    """One answer of the model, whatever the API."""

    calls: tuple[ToolCall, ...]
    text: str                   # its visible text, stripped
    stop: str                   # tool_use | end_turn | max_tokens | refusal | the API's other reasons
    usage: Usage                # this call's tokens (dollars are added by the researcher)
    refusal: str = ""           # why it refused, as the API says (category: explanation)
    message: Any = None         # the assistant message in the API's own shape, to send back


class Dialect(ABC):
    """How one API writes, sends and reads a conversation."""

    sdk: Any                    # the SDK module whose errors calls.classify knows
    provider: str               # shown in messages and transcripts

    @abstractmethod
    def start(self, system: str, parts: Sequence[Part], tool_names: Sequence[str]) -> Any:
        """A new conversation: its opening message and everything fixed for it."""

    @abstractmethod
    def request(self, conversation: Any, model: str) -> dict[str, Any]:
        """The JSON body of the next call."""

    @abstractmethod
    def send(self, request: dict[str, Any], timeout: float) -> tuple[Turn, dict[str, Any]]:
        """One try: the turn and the raw answer (for the transcript). Raises the SDK's errors."""

    @abstractmethod
    def extend(self, conversation: Any, turn: Turn, results: Sequence[ToolResult], note: str) -> None:
        """Add the model's turn and our answer (tool results, then `note` when not empty)."""

    @abstractmethod
    def price(self, model: str) -> ModelPrice:
        ...


class ProposalRejected(base.ProposalRejected):
    """No acceptable submission for this experiment; adds the conversation's mistake counts."""

    def __init__(self, reason: str, errors: dict[str, int], usage: Usage | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(reason, [], usage, extra)
        self.errors = errors


def _priced(usage: Usage, price: ModelPrice) -> Usage:
    usd = price.cost_usd(usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens,
                         usage.cache_creation_input_tokens, usage.cache_creation_1h_input_tokens)
    return replace(usage, usd=usd, calls=1)


class LLMResearcher(Researcher):
    """Proposes experiments by talking to a model through a `Dialect` (module docstring)."""

    name = "llm"

    def __init__(self, state_dir: Path | str, settings: LLMSettings, dialect: Dialect, *,
                 experiment_detail: Callable[[str], str] | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 secrets: Sequence[str | None] = ()) -> None:
        self.state_dir = Path(state_dir)
        self.settings, self.dialect = settings, dialect
        self.experiment_detail = experiment_detail
        self._sleep, self._clock = sleep, clock
        self.model = settings.model
        self.redact = Redactor(secrets)
        self.meter = UsageMeter(self.state_dir / "usage.json")
        self.hints: dict[int, str] = {}  # status -> the fix, added to a fatal error's message
        self._refused = 0               # refused conversations in a row, across proposals
        self._rejected_fresh = False    # the last proposal's fresh conversation was rejected
        self.policy = RetryPolicy(settings.api_tries, settings.patience_s, settings.timeout_s,
                                  settings.retry_base_s, settings.retry_max_s)

    # ---- public ---------------------------------------------------------------------------
    def usage(self) -> dict[str, Any]:
        return self.meter.totals() | {"model": self.model}

    def propose(self, context: ResearchContext) -> Proposal:
        self._check_caps()
        self.meter.start_proposal()
        s = self.settings
        tool_names = tuple(n for n in TOOL_NAMES if n != "show_experiment" or self.experiment_detail)
        usd_left = None if s.max_usd is None else max(0.0, s.max_usd - self.meter.total.usd)
        parts = opening(context, usd_left=usd_left, max_chars=s.max_brief_chars, now=self._clock())
        system = system_prompt(context, s.max_turns)
        transcript = Transcript(self.state_dir / "transcripts", context.experiment_index, self.redact,
                                researcher=self.name, provider=self.dialect.provider)
        errors: dict[str, int] = {}
        spent = Usage()

        def count(kind: str) -> None:
            errors[kind] = errors.get(kind, 0) + 1
            self.meter.count(kind)

        def extra(outcome: str) -> dict[str, Any]:
            path = transcript.save(outcome, model=self.model, errors=errors, usage=spent.to_dict())
            return {"model": self.model, "turns": turns, "errors": dict(errors),
                    "transcript": str(path.relative_to(self.state_dir.parent))}

        def reject(reason: str) -> ProposalRejected:
            return ProposalRejected(reason, errors, spent, extra(reason))

        def spend(usage: Usage) -> None:
            nonlocal spent
            spent = spent + usage
            self.meter.add(usage)

        bench = self._bench(context)
        conversation = self.dialect.start(system, parts, tool_names)
        turns, fresh = 0, True
        try:
            while turns < s.max_turns:
                request = self.dialect.request(conversation, self.model)
                transcript.request(request)
                try:
                    turn, raw = self._call(request, transcript, spend, context.deadline)
                except Rejected as rejected:
                    count("api_rejected")
                    if fresh and self._rejected_fresh:
                        raise ResearcherError(self.redact(
                            f"the {self.dialect.provider} API rejects even a fresh conversation "
                            f"({rejected.status}: {rejected.message}); check {self.name}.model, "
                            f"max_tokens and effort in program.md")) from None
                    self._rejected_fresh = fresh
                    raise reject(self.redact(f"the {self.dialect.provider} API rejected the request "
                                             f"({rejected.status}: {rejected.message})")) from None
                except OutOfTime as late:
                    raise reject(str(late)) from None
                self._rejected_fresh = False
                turns += 1
                spend(_priced(turn.usage, self.dialect.price(self.model)))
                transcript.answer(raw)
                if turn.stop == "refusal":
                    count("refusal")
                    transcript.restart(turn.refusal or "refused")
                    self._after_refusal(turn)
                    bench, fresh = self._bench(context), True
                    conversation = self.dialect.start(system, parts, tool_names)
                    continue
                self._refused, fresh = 0, False
                if turn.stop == "model_context_window_exceeded":
                    raise reject("the conversation outgrew the model's context window")
                results, note, submission = self._answer(turn, bench, count)
                if submission is not None:
                    extra_ = extra("submitted")
                    return Proposal(source=submission.source, description=submission.description,
                                    hypothesis=submission.hypothesis, prediction=submission.prediction,
                                    hypothesis_id=submission.hypothesis_id, extra=extra_, usage=spent)
                if errors.get("bad_prediction", 0) >= 2:
                    why = next(r.text for r in results if r.error == "bad_prediction").split("\nThis is the one")[0]
                    raise reject(f"no usable prediction after it was returned once: {why}")
                self.dialect.extend(conversation, turn, results, note)
            raise reject(f"no valid submission within max_turns={s.max_turns} turns")
        except ResearcherError as stop:
            extra(f"stopped: {stop}")
            raise

    # ---- one turn ---------------------------------------------------------------------------
    def _bench(self, context: ResearchContext) -> Workbench:
        return Workbench(context.target, context.incumbent_source, context.protected, context.direction,
                         tuple(hid for hid, _ in context.hypotheses), self.experiment_detail)

    def _answer(self, turn: Turn, bench: Workbench, count: Callable[[str], None]
                ) -> tuple[list[ToolResult], str, Submission | None]:
        """Our reply to a turn: its tool results and a note, or the accepted submission."""
        if turn.stop == "max_tokens":
            count("truncated")
            limit = self.settings.max_tokens
            results = [ToolResult(c.id, f"{c.name}: NOT executed: your answer was cut at max_tokens "
                                  f"({limit} tokens, thinking included), so this call may be incomplete. "
                                  f"Send it again, shorter: edit_file with the few lines that change "
                                  f"rather than write_file.", "truncated") for c in turn.calls]
            note = "" if results else (f"Your answer was cut at max_tokens ({limit} tokens, thinking "
                                       f"included) before any tool call. Be brief: make the edit with "
                                       f"edit_file, then submit.")
            return results, note, None
        if not turn.calls:
            if turn.text:
                count("no_tool_call")
                return [], "No tool was called. Use edit_file or write_file to change the target, then call submit.", None
            count("empty_answer")
            return [], "Your answer was empty. Make one change to the target with edit_file, then call submit.", None
        done = bench.run_turn(list(turn.calls))
        results = []
        for result in done.results:
            if result.error and result.error != "rolled_back":
                count(result.error)
            if result.error == "bad_prediction":
                result = ToolResult(result.call_id, result.text + "\nThis is the one return allowed: submit "
                                    "again with a usable prediction, or this experiment is recorded as "
                                    "invalid.", result.error)
            results.append(result)
        return results, "", done.submission

    def _after_refusal(self, turn: Turn) -> None:
        """Count a refused conversation; switch to the fallback model or stop when they pile up."""
        self._refused += 1
        s = self.settings
        if self._refused < s.max_refusals:
            return
        why = turn.refusal or "no reason given"
        if s.fallback_model and self.model != s.fallback_model:
            self.meter.note("fallback", f"{self.model} refused {self._refused} times in a row ({why}); "
                                        f"switched to {s.fallback_model}")
            self.model, self._refused = s.fallback_model, 0
            return
        hint = ("" if s.fallback_model else f" or set {self.name}.fallback_model in program.md")
        raise ResearcherError(self.redact(
            f"{self.model} refused {self._refused} times in a row ({why}); change the research "
            f"program's wording{hint}, then rerun `nightshift run --tag <tag>`"))

    # ---- API calls, accounting ----------------------------------------------------------------
    def _call(self, request: dict[str, Any], transcript: Transcript, spend: Callable[[Usage], None],
              deadline: float | None) -> tuple[Turn, dict[str, Any]]:
        price = self.dialect.price(self.model)
        estimate = len(json.dumps(request)) // 4            # about 4 characters a token

        def send(timeout: float) -> tuple[Turn, dict[str, Any]]:
            self._check_caps()
            return self.dialect.send(request, timeout)

        def failed(failure: Any, charge: Usage) -> None:
            transcript.failed(failure.kind, self.redact(failure.message), failure.status)
            spend(charge)

        timeout_charge = Usage(timeouts=1, usd=estimate * price.input / 1_000_000)
        try:
            return call_with_retries(
                send, sdk=self.dialect.sdk, policy=self.policy, deadline=deadline,
                clock=self._clock, sleep=self._sleep, on_failure=failed,
                timeout_charge=timeout_charge, what=f"the {self.dialect.provider} API", hints=self.hints)
        except ResearcherError as error:
            raise ResearcherError(self.redact(str(error))) from None

    def _check_caps(self) -> None:
        s, total = self.settings, self.meter.total
        where = f"(usage in {self.meter.path}); raise the cap in program.md to go on"
        if s.max_usd is not None and total.usd >= s.max_usd:
            raise ResearcherError(f"budget cap reached: spent ${total.usd:.2f} of {self.name}.max_usd "
                                  f"${s.max_usd:.2f} {where}")
        if s.max_tokens_total is not None and total.tokens >= s.max_tokens_total:
            raise ResearcherError(f"budget cap reached: {total.tokens} tokens of {self.name}.max_tokens_total "
                                  f"{s.max_tokens_total} {where}")
