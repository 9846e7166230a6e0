"""Where one run would have decided otherwise: the experiments of a night that the single-run
rule (autoresearch's: keep a change when its run beats the incumbent) would have decided
differently from Nightshift's keep rule on at least one of their seeds, each with the reason
Nightshift gave.

The single run's view of an experiment on a seed is its candidate run there against the
incumbent's run on the same seed (a single-run loop on a fixed seed compares like that).
Which seed a single-run loop runs is chance, so each of the experiment's seeds is one draw of
what that rule would have done: a change is listed when one of its draws goes against
Nightshift's verdict, with how many did (kept on 1 of 4 seeds: a loser the rule keeps one
time in four). Where the incumbent has no run on any of the candidate's seeds, the first run
is compared with the mean of the incumbent runs the decision rests on. It is a view of the
night's own runs, not a replay: a single-run night would have built on what it kept.
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
    """One experiment the single-run rule would have decided otherwise, on some of its seeds."""

    experiment: str
    description: str
    verdict: Verdict          # Nightshift's
    single_run_keeps: bool    # the single-run rule's: True where Nightshift did not keep
    first_run: float          # the shown run's improvement over the incumbent, metric units, + = better
    against: str              # what the shown run was compared with
    why: str                  # Nightshift's reason
    seeds_otherwise: int = 1  # of the paired seeds, those on which one run decides otherwise
    seeds_paired: int = 0     # the seeds with a run of the incumbent beside the candidate's (0: the mean)

    def line(self) -> str:
        single = "the single-run rule keeps it" if self.single_run_keeps else "the single-run rule drops it"
        why = self.why if len(self.why) <= WHY_CHARS else self.why[:WHY_CHARS - 1].rstrip() + "…"
        if self.seeds_paired:
            beats = "beats" if self.single_run_keeps else "loses to"
            run = (f"one run {beats} the incumbent's on {self.seeds_otherwise} of its {self.seeds_paired} "
                   f"seeds ({self.first_run:+.4g} against {self.against})")
        else:
            run = f"one run {self.first_run:+.4g} against {self.against}"
        return f"{self.experiment} {self.description[:40]}: {run}, {single}; Nightshift: {self.verdict.value} ({why})"


def other_verdicts(experiments: Iterable[Experiment], direction: Direction) -> list[OtherVerdict]:
    """The experiments, in order, that one run would have decided otherwise on a seed."""
    out = []
    for experiment in tested(experiments):
        made = experiment.decision
        test = made.decision
        kept = made.verdict is Verdict.KEEP
        candidate, reference = test.candidate_values, test.reference_values
        seeds = [seed for seed in test.seeds if seed in candidate]
        if not seeds or not reference:
            continue
        why = made.reason or test.reason
        paired = [seed for seed in seeds if seed in reference]
        if paired:
            gains = {seed: direction.improvement(candidate[seed], reference[seed]) for seed in paired}
            otherwise = [seed for seed in paired if (gains[seed] > 0) != kept]
            if otherwise:
                shown = otherwise[0]
                out.append(OtherVerdict(experiment.id, experiment.description, made.verdict, not kept,
                                        gains[shown], f"the incumbent on seed {shown}", why,
                                        len(otherwise), len(paired)))
            continue
        mean = sum(reference.values()) / len(reference)
        improvement = direction.improvement(candidate[seeds[0]], mean)
        if (improvement > 0) != kept:
            out.append(OtherVerdict(experiment.id, experiment.description, made.verdict, not kept,
                                    improvement, f"the mean of {len(reference)} incumbent runs", why))
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
             f"otherwise, on some of their seeds (the single-run rule: keep when one run beats "
             f"the incumbent's on its seed):"]
    lines += [f"  {other.line()}" for other in others[-limit:]]
    if len(others) > limit:
        lines.append(f"  and {len(others) - limit} earlier ones (`nightshift show <id>` tells each)")
    return lines
