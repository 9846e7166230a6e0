"""One API call, tried until it is answered, within what the night allows.

Both SDKs the researchers use (anthropic, openai) raise the same shapes of error, so one
policy serves them:

- a timeout, a connection error, 408 / 409 / 429 and every 5xx (529 overloaded included) are
  tried again, after the wait the server asked for (`retry-after-ms`, `retry-after`) or an
  exponential backoff; `x-should-retry` from the server overrides the status either way;
- 401 / 403 / 404 stop the night (a bad key, no access, a model or URL that does not
  exist: every later call would fail the same way);
- any other 4xx rejects this conversation only (`Rejected`): the proposal is recorded as
  invalid and the night goes on.

Every try is bounded by the night's deadline (`--hours`): its timeout never runs past it,
and when the next wait would, the caller waits until the night is over and gives up with
`OutOfTime` (the loop then stops on its own stop rule, exit 0). A call that keeps failing
stops the night after `api_tries` tries or `patience_s` seconds with a ResearcherError
saying how to resume. Each failed try is counted (`Usage.retries`, `Usage.timeouts`), and a
timed-out one is charged its estimated prompt, since the server may have billed it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from agent.researchers.base import ResearcherError, Usage

T = TypeVar("T")
_RETRY_STATUS = {408, 409, 429}
_FATAL = {401: "the credentials were rejected (401)", 403: "the credentials lack permission (403)",
          404: "the model or endpoint does not exist (404)"}
MIN_TRY_S = 1.0            # a try with less time than this before the deadline is not started


class Rejected(Exception):
    """The API refused this request for what it contains (a conversation-level 4xx)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


class OutOfTime(Exception):
    """The night's deadline came while the API was still unavailable."""


@dataclass(frozen=True)
class Failure:
    kind: str                  # "retry" | "timeout" | "reject" | "fatal"
    message: str
    status: int | None = None
    wait_s: float | None = None


def api_message(err: Any) -> str:
    """The API's own words from an SDK error: error.message of its JSON body, else str(err)."""
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            kind = inner.get("type") or inner.get("code")
            return f"{kind}: {inner['message']}" if kind else inner["message"]
    return str(getattr(err, "message", None) or err)


def _server_wait(headers: Any) -> float | None:
    """Seconds the server asked us to wait: retry-after-ms, else retry-after (seconds)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            value = float(headers.get(name)) * scale
        except (AttributeError, TypeError, ValueError):
            continue
        if 0 < value <= 600:
            return value
    return None


def classify(err: BaseException, sdk: Any) -> Failure | None:
    """What a failed try means, for an error of `sdk` (the anthropic or openai module);
    None for errors that are not the API's (bugs propagate)."""
    if isinstance(err, sdk.APITimeoutError):
        return Failure("timeout", "the call timed out")
    if isinstance(err, sdk.APIConnectionError):
        return Failure("retry", f"connection error: {err}")
    if not isinstance(err, sdk.APIStatusError):
        return None
    status, headers = err.status_code, err.response.headers
    message = api_message(err)
    if status in _FATAL:
        return Failure("fatal", f"{_FATAL[status]}: {message}", status)
    should = (headers.get("x-should-retry") or "").lower()
    retry = should == "true" or (should != "false" and (status in _RETRY_STATUS or status >= 500))
    return Failure("retry" if retry else "reject", message, status, _server_wait(headers))


@dataclass
class RetryPolicy:
    api_tries: int
    patience_s: float
    timeout_s: float
    retry_base_s: float
    retry_max_s: float

    def backoff(self, attempt: int) -> float:
        return min(self.retry_max_s, self.retry_base_s * 2 ** (attempt - 1))


def call_with_retries(send: Callable[[float], T], *, sdk: Any, policy: RetryPolicy,
                      deadline: float | None, clock: Callable[[], float],
                      sleep: Callable[[float], None], on_failure: Callable[[Failure, Usage], None],
                      timeout_charge: Usage, what: str, hints: dict[int, str] | None = None) -> T:
    """`send(timeout_s)` until it returns. `on_failure(failure, charge)` records each failed
    try (the transcript, the meter); `timeout_charge` is what a timed-out try costs; `hints`
    add the fix to a fatal status's message. Raises Rejected, OutOfTime, or ResearcherError
    (fatal, or out of tries / patience)."""
    started = clock()
    for attempt in range(1, policy.api_tries + 1):
        timeout = policy.timeout_s
        if deadline is not None:
            left = deadline - clock()
            if left < MIN_TRY_S:
                raise OutOfTime(f"the night's deadline (--hours) has come; {what} was not tried again")
            timeout = min(timeout, left)
        try:
            return send(timeout)
        except Exception as err:
            failure = classify(err, sdk)
            if failure is None:
                raise
        timed_out = failure.kind == "timeout"
        on_failure(failure, timeout_charge if timed_out else Usage(retries=1))
        if failure.kind == "fatal":
            hint = (hints or {}).get(failure.status or 0)
            raise ResearcherError(f"{what}: {failure.message}" + (f"; {hint}" if hint else ""))
        if failure.kind == "reject":
            raise Rejected(failure.status or 400, failure.message)
        if attempt == policy.api_tries:
            break
        delay = failure.wait_s if failure.wait_s is not None else policy.backoff(attempt)
        now = clock()
        if now + delay - started > policy.patience_s:
            raise ResearcherError(
                f"{what}: unavailable for {(now - started) / 60:.0f} min (claude/openai patience_s "
                f"{policy.patience_s:g}); last answer: {failure.message}. The loop is paused: rerun "
                f"`nightshift run --tag <tag>` to resume")
        if deadline is not None and now + delay > deadline - MIN_TRY_S:
            # Nothing else can happen tonight: wait the night out, then give up this proposal.
            sleep(max(0.0, deadline - now) + 0.5)
            raise OutOfTime(f"{what} was still unavailable when the night's deadline (--hours) came: "
                            f"{failure.message}")
        sleep(delay)
    raise ResearcherError(f"{what}: unavailable after {policy.api_tries} tries: {failure.message}. "
                          f"The loop is paused: rerun `nightshift run --tag <tag>` to resume")
