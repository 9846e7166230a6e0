"""Where one run would have decided otherwise: the experiments of a night that the single-run
rule (autoresearch's: keep a change when its run beats the incumbent) would have decided
differently from Nightshift's keep rule, each with the reason Nightshift gave.

The single run's view of an experiment is its first candidate run, against the incumbent's
run on the same seed where the night has one (a single-run loop on a fixed seed compares
like that), else against the mean of the incumbent runs the decision rests on. It is a view
of the night's own runs, not a replay: a single-run night would have built on what it kept.
Experiments without a test (a crash, an invalid edit, an integrity flag, a run stopped early)
are left out: the single run's view of them is not in the ledger.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from agent.record.records import Direction, Verdict
from agent.record.state import Experiment

WHY_CHARS = 110      # Nightshift's reason, cut to fit one console line beside the rest


@dataclass(frozen=True)
class OtherVerdict:
    """One experiment the single-run rule would have decided otherwise."""

    experiment: str
    description: str
    verdict: Verdict          # Nightshift's
    single_run_keeps: bool    # the single-run rule's: True where Nightshift did not keep
    first_run: float          # the first run's improvement over the incumbent, metric units, + = better
    against: str              # what the first run was compared with
    why: str                  # Nightshift's reason

    def line(self) -> str:
        single = "the single-run rule keeps it" if self.single_run_keeps else "the single-run rule drops it"
        why = self.why if len(self.why) <= WHY_CHARS else self.why[:WHY_CHARS - 1].rstrip() + "…"
        return (f"{self.experiment} {self.description[:40]}: one run {self.first_run:+.4g} against "
                f"{self.against}, {single}; Nightshift: {self.verdict.value} ({why})")


def other_verdicts(experiments: Iterable[Experiment], direction: Direction) -> list[OtherVerdict]:
    """The experiments, in order, whose first run alone would have been decided otherwise."""
    out = []
    for experiment in tested(experiments):
        made = experiment.decision
        test = made.decision
        if not test.seeds:
            continue
        first = test.seeds[0]
        value = test.candidate_values.get(first)
        reference = test.reference_values
        if value is None or not reference:
            continue
        if first in reference:
            incumbent, against = reference[first], f"the incumbent on seed {first}"
        else:
            incumbent = sum(reference.values()) / len(reference)
            against = f"the mean of {len(reference)} incumbent runs"
        improvement = direction.improvement(value, incumbent)
        single_keeps = improvement > 0
        if single_keeps == (made.verdict is Verdict.KEEP):
            continue
        out.append(OtherVerdict(experiment.id, experiment.description, made.verdict, single_keeps,
                                improvement, against, made.reason or test.reason))
    return out


def tested(experiments: Iterable[Experiment]) -> list[Experiment]:
    """The experiments the keep rule decided on a test (the ones the single run could judge)."""
    return [e for e in experiments if e.decision is not None and e.decision.decision is not None
            and e.decision.verdict.is_decided]


def summary_lines(experiments: list[Experiment], direction: Direction, limit: int = 8) -> list[str]:
    """The console's section: a head line, then one line an experiment (the latest `limit`)."""
    decided = tested(experiments)
    others = other_verdicts(decided, direction)
    if not others:
        return []
    lines = [f"one run would have decided {len(others)} of {len(decided)} tested experiments "
             f"otherwise (the single-run rule: keep when one run beats the incumbent):"]
    lines += [f"  {other.line()}" for other in others[-limit:]]
    if len(others) > limit:
        lines.append(f"  and {len(others) - limit} earlier ones (`nightshift show <id>` tells each)")
    return lines
