"""The ledger is append-only, survives a crash mid-line, and keeps its fold as it appends."""
import json
import os

import pytest

from agent.record import load
from agent.record.events import (DecisionMade, Decision, ExperimentProposed, HypothesisQueued,
                                 LoopStarted, LoopStopped, Prediction, RunFinished, RunStarted,
                                 Score, Verdict)
from agent.record.ledger import Ledger, read_events
from agent.record.state import fold
from agent.record.views import write_tsv
from sandbox import Status

PREDICTION = Prediction("improve", -0.02, (-0.05, 0.0), 0.8)


def ok_run(run_id, commit, seed, role, value, experiment=None, **fields):
    return RunFinished(run_id=run_id, commit=commit, seed=seed, role=role, experiment=experiment,
                       status=Status.OK, metric=value, **fields)


def _night(ledger: Ledger) -> None:
    ledger.append(LoopStarted(tag="t", base_commit="base0000"))
    for seed, value in enumerate([2.10, 2.14, 2.12]):
        ledger.append(ok_run(f"r{seed}", "base0000", seed, "reference", value))
    ledger.append(ExperimentProposed(id="e0001", commit="cand0001", parent="base0000",
                                     description="LR down", hypothesis="lower LR is more stable",
                                     prediction=PREDICTION, researcher="scripted"))
    ledger.append(ok_run("c0", "cand0001", 0, "candidate", 2.00, "e0001", metrics={"steps": 10},
                         peak_memory_mb=2048))


def decided(verdict, **test):
    return DecisionMade(id="e0001", commit="cand0001", incumbent="base0000", verdict=verdict,
                        decision=Decision(verdict=verdict, **test) if test else None, reason="")


def test_the_kept_state_tracks_incumbent_reference_and_pending(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    state = ledger.state
    assert state.incumbent == "base0000"
    assert state.reference("base0000") == {0: 2.10, 1: 2.14, 2: 2.12}
    assert state.pending.id == "e0001"
    assert state.ok_values("cand0001", role="candidate") == {0: 2.00}
    ledger.append(decided(Verdict.KEEP, effect=0.12))
    assert state.incumbent == "cand0001" and state.pending is None
    assert [e.id for e in state.kept()] == ["e0001"]
    assert ledger.state == fold(read_events(ledger.path))


def test_candidate_runs_never_count_as_reference(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    ledger.append(decided(Verdict.KEEP))
    # The run that selected cand0001 must not become its reference (winner's curse).
    assert ledger.state.reference("cand0001") == {}


def test_truncated_last_line_is_ignored_and_overwritten(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    with open(ledger.path, "a") as handle:
        handle.write('{"event": "decision", "id": "e00')   # the crash came mid-write
    assert fold(read_events(ledger.path)).pending.id == "e0001"
    reopened = Ledger(tmp_path)
    assert reopened.state == ledger.state
    reopened.append(LoopStopped(reason="test"))
    lines = ledger.path.read_text().splitlines()
    assert all(json.loads(line) for line in lines)
    assert json.loads(lines[-1])["event"] == "loop_stopped"


def test_interrupted_runs_are_not_evidence_and_in_flight_is_shown(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    ledger.append(RunStarted(run_id="c1", commit="cand0001", seed=1, role="candidate",
                             experiment="e0001"))
    assert list(ledger.state.in_flight) == ["c1"]
    ledger.append(RunFinished(run_id="c1", commit="cand0001", seed=1, role="candidate",
                              experiment="e0001", status=Status.INTERRUPTED))
    state = ledger.state
    assert state.in_flight == {} and [r.run_id for r in state.interrupted] == ["c1"]
    assert state.ok_values("cand0001") == {0: 2.00}     # the interrupted seed 1 is not evidence


def test_a_nan_metric_is_recorded_as_text_and_the_line_stays_json(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(RunFinished(run_id="n", commit="c", seed=0, role="candidate",
                              status=Status.BAD_METRIC, metrics={"val_bpb": float("nan")}))
    line = json.loads(ledger.path.read_text())
    assert line["metrics"] == {"val_bpb": "nan"}
    assert ledger.state == fold(read_events(ledger.path))


def test_lines_another_process_appended_are_applied_in_file_order(tmp_path):
    running, other = Ledger(tmp_path), None
    _night(running)
    other = Ledger(tmp_path)                 # `nightshift seed` while the loop runs
    other.append(HypothesisQueued(hypothesis_id="h001", text="try LR=1e-3", origin="seed"))
    assert running.state.hypotheses == {}    # not read yet: no re-read per experiment
    running.append(decided(Verdict.DISCARD))  # the append finds the foreign line first
    assert list(running.state.hypotheses) == ["h001"]
    assert running.state == fold(read_events(tmp_path))
    other.append(HypothesisQueued(hypothesis_id="h002", text="try BETA2=0.95", origin="seed"))
    assert list(running.refresh().hypotheses) == ["h001", "h002"]
    assert running.state == fold(read_events(tmp_path))


def test_a_ctrl_c_in_the_fsync_leaves_the_state_holding_what_the_file_holds(tmp_path, monkeypatch):
    # Ctrl-C lands mostly in the fsync, after the line was written: the fold must know the run
    # began, or the night's abort cannot close it and a fresh read finds it in flight forever
    ledger = Ledger(tmp_path)
    ledger.append(LoopStarted(tag="t", base_commit="base0000"))
    real_fsync = os.fsync

    def fsync_then_ctrl_c(fd):
        real_fsync(fd)
        raise KeyboardInterrupt

    monkeypatch.setattr("agent.record.ledger.os.fsync", fsync_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        ledger.append(RunStarted(run_id="r0", commit="base0000", seed=0, role="reference"))
    monkeypatch.setattr("agent.record.ledger.os.fsync", real_fsync)
    assert list(ledger.state.in_flight) == ["r0"]
    ledger.append(RunFinished(run_id="r0", commit="base0000", seed=0, role="reference",
                              status=Status.INTERRUPTED, reason="the harness stopped"))
    fresh = fold(read_events(ledger.path))
    assert not ledger.state.in_flight and not fresh.in_flight
    assert [r.run_id for r in ledger.state.interrupted] == [r.run_id for r in fresh.interrupted] == ["r0"]


def test_a_ctrl_c_before_the_line_was_written_records_nothing(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path)
    ledger.append(LoopStarted(tag="t", base_commit="base0000"))

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("agent.record.ledger.os.open", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        ledger.append(RunStarted(run_id="r0", commit="base0000", seed=0, role="reference"))
    monkeypatch.undo()
    assert not ledger.state.in_flight and not fold(read_events(ledger.path)).in_flight


def test_a_disk_that_fills_mid_line_leaves_only_whole_lines(tmp_path, monkeypatch):
    # A full disk takes part of a line, then refuses the rest (what CI's small tmpfs did): the
    # part is cut off at once, so the file a reader or the resume sees holds whole lines only,
    # and the next append, with room again, starts on a line of its own
    ledger = Ledger(tmp_path)
    ledger.append(LoopStarted(tag="t", base_commit="base0000"))
    whole = ledger.path.read_bytes()
    real_write = os.write
    calls = []

    def half_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, data[:len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("agent.record.ledger.os.write", half_then_full)
    with pytest.raises(OSError, match="No space left"):
        ledger.append(RunStarted(run_id="r0", commit="base0000", seed=0, role="reference"))
    monkeypatch.undo()
    assert len(calls) == 2 and ledger.path.read_bytes() == whole
    assert not ledger.state.in_flight
    ledger.append(RunStarted(run_id="r1", commit="base0000", seed=0, role="reference"))
    assert all(line.endswith(b"\n") for line in ledger.path.read_bytes().splitlines(keepends=True))
    assert list(ledger.state.in_flight) == ["r1"] and ledger.state == fold(read_events(ledger.path))


def test_the_file_is_read_once_however_long_the_night(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    for i in range(50):
        ledger.append(ok_run(f"x{i}", "cand0001", 10 + i, "candidate", 2.0, "e0001"))
        ledger.refresh()
    assert ledger.reads == 0                 # a new file: nothing to read, ever
    assert Ledger(tmp_path).reads == 1       # resume reads it once


def test_tsv_has_autoresearch_columns(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    ledger.append(decided(Verdict.DISCARD))
    path = write_tsv(ledger.state, tmp_path)
    header, baseline, row = path.read_text().splitlines()
    assert header.split("\t") == ["commit", "val_bpb", "memory_gb", "status", "description"]
    assert baseline.split("\t") == ["base000", "2.120000", "0.0", "keep", "baseline"]   # its 3 seeds' mean
    assert row.split("\t") == ["cand000", "2.000000", "2.0", "discard", "LR down"]
    empty = Ledger(tmp_path / "new")
    empty.append(LoopStarted(tag="t", base_commit="base0000"))
    assert write_tsv(empty.state, tmp_path / "new").read_text().count("\n") == 1   # no baseline yet


def test_pandas_loader_gives_tidy_frames(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    ledger.append(DecisionMade(
        id="e0001", commit="cand0001", incumbent="base0000", verdict=Verdict.DISCARD, reason="",
        decision=Decision(verdict=Verdict.DISCARD, effect=0.1, interval=(0.0, 0.2), p_value=0.04,
                          seeds=(0,)),
        score=Score(measured_delta=-0.1, measured_direction="improve", direction_right=True,
                    covered=False, error=-0.08, confidence=0.8)))
    frames = load(tmp_path)
    assert list(frames["experiments"]["verdict"]) == ["discard"]
    assert frames["experiments"]["ci_high"][0] == 0.2
    assert not frames["experiments"]["prediction_covered"][0]
    runs = frames["runs"]
    assert len(runs) == 4 and set(runs["role"]) == {"reference", "candidate"}
    assert runs.loc[runs["role"] == "candidate", "steps"].iloc[0] == 10


def test_an_unknown_event_kind_is_skipped_not_fatal(tmp_path):
    ledger = Ledger(tmp_path)
    _night(ledger)
    with open(ledger.path, "a") as handle:
        handle.write(json.dumps({"event": "from_the_future", "x": 1}) + "\n")
    assert len(list(read_events(tmp_path))) == 6 == len(ledger.path.read_text().splitlines()) - 1
    with pytest.raises(TypeError):   # a known kind without its required fields is not an event
        RunFinished.from_dict({"event": "run_finished", "run_id": "x"})
