"""The ledger is append-only, survives a crash mid-line, and folds into the loop state."""
import json

import pytest

from agent.record.ledger import Ledger, fold, load, read_events, write_tsv


def _night(ledger: Ledger) -> None:
    ledger.append("loop_started", tag="t", base_commit="base0000", program={})
    for seed, value in enumerate([2.10, 2.14, 2.12]):
        ledger.append("run_finished", run_id=f"r{seed}", commit="base0000", seed=seed,
                      role="reference", experiment=None, status="ok", metric=value, metrics={})
    ledger.append("experiment_proposed", id="e0001", commit="cand0001", parent="base0000",
                  description="LR down", hypothesis="lower LR is more stable",
                  prediction={"direction": "improve", "expected_delta": -0.02,
                              "interval": [-0.05, 0.0], "confidence": 0.8},
                  researcher="scripted")
    ledger.append("run_finished", run_id="c0", commit="cand0001", seed=0, role="candidate",
                  experiment="e0001", status="ok", metric=2.00, metrics={"steps": 10},
                  peak_memory_mb=2048)


def test_fold_tracks_incumbent_reference_and_pending(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    state = fold(ledger.events())
    assert state.incumbent == "base0000"
    assert state.reference("base0000") == {0: 2.10, 1: 2.14, 2: 2.12}
    assert state.pending.id == "e0001"
    assert state.ok_values("cand0001", role="candidate") == {0: 2.00}
    ledger.append("decision", id="e0001", commit="cand0001", incumbent="base0000",
                  verdict="keep", decision={"effect": 0.12}, reason="significant")
    state = fold(ledger.events())
    assert state.incumbent == "cand0001"
    assert state.pending is None
    assert [e.id for e in state.kept()] == ["e0001"]


def test_candidate_runs_never_count_as_reference(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    ledger.append("decision", id="e0001", commit="cand0001", incumbent="base0000",
                  verdict="keep", decision={}, reason="")
    state = fold(ledger.events())
    # The run that selected cand0001 must not become its reference (winner's curse).
    assert state.reference("cand0001") == {}


def test_truncated_last_line_is_ignored_and_overwritten(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    with open(ledger.path, "a") as handle:
        handle.write('{"event": "decision", "id": "e00')   # the crash came mid-write
    assert fold(read_events(ledger.path)).pending.id == "e0001"
    reopened = Ledger(tmp_path)
    reopened.append("loop_stopped", reason="test", exit_code=0)
    lines = ledger.path.read_text().splitlines()
    assert all(json.loads(line) for line in lines)
    assert json.loads(lines[-1])["event"] == "loop_stopped"


def test_interrupted_runs_are_not_evidence_and_in_flight_is_shown(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    ledger.append("run_started", run_id="c1", commit="cand0001", seed=1, role="candidate",
                  experiment="e0001")
    assert fold(ledger.events()).in_flight["run_id"] == "c1"
    ledger.append("run_finished", run_id="c1", commit="cand0001", seed=1, role="candidate",
                  experiment="e0001", status="interrupted", metric=None, metrics={})
    state = fold(ledger.events())
    assert state.in_flight is None
    assert 1 not in state.ok_values("cand0001")


def test_nan_cannot_enter_the_ledger(tmp_path):
    with pytest.raises(ValueError):
        Ledger(tmp_path).append("run_finished", metric=float("nan"))


def test_tsv_has_autoresearch_columns(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    ledger.append("decision", id="e0001", commit="cand0001", incumbent="base0000",
                  verdict="discard", decision={}, reason="")
    path = write_tsv(fold(ledger.events()), tmp_path)
    header, row = path.read_text().splitlines()
    assert header.split("\t") == ["commit", "val_bpb", "memory_gb", "status", "description"]
    assert row.split("\t") == ["cand000", "2.000000", "2.0", "discard", "LR down"]


def test_pandas_loader_gives_tidy_frames(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    ledger.append("decision", id="e0001", commit="cand0001", incumbent="base0000",
                  verdict="discard", decision={"effect": 0.1, "interval": [0.0, 0.2],
                                               "p_value": 0.04, "seeds": [0]},
                  reason="", score={"covered": False, "direction_right": True})
    frames = load(tmp_path)
    assert list(frames["experiments"]["verdict"]) == ["discard"]
    assert frames["experiments"]["ci_high"][0] == 0.2
    runs = frames["runs"]
    assert len(runs) == 4 and set(runs["role"]) == {"reference", "candidate"}
    assert runs.loc[runs["role"] == "candidate", "steps"].iloc[0] == 10
