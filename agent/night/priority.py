"""Which run a free worker gets next, most useful first: the seeds the keep rule asked for on
pending candidates (their paired incumbent runs before their own, and the incumbent again
after a candidate's run where the rule brackets it), then the incumbent's fresh reference
seeds, then, once a night, a baseline seed again (same-seed repeatability). A new
candidate's screen comes only when nothing here is wanted (the loop's `_fill`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from agent.decide.decision import RunMore
from agent.record.events import Role
from agent.record.state import LoopState


@dataclass(frozen=True)
class RunRequest:
    commit: str
    seed: int
    role: Role
    experiment: str | None
    label: str


def runs_wanted(state: LoopState, asked: dict[str, RunMore], baseline_seeds: Iterable[int],
                in_flight: set[tuple[str, int, Role]], reference_only: bool,
                repeat_seeds: Iterable[int] = ()) -> Iterator[RunRequest]:
    """The runs not yet measured nor in flight; `reference_only` when no candidate may start
    (the night is ending: only the incumbent's fresh seeds are still worth running).
    `repeat_seeds` (the rule's) are run a second time once a night, on the incumbent of the
    moment, after their first run landed; a repeat tried once (even one that failed) is not
    asked for again, so a resumed night never doubles it."""
    if not reference_only:
        for experiment in state.pending_experiments():
            wanted = asked.get(experiment.id)
            if wanted is None:
                continue
            # The incumbent's paired runs first: on one worker a candidate run then has its
            # partner's whole curve to be compared with (early stopping), not a run to come.
            reference = state.reference(experiment.parent)
            for seed in wanted.reference_seeds:
                if seed not in reference and (experiment.parent, seed, Role.REFERENCE) not in in_flight:
                    yield RunRequest(experiment.parent, seed, Role.REFERENCE, None, "paired reference")
            for seed in wanted.again_seeds:   # after the candidate's run: a bracket
                if not state.bracketed(experiment.parent, experiment.commit, seed) \
                        and (experiment.parent, seed, Role.REFERENCE) not in in_flight:
                    yield RunRequest(experiment.parent, seed, Role.REFERENCE, experiment.id,
                                     "bracket: the incumbent again")
            candidate = state.ok_values(experiment.commit, Role.CANDIDATE)
            for seed in wanted.candidate_seeds:
                if seed not in candidate and (experiment.commit, seed, Role.CANDIDATE) not in in_flight:
                    yield RunRequest(experiment.commit, seed, Role.CANDIDATE, experiment.id,
                                     experiment.description)
    reference = state.reference(state.incumbent)
    for seed in baseline_seeds:
        if seed not in reference and (state.incumbent, seed, Role.REFERENCE) not in in_flight:
            yield RunRequest(state.incumbent, seed, Role.REFERENCE, None, "incumbent reference")
    if reference_only or state.repeats:
        return
    for seed in repeat_seeds:
        if seed in reference and (state.incumbent, seed, Role.REFERENCE) not in in_flight:
            yield RunRequest(state.incumbent, seed, Role.REFERENCE, None, "same-seed repeat")
