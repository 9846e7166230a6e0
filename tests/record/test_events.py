"""The typed ledger events: every kind round-trips, and a ledger written before they existed
(tests/fixtures/ledger_v0.jsonl, by the harness of commit f0c8ca5: a keep, a discard, a crash,
an invalid edit, hypotheses, a noise measurement, a replay, a Ctrl-C and a kill -9) still loads
with the same meaning."""
import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest

from agent.record import load
from agent.record.events import (EVENT_TYPES, REPLAY_TYPES, AblationChange, AblationPlanned,
                                 AblationRun, AblationSummary, Decision, DecisionMade, Event,
                                 ExperimentInvalid, ExperimentProposed, HypothesisQueued,
                                 LookTaken, LoopResumed, LoopStarted, LoopStopped, Prediction,
                                 ProposalAsked, ProposalReady, ProposalRebased, ReplayCommit,
                                 ReplayRun, ReplaySummary, Role, RunBegan, RunFinished, RunQueued,
                                 RunStarted, RunStoppedEarly, RunUnpaired, Score, Usage, Verdict,
                                 parse_event)
from agent.record.curves import Curve, CurvePoint
from agent.record.ledger import read_events
from agent.record.state import fold
from sandbox import Status

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ledger_v0.jsonl"
EXPECTED = FIXTURE.with_name("ledger_v0.expected.json")

PREDICTION = Prediction("improve", -0.02, (-0.05, 0.0), 0.8, "lower LR is more stable")
DECISION = Decision(verdict=Verdict.KEEP, effect=0.03, interval=(0.01, 0.05), p_value=0.002,
                    seeds=(2000, 2001), candidate_values={2000: 1.9, 2001: 1.91},
                    reference_values={0: 2.0, 2000: 1.95, 2001: 1.94}, rule="sequential",
                    reason="p=0.002 <= 0.01", details={"look": 2, "t_stat": 4.1})
SCORE = Score(measured_delta=-0.03, measured_direction="improve", direction_right=True,
              covered=True, error=-0.01, confidence=0.8)

ONE_OF_EACH: list[Event] = [
    LoopStarted(tag="t", base_commit="b" * 40, program={"metric": "val_bpb", "budget_s": 60.0},
                researcher="optuna", researcher_why="no key", sandbox="local",
                sandbox_facts={"pid_namespace": True}, rule="sequential", budget_s=60.0),
    LoopResumed(tag="t", researcher="claude", budget_s=30.0),
    LoopStopped(reason="reached --max-experiments 2", exit_code=0),
    HypothesisQueued(hypothesis_id="h001", text="try LR=1e-3", origin="seed"),
    ExperimentProposed(id="e0001", commit="c" * 40, parent="b" * 40, description="LR down",
                       hypothesis="h", prediction=PREDICTION, researcher="claude",
                       hypothesis_id="h001", extra={"turns": 3},
                       usage=Usage(input_tokens=10, output_tokens=5, usd=0.01, calls=2)),
    ExperimentInvalid(id="e0002", parent="b" * 40, reason="does not parse", diff="-x\n+x(\n",
                      prediction=PREDICTION),
    ProposalRebased(id="e0004", proposed_on="b" * 40, onto="c" * 40, outcome="rebased",
                    source="e0002"),
    ProposalAsked(request_id="p1", researcher="claude", incumbent="b" * 40, attempt=2),
    ProposalReady(request_id="p1", researcher="claude", outcome="proposal",
                  description="LR down", duration_s=41.5),
    RunStarted(run_id="r1", commit="c" * 40, seed=2000, role=Role.CANDIDATE, experiment="e0001",
               worker=3, device="cuda:3", budget_s=60.0),
    RunFinished(run_id="r1", commit="c" * 40, seed=2000, role=Role.CANDIDATE, experiment="e0001",
                status=Status.OK, metric=1.9, metrics={"steps": 10, "grad_norm": 0.5},
                duration_s=61.2, peak_memory_mb=900.0, exit_code=0, log="runs/r1/log.txt",
                log_tail="---\nval_bpb: 1.9", backend="local", env_fingerprint="abc", worker=3,
                device="cuda:3", node="10.0.0.7", started=1.7e9, ended=1.7e9 + 61.2),
    RunFinished(run_id="r3", commit="b" * 40, seed=2000, role=Role.REFERENCE, status=Status.OK,
                metric=1.95, curve=Curve((CurvePoint(0.02, 5.5, 0, 0.0), CurvePoint(0.5, 2.4, 150, 0.01),
                                          CurvePoint(1.0, 2.1, 300, None)), "64x64")),
    RunStoppedEarly(run_id="r4", experiment="e0001", seed=2001, checkpoint=0.5, reached=0.51,
                    gap=-0.08, predicted=-0.06, interval=(-0.09, -0.03), bound=-0.03, pairs=12,
                    partner="same seed", saved_s=31.5, reason="a discard stopped early at 50%"),
    RunUnpaired(run_id="r5", experiment="e0001", reason="a different batch shape (64x128 against 64x64)"),
    RunQueued(run_id="r2", job_id="4812"),
    RunBegan(run_id="r2", job_id="4812", node="gpu-17", queued_s=312.5),
    RunFinished(run_id="r2", commit="c" * 40, seed=2001, role=Role.CANDIDATE, experiment="e0001",
                status=Status.INTERRUPTED, reason="Slurm preempted job 4812 on gpu-17",
                node="gpu-17", job_id="4812", job_state="PREEMPTED", queued_s=312.5),
    LookTaken(id="e0001", seeds=1, reason="promising: p=0.1 at look 1 of 8"),
    DecisionMade(id="e0001", commit="c" * 40, incumbent="b" * 40, verdict=Verdict.KEEP,
                 reason="significant", decision=DECISION, score=SCORE),
    DecisionMade(id="e0003", commit="d" * 40, incumbent="c" * 40, verdict=Verdict.CRASH,
                 reason="crash on seed 3000"),
    ReplayRun(replay_id="r", commit="c" * 40, target_role="kept", experiment="e0001", seed=0,
              budget_s=600.0, split="test", status=Status.OK, metric=1.8, run_id="x",
              env_diff=[{"field": "torch", "original": "2.12", "current": "2.13", "material": True}],
              env_changed=True),
    ReplayCommit(replay_id="r", commit="c" * 40, target_role="kept", budget_s=600.0, split="test",
                 values={0: 1.8, 1: 1.81}, n_ok=2, mean=1.805, original={"kind": "reference", "n": 6},
                 reproduce={"reproduced": None}, proxy_effect=0.03, proxy_interval=(0.01, 0.05)),
    ReplaySummary(replay_id="r", budget_s=600.0, seeds=(0, 1), split="test",
                  commits=("c" * 40,), rank_effects={"rho": None, "n": 1}),
    AblationPlanned(ablation_id="a", incumbent="c" * 40, base="b" * 40, budget_s=600.0,
                    seeds=(700000, 700001), variants=[{"experiment": "e0001", "status": "planned",
                                                       "variant_commit": "f" * 40}]),
    AblationRun(ablation_id="a", variant="e0001", commit="f" * 40, seed=700000,
                status=Status.OK, metric=1.93, duration_s=600.2, run_id="y"),
    AblationChange(ablation_id="a", experiment="e0001", commit="c" * 40, parent="b" * 40,
                   variant_commit="f" * 40, values={700000: 1.93, 700001: 1.94},
                   contribution=0.03, interval=(0.01, 0.05), p_value=0.01, p_adjusted=0.02, n=2),
    AblationSummary(ablation_id="a", incumbent="c" * 40, base="b" * 40, budget_s=600.0,
                    seeds=(700000, 700001), incumbent_values={700000: 1.9, 700001: 1.91},
                    full_gain=0.03, full_interval=(0.0, 0.06), sum_contributions=0.03,
                    interaction=0.0, interaction_interval=(-0.01, 0.01), measured=("e0001",)),
]


def test_every_event_kind_is_covered_here():
    covered = {type(e) for e in ONE_OF_EACH}
    assert covered == set(EVENT_TYPES.values()) | set(REPLAY_TYPES.values())


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_json(event):
    line = json.dumps(event.to_dict(), allow_nan=False)
    back = parse_event(json.loads(line))
    assert back == event and type(back) is type(event)
    assert json.loads(line)["event"] == event.kind


def test_a_decision_is_a_record_not_a_nested_dict():
    event = next(e for e in ONE_OF_EACH if isinstance(e, DecisionMade))
    assert (event.effect, event.interval, event.p_value, event.seeds) == \
        (0.03, (0.01, 0.05), 0.002, (2000, 2001))
    assert event.score.covered and event.verdict is Verdict.KEEP
    on_disk = event.to_dict()
    assert on_disk["decision"]["candidate_values"] == {"2000": 1.9, "2001": 1.91}  # JSON keys
    assert on_disk["verdict"] == "keep" and on_disk["score"]["covered"] is True


def test_the_outcome_vocabulary_holds_every_run_failure():
    for status in Status:
        if status != Status.OK:
            assert Verdict.of_run(status).value == status.value and Verdict.of_run(status).is_failure
    assert not any(v.is_failure for v in (Verdict.KEEP, Verdict.DISCARD, Verdict.INCONCLUSIVE))
    assert Verdict.INVALID.is_failure
    with pytest.raises(ValueError):
        Verdict.of_run(Status.OK)


def test_an_old_ledger_reads_line_for_line_and_writes_back_the_same_fields():
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    kinds = {(d["event"], d.get("kind")) for d in lines}
    assert len(kinds) >= 11          # the fixture exercises nearly every kind
    for data in lines:
        event = parse_event(data)
        assert_same_fields(event, data, event.to_dict(), data["event"])


def assert_same_fields(record, data, again, where):
    """`again` (written back) holds every field of `data` (an old line) unchanged, nested
    records included; a key the old line lacked carries only its field's default."""
    for key, value in data.items():
        nested = getattr(record, key, None)
        if isinstance(value, dict) and dataclasses.is_dataclass(nested):
            assert_same_fields(nested, value, again.get(key), f"{where}.{key}")
        else:
            assert again.get(key) == value, f"{where}.{key}"
    defaults = {f.name: f.default for f in dataclasses.fields(record)
                if f.default is not dataclasses.MISSING}
    for key, value in again.items():
        if key not in data:
            assert value in (defaults.get(key), [], {}, ()), (where, key, value)


def test_an_old_ledger_folds_to_the_same_state_and_frames(tmp_path):
    expected = json.loads(EXPECTED.read_text())
    shutil.copy(FIXTURE, tmp_path / "ledger.jsonl")
    state = fold(read_events(tmp_path))
    facts = expected["state"]
    assert state.incumbent == facts["incumbent"] and state.base_commit == facts["base_commit"]
    assert len(state.runs) == facts["n_runs"] and state.stopped_reason == facts["stopped_reason"]
    assert list(state.in_flight) == [facts["in_flight"]]   # killed -9 mid-run, never resumed
    assert [list(h) for h in state.open_hypotheses()] == facts["open_hypotheses"]
    assert [e.id for e in state.kept()] == facts["kept"]
    assert {i: (str(e.verdict) if e.verdict else None) for i, e in state.experiments.items()} \
        == facts["verdicts"]
    frames = load(tmp_path)
    for name in ("experiments", "runs", "decisions", "replays", "replay_runs"):
        rows = frames[name].to_dict(orient="records")
        assert len(rows) == len(expected[name]), name
        for row, old in zip(rows, expected[name]):
            for column, value in old.items():
                mine = row.get(column)
                mine = None if isinstance(mine, float) and math.isnan(mine) else mine
                assert json.loads(json.dumps(mine, default=str)) == value, (name, column)


def test_a_run_stopped_early_is_never_a_result_a_reference_or_noise():
    """Even one that ended OK before the stop reached it: its value counts for nothing."""
    base, cand = "b" * 40, "c" * 40
    events = [LoopStarted(tag="t", base_commit=base),
              ExperimentProposed(id="e0001", commit=cand, parent=base, description="worse"),
              RunStarted(run_id="s", commit=cand, seed=1000, role=Role.CANDIDATE, experiment="e0001"),
              RunStoppedEarly(run_id="s", experiment="e0001", seed=1000, checkpoint=0.5, reached=0.5,
                              gap=-0.3, predicted=-0.3, interval=(-0.4, -0.2), bound=-0.2, pairs=9,
                              partner="same seed", saved_s=30.0),
              RunFinished(run_id="s", commit=cand, seed=1000, role=Role.CANDIDATE, experiment="e0001",
                          status=Status.OK, metric=2.5)]
    state = fold(events)
    experiment = state.experiments["e0001"]
    assert experiment.stopped_early.run_id == "s" and experiment.runs == [] and not experiment.decided
    assert state.ok_values(cand) == {} and state.noise_groups() == [] and state.runs == []
    assert [r.run_id for r in state.interrupted] == ["s"] and not state.in_flight
