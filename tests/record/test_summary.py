"""One experiment in full, on request (show_experiment)."""
from agent.record.events import (Decision, DecisionMade, ExperimentProposed, LoopStarted,
                                 RunFinished, Verdict)
from agent.record.ledger import Ledger
from agent.record.summary import experiment_detail
from sandbox import Status


def _many(tmp_path, n):
    ledger = Ledger(tmp_path)
    ledger.append(LoopStarted(tag="t", base_commit="base"))
    for seed in range(3):
        ledger.append(RunFinished(run_id=f"b{seed}", commit="base", seed=seed, role="reference",
                                  status=Status.OK, metric=2.0 + seed / 100))
    for i in range(1, n + 1):
        eid, commit = f"e{i:04d}", f"c{i:07d}"
        crashed = i % 7 == 0
        ledger.append(ExperimentProposed(id=eid, commit=commit, parent="base",
                                         description=f"change number {i} " + "x" * 80,
                                         hypothesis="h", researcher="optuna"))
        ledger.append(RunFinished(run_id=f"r{i}", commit=commit, seed=0, role="candidate",
                                  experiment=eid, status=Status.CRASH if crashed else Status.OK,
                                  metric=None if crashed else 2.1, reason="boom",
                                  log_tail="Traceback ... boom"))
        verdict = Verdict.CRASH if crashed else Verdict.DISCARD
        ledger.append(DecisionMade(id=eid, commit=commit, incumbent="base", verdict=verdict,
                                   reason="futility", decision=None if crashed else Decision(
                                       verdict=verdict, effect=-0.1, p_value=0.9)))
    return ledger


def test_experiment_detail_shows_diff_and_log_tail(tmp_path):
    state = _many(tmp_path, 7).state
    text = experiment_detail(state, "e0007", lambda commit: f"diff of {commit}")
    assert "diff of c0000007" in text and "boom" in text and "[crash]" in text
    assert "no experiment" in experiment_detail(state, "e9999", lambda c: "")
