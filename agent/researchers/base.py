"""The researcher protocol: given the context, propose the next experiment.

A researcher returns a `Proposal`: the whole new source of the target file, a one-line
description, the hypothesis, and a prediction registered *before* the run. After the
decision the loop tells it the outcome through `observe`.

Implementations: `optuna` (LLM-free knob search), `scripted` (replays given sources, for
tests and demos), `claude` (the Anthropic Messages API, directly or through Bedrock or
Vertex) and `openai` (any OpenAI-compatible Chat Completions endpoint, local models included).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.record.brief import Brief
from agent.record.events import Direction, Prediction, Usage, Verdict
from agent.record.state import Experiment

__all__ = ["Outcome", "Prediction", "Proposal", "ProposalRejected", "ResearchContext", "Researcher",
           "ResearcherDone", "ResearcherError", "Usage"]


@dataclass(frozen=True)
class Proposal:
    source: str                     # the complete new text of the target file
    description: str                # one line, goes into results.tsv and the commit subject
    hypothesis: str                 # why this should change the metric
    prediction: Prediction
    hypothesis_id: str | None = None  # the queued human hypothesis this tests, if any
    extra: dict[str, Any] = field(default_factory=dict)  # researcher-specific, e.g. optuna params
    usage: Usage | None = None      # what proposing it cost (tokens, dollars), recorded in the ledger
    # The commit whose target this source edits, when the researcher chose it (an external
    # agent edits a copy checked out at some incumbent); None: the incumbent it was shown.
    # A newer incumbent than the base gets the edit rebased onto it (agent/night/admission.py).
    base: str | None = None


@dataclass(frozen=True)
class ResearchContext:
    """What a researcher may look at. Read-only."""

    program_text: str               # the prose of program.md (the researcher's brief)
    target: str                     # repo-relative path of the one file it may change
    incumbent_source: str           # current best version of the target
    incumbent_commit: str
    protected: dict[str, str]       # repo-relative path -> source, for reading only
    ledger_summary: str             # the brief as one text: what was tried, kept, discarded, why
    metric: str
    direction: Direction
    noise_sd: float | None          # pooled seed-to-seed sd of the metric so far
    incumbent_value: float | None   # the incumbent's reference mean (fresh seeds)
    experiment_index: int           # 1-based number of the experiment being proposed
    hypotheses: tuple[tuple[str, str], ...] = ()  # queued (id, text), test these first
    workdir: Path | None = None     # worktree root, for researchers that read more files
    brief: Brief | None = None      # the same brief in sections, for prompt caching (agent/record/brief.py)
    deadline: float | None = None   # epoch seconds when the night stops (--hours); None: no limit

    def __post_init__(self) -> None:
        object.__setattr__(self, "direction", Direction(self.direction))


@dataclass(frozen=True)
class Outcome:
    """What the loop tells the researcher after deciding on its proposal."""

    experiment_id: str
    verdict: Verdict                # keep | discard | inconclusive | invalid | a run failure
    measured_delta: float | None    # candidate − incumbent, metric units (None on failure)
    candidate_mean: float | None
    reason: str = ""
    stopped_early: bool = False     # a discard stopped early: its curve was losing, no value
    over_compute: bool = False      # not kept for spending more run time than program.md allows
                                    # (whatever its value): more of the same is refused again


class ResearcherError(RuntimeError):
    """The researcher cannot propose (misconfigured, out of budget, API down). Stops the loop
    cleanly with this message."""


class ResearcherDone(ResearcherError):
    """The researcher has nothing more to propose, as planned (an agent said `nightshift
    done`): the night ends normally once what is in flight is decided (exit 0)."""


class Researcher(ABC):
    """Proposes experiments. Selected by name (`researcher:` in program.md, `--researcher`).

    Contract:
    - `propose(context)` returns a Proposal whose `source` differs from the incumbent and
      carries a Prediction; it may raise ResearcherError to stop the loop cleanly;
    - `observe(experiment, outcome)` is called exactly once per proposal after its decision,
      before the next `propose`, with the ledger's record of the experiment (what was proposed,
      its `extra`, its runs and decision: read it, never change it);
    - state that must survive a restart is kept under `state_dir` (given at construction),
      so a resumed run continues where it stopped.
    """

    name: str = "abstract"

    @abstractmethod
    def propose(self, context: ResearchContext) -> Proposal:
        ...

    def observe(self, experiment: Experiment, outcome: Outcome) -> None:
        """Learn from the outcome. Default: nothing."""

    def usage(self) -> dict[str, Any]:
        """Cost so far (tokens, dollars) for researchers that spend any."""
        return {}


class ProposalRejected(Exception):
    """The researcher could not produce a usable proposal this time (no valid prediction
    after a retry, max turns exceeded). The loop records an `invalid` experiment and goes on."""

    def __init__(self, reason: str, transcript: list[dict[str, Any]] | None = None,
                 usage: Usage | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.transcript = transcript or []
        self.usage = usage          # what the failed attempt cost; recorded on the invalid event
        self.extra = extra or {}    # researcher-specific (mistake counts, the transcript's path)
