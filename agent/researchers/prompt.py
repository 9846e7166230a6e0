"""What an LLM researcher is told: the system prompt and the opening message of a proposal.

Shared by every provider, so the claude and openai researchers brief their models the same
way. The opening is a list of `Part`s in the order they change least often, each marked
whether it is a stable prefix worth a cache breakpoint:

1. the incumbent's source, the test's setup and the incumbent's runs (until the next keep);
2. the closed chunks of the night's history (until the next chunk closes);
3. this experiment's facts: time and money left, the latest experiments, queued hypotheses.

The system prompt holds the rules and program.md's prose, the same for the whole night.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from agent.record.records import Direction
from agent.researchers.base import ResearchContext


@dataclass(frozen=True)
class Part:
    text: str
    stable: bool           # worth a cache breakpoint: the same for many proposals


def clip(text: str, limit: int) -> str:
    """The head (how the night started) and the tail (the latest) of an over-long text."""
    if len(text) <= limit:
        return text
    head = limit // 4
    return f"{text[:head]}\n[... {len(text) - limit} characters left out ...]\n{text[-(limit - head):]}"


def system_prompt(context: ResearchContext, max_turns: int) -> str:
    sign = "negative" if Direction(context.direction).lower_is_better else "positive"
    protected = ", ".join(sorted(context.protected)) or "none"
    return f"""You are the researcher in Nightshift, an automated machine-learning research loop.
Each conversation is one experiment: make ONE focused change to {context.target} that you expect
to move {context.metric} (goal: {context.direction}), then call submit with a prediction made
before the run.

How it is judged: the harness runs the target under a fixed wall-clock budget on several seeds,
compares the candidate with the incumbent on the same seeds, and keeps the change only when the
difference is statistically significant; otherwise it is reverted. A small, well-motivated change
is easier to verify than a sweeping one. The test's exact parameters are in the first message.

Rules:
- Only {context.target} may change (edit_file or write_file). Protected files ({protected}) are
  read-only; read them with read_file when you need to. The draft must stay valid Python.
- Prefer edit_file with a few exact lines over write_file: an answer cut at the output limit is
  discarded, tool calls included.
- The tool calls of one turn apply together or not at all: if one edit fails, none of that turn's
  edits is applied and its submit is refused; fix the edit and send them again.
- Do not repeat what the ledger shows as tried unless you change something material.
- Test queued human hypotheses first and pass their hypothesis_id to submit.
- You have at most {max_turns} turns. The current source is in the first message: edit it
  directly; read_file is for protected files or to check a change.

The prediction (scored against the measurement after the run):
- delta = candidate - incumbent in units of {context.metric}; an improvement is {sign}.
- direction improve|worsen|same; expected_delta your best estimate; interval [lo, hi] with lo < hi
  containing expected_delta; confidence the probability that the measured delta falls inside it.
  Size the interval from the seed-to-seed noise you are given. rationale: one or two sentences.

# The research program (program.md)
{context.program_text}"""


def _left(context: ResearchContext, usd_left: float | None, now: float) -> str:
    parts = []
    if context.deadline is not None:
        minutes = max(0.0, context.deadline - now) / 60
        parts.append(f"the night ends in {minutes / 60:.1f} h" if minutes >= 90 else
                     f"the night ends in {minutes:.0f} min")
    else:
        parts.append("the night has no time limit")
    parts.append(f"${usd_left:.2f} of the researcher's budget left" if usd_left is not None
                 else "no dollar cap")
    return "; ".join(parts)


def opening(context: ResearchContext, *, usd_left: float | None, max_chars: int,
            now: float | None = None) -> list[Part]:
    """The first message of a proposal's conversation, as parts (see the module docstring)."""
    now = time.time() if now is None else now
    source = (f"The current best version of {context.target} (the incumbent, commit "
              f"{context.incumbent_commit[:12]}):\n<source>\n{context.incumbent_source}\n</source>")
    brief = context.brief
    queued = "".join(f"\n- [{hid}] {text}" for hid, text in context.hypotheses) or " none"
    head = (f"Experiment #{context.experiment_index}: {_left(context, usd_left, now)}.\n"
            f"Queued hypotheses to test first:{queued}")
    ask = f"Make one change to {context.target}, then call submit."
    if brief is None:   # a context built by hand: the one-text summary is all there is
        value = "not measured yet" if context.incumbent_value is None else f"{context.incumbent_value:.6g}"
        noise = "not measured yet" if context.noise_sd is None else f"{context.noise_sd:.4g}"
        summary = clip(context.ledger_summary.strip(), max_chars) or "(no experiments yet)"
        facts = (f"{head}\nMetric {context.metric} ({context.direction}); incumbent value {value}; "
                 f"seed-to-seed noise sd {noise}.\n\nLedger summary (what was tried, kept, discarded "
                 f"and why):\n{summary}\n\n{ask}")
        return [Part(source, stable=True), Part(facts, stable=False)]
    budget = max(1_000, max_chars - len(brief.setup) - len(brief.incumbent) - len(brief.recent))
    parts = [Part(f"{source}\n\n{brief.setup}\n\n{brief.incumbent}", stable=True)]
    if brief.history:
        parts.append(Part(clip(brief.history, budget), stable=True))
    parts.append(Part(f"{head}\n\n{brief.recent}\n\n{ask}", stable=False))
    return parts
