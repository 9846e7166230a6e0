"""Which run a free worker gets: the baseline's same-seed repeat, once a night, through
the ledger's fold (a real Ledger on disk, events as the loop writes them)."""
from __future__ import annotations

from agent.decide.sequential import SequentialRule
from agent.night.priority import runs_wanted
from agent.record.events import LoopResumed, LoopStarted, Role, RunFinished, RunStarted
from agent.record.ledger import Ledger, read_events
from agent.record.state import fold
from sandbox import Status

BASE = "b" * 40
RULE = SequentialRule()


def ledger_with_baseline(tmp_path, values=(2.30, 2.36, 2.33, 2.40, 2.31, 2.35)) -> Ledger:
    ledger = Ledger(tmp_path)
    ledger.append(LoopStarted(tag="t", base_commit=BASE))
    for seed, value in enumerate(values):
        finish(ledger, seed, value)
    return ledger


def finish(ledger: Ledger, seed: int, value: float | None, run_id: str | None = None) -> None:
    run_id = run_id or f"r{len(ledger.state.runs)}-{seed}"
    ledger.append(RunStarted(run_id=run_id, commit=BASE, seed=seed, role=Role.REFERENCE))
    ledger.append(RunFinished(run_id=run_id, commit=BASE, seed=seed, role=Role.REFERENCE,
                              status=Status.OK if value is not None else Status.CRASH,
                              metric=value))


def wanted(ledger: Ledger, in_flight=frozenset(), reference_only=False):
    return [(r.seed, r.label) for r in runs_wanted(ledger.state, {}, RULE.baseline_seeds(),
                                                    set(in_flight), reference_only,
                                                    RULE.repeat_seeds())]


def test_the_first_baseline_seed_runs_again_once_it_has_landed(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(LoopStarted(tag="t", base_commit=BASE))
    assert (0, "same-seed repeat") not in wanted(ledger)          # nothing to repeat yet
    ledger = ledger_with_baseline(tmp_path / "b")
    assert wanted(ledger) == [(0, "same-seed repeat")]
    assert wanted(ledger, in_flight={(BASE, 0, Role.REFERENCE)}) == []   # it is running
    assert wanted(ledger, reference_only=True) == []               # the night is ending


def test_a_repeat_is_a_reference_run_the_fold_keeps_apart(tmp_path):
    ledger = ledger_with_baseline(tmp_path)
    finish(ledger, 0, 2.3123)
    state = ledger.state
    assert state.reference(BASE)[0] == 2.30                  # the first run of the seed stands
    assert [(r.seed, r.first, r.again) for r in state.repeats] == [(0, 2.30, 2.3123)]
    assert state.repeat_pairs() == ((2.30, 2.3123),)
    assert sorted(state.noise_groups()[0]) == sorted([2.30, 2.36, 2.33, 2.40, 2.31, 2.35])
    assert state.same_seed_runs()[BASE][0] == 2.30
    assert wanted(ledger) == []                              # once a night
    assert fold(read_events(tmp_path)) == state              # the file folds to the same


def test_a_resumed_night_never_doubles_the_repeat(tmp_path):
    ledger = ledger_with_baseline(tmp_path)
    finish(ledger, 0, 2.29)
    again = Ledger(tmp_path)                                   # a new invocation reads the file
    again.append(LoopResumed(tag="t"))
    assert wanted(again) == [] and len(again.state.repeats) == 1


def test_a_repeat_killed_in_flight_is_run_again_on_resume(tmp_path):
    ledger = ledger_with_baseline(tmp_path)
    ledger.append(RunStarted(run_id="killed", commit=BASE, seed=0, role=Role.REFERENCE))
    # kill -9 here: no run_finished; a new invocation reads the file
    again = Ledger(tmp_path)
    again.append(LoopResumed(tag="t"))
    assert again.state.repeats == [] and wanted(again) == [(0, "same-seed repeat")]


def test_a_failed_repeat_is_not_retried_and_changes_no_reference(tmp_path):
    ledger = ledger_with_baseline(tmp_path)
    finish(ledger, 0, None)
    assert ledger.state.reference(BASE)[0] == 2.30
    assert [r.again for r in ledger.state.repeats] == [None] and ledger.state.repeat_pairs() == ()
    assert wanted(ledger) == []


def test_a_rule_without_repeats_asks_for_none(tmp_path):
    ledger = ledger_with_baseline(tmp_path)
    requests = list(runs_wanted(ledger.state, {}, RULE.baseline_seeds(), set(), False))
    assert requests == []
