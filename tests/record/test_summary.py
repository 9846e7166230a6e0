"""The researcher's view of the ledger: bounded, and one experiment in full on request."""
from agent.record.ledger import Ledger, fold
from agent.record.summary import experiment_detail, ledger_summary


def _many(tmp_path, n):
    ledger = Ledger(tmp_path)
    ledger.append("loop_started", tag="t", base_commit="base", program={})
    for seed in range(3):
        ledger.append("run_finished", run_id=f"b{seed}", commit="base", seed=seed, role="reference",
                      experiment=None, status="ok", metric=2.0 + seed / 100, metrics={})
    for i in range(1, n + 1):
        eid, commit = f"e{i:04d}", f"c{i:07d}"
        ledger.append("experiment_proposed", id=eid, commit=commit, parent="base",
                      description=f"change number {i} " + "x" * 80, hypothesis="h", prediction=None,
                      researcher="optuna")
        ledger.append("run_finished", run_id=f"r{i}", commit=commit, seed=0, role="candidate",
                      experiment=eid, status="crash" if i % 7 == 0 else "ok", metric=2.1,
                      metrics={}, reason="boom", log_tail="Traceback ... boom")
        ledger.append("decision", id=eid, commit=commit, incumbent="base",
                      verdict="crash" if i % 7 == 0 else "discard",
                      decision={"effect": -0.1, "p_value": 0.9}, reason="futility")
    return ledger


def test_summary_stays_bounded_over_hundreds_of_experiments(tmp_path):
    small = ledger_summary(fold(_many(tmp_path / "a", 30).events()), "val_bpb")
    large = ledger_summary(fold(_many(tmp_path / "b", 300).events()), "val_bpb")
    assert "300 experiments so far" in large
    assert "Older experiments (not listed)" in large
    assert len(large) < len(small) * 1.3


def test_experiment_detail_shows_diff_and_log_tail(tmp_path):
    state = fold(_many(tmp_path, 7).events())
    text = experiment_detail(state, "e0007", lambda commit: f"diff of {commit}")
    assert "diff of c0000007" in text and "boom" in text and "[crash]" in text
    assert "no experiment" in experiment_detail(state, "e9999", lambda c: "")
