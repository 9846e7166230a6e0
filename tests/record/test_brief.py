"""The brief a researcher reads: complete, in the prediction's sign convention, bounded, cacheable."""
import dataclasses

import pytest

from agent.record.brief import CHUNK, MAX_HISTORY_CHARS, RECENT, EvaluationPlan, build_brief, experiment_line
from agent.record.events import (Decision, DecisionMade, ExperimentInvalid, ExperimentProposed, LoopStarted,
                                 Prediction, RunFinished, RunStoppedEarly, Score, Verdict)
from agent.record.ledger import Ledger
from agent.record.records import Direction
from sandbox import Status

PLAN = EvaluationPlan(metric="val_bpb", direction=Direction.MINIMIZE, budget_s=60, seeds_baseline=6, seeds_screen=1,
                seeds_max=8, alpha=0.04, min_effect=0.001, rule="sequential")
METRICS = {"steps": 1200, "tokens_per_s": 45_000.0, "peak_memory_mb": 812.0, "grad_norm": 0.42,
           "mfu": 0.31, "device": "cuda", "split": "val", "knobs": {"LR": 0.01}}
ENV = {"gpus": ["NVIDIA H200, 141 GB, 570.1"], "cpu_count": 16, "torch": "2.13.0", "cuda": "13.0"}


def night(tmp_path, n: int, keep_every: int = 17) -> Ledger:
    ledger = Ledger(tmp_path)
    ledger.append(LoopStarted(tag="t", base_commit="base0000"))
    for seed in range(3):
        ledger.append(RunFinished(run_id=f"b{seed}", commit="base0000", seed=seed, role="reference",
                                  status=Status.OK, metric=2.0 + seed / 100, metrics=METRICS,
                                  log_tail=f"step 1200 | loss 1.95 | seed {seed}\nval_bpb: 2.0"))
    for i in range(1, n + 1):
        eid, commit = f"e{i:04d}", f"c{i:07d}"
        prediction = Prediction("improve", -0.01, (-0.03, 0.01), 0.8, "a reason")
        if i % 11 == 0:
            ledger.append(ExperimentInvalid(id=eid, parent="base0000", reason="the API rejected the request",
                                            description=f"idea {i}"))
            continue
        ledger.append(ExperimentProposed(id=eid, commit=commit, parent="base0000", description=f"idea {i}",
                                         hypothesis="h", prediction=prediction, researcher="claude"))
        ledger.append(RunFinished(run_id=f"r{i}", commit=commit, seed=0, role="candidate", experiment=eid,
                                  status=Status.OK, metric=1.98))
        verdict = Verdict.KEEP if i % keep_every == 0 else Verdict.DISCARD
        ledger.append(DecisionMade(
            id=eid, commit=commit, incumbent="base0000", verdict=verdict, reason="test",
            decision=Decision(verdict=verdict, effect=0.02, interval=(0.005, 0.035), p_value=0.012,
                              seeds=(0, 1, 2, 3)),
            score=Score(measured_delta=-0.02, measured_direction="improve", direction_right=True,
                        covered=True, error=-0.01, confidence=0.8)))
    return ledger


def test_an_experiment_line_speaks_the_predictions_sign_convention(tmp_path):
    state = night(tmp_path, 1).state
    line = experiment_line(state.experiments["e0001"], Direction.MINIMIZE)
    # the rule's effect +0.02 is an improvement; as candidate − incumbent it is −0.02
    assert line.startswith("e0001 discard Δ-0.0200 [-0.0350, -0.0050] n=4 p=0.012")
    assert "pred -0.0100 [-0.0300, +0.0100]@80% held" in line and line.endswith("| idea 1")
    assert experiment_line(state.experiments["e0001"], Direction.MAXIMIZE).startswith("e0001 discard Δ+0.0200 [+0.0050, +0.0350]")


def test_the_brief_holds_the_test_the_device_the_incumbents_runs_and_its_log(tmp_path):
    brief = build_brief(night(tmp_path, 3).state, PLAN, noise_sd=0.0123, noise_dof=9, environment=ENV)
    assert "60 s" in brief.setup and "6 fresh seeds" in brief.setup and "at most 8" in brief.setup
    assert "alpha 0.04" in brief.setup and "min_effect 0.001" in brief.setup
    assert "device cuda" in brief.setup and "NVIDIA H200" in brief.setup and "torch 2.13.0" in brief.setup
    for shown in ("tokens_per_s 45,000", "grad_norm 0.42", "mfu 0.31", "peak_memory_mb 812", "steps 1,200"):
        assert shown in brief.incumbent, shown
    assert "knobs" not in brief.incumbent and "loss 1.95" in brief.incumbent
    assert "sd 0.0123" in brief.recent and "9 dof" in brief.recent


def test_every_experiment_of_the_night_has_its_line(tmp_path):
    state = night(tmp_path, 300).state
    text = build_brief(state, PLAN).text()
    for eid in state.experiments:
        assert f"\n{eid} " in text, eid
    assert "the API rejected the request" in text        # an invalid one says why


@pytest.mark.parametrize("n", [100, 500, 2000])
def test_the_brief_stays_bounded(tmp_path, n):
    brief = build_brief(night(tmp_path, n).state, PLAN, environment=ENV)
    assert len(brief.history) <= MAX_HISTORY_CHARS + 200
    assert brief.recent.count("\ne") <= CHUNK + RECENT
    assert len(brief.text()) < 60_000


def test_the_history_section_changes_once_per_chunk_so_a_cache_can_hold_it(tmp_path):
    ledger = night(tmp_path, 2 * CHUNK + RECENT + 3)
    first = build_brief(ledger.state, PLAN)
    ledger.append(ExperimentInvalid(id="e9999", parent="base0000", reason="x"))
    second = build_brief(ledger.state, PLAN)
    assert first.history and first.history == second.history and first.recent != second.recent


def test_a_discard_stopped_early_reads_as_one_never_as_a_measurement(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(LoopStarted(tag="t", base_commit="base0000"))
    ledger.append(ExperimentProposed(id="e0001", commit="c0000001", parent="base0000", description="LR x3",
                                     prediction=Prediction("improve", -0.01, (-0.03, 0.01), 0.8)))
    ledger.append(RunStoppedEarly(run_id="r1", experiment="e0001", seed=1000, checkpoint=0.5, reached=0.52,
                                  gap=-0.2, predicted=-0.31, interval=(-0.45, -0.17), bound=-0.17, pairs=14,
                                  partner="same seed", saved_s=29.0, reason="a discard stopped early at 50%"))
    ledger.append(DecisionMade(id="e0001", commit="c0000001", incumbent="base0000", verdict=Verdict.DISCARD,
                               reason="a discard stopped early at 50%",
                               decision=Decision(verdict=Verdict.DISCARD, rule="early_stop")))
    line = experiment_line(ledger.state.experiments["e0001"], Direction.MINIMIZE)
    # what its curve predicted, in the prediction's convention (candidate − incumbent), labelled
    assert line.startswith("e0001 discard stopped early at 50% (its curve predicted Δ+0.3100 "
                           "[+0.1700, +0.4500]; not a measurement)"), line
    assert "held" not in line and "missed" not in line and "p=" not in line
    brief = build_brief(ledger.state, dataclasses.replace(PLAN, early_stop=(0.25, 0.5, 0.75)))
    assert "25%, 50%, 75% of its budget" in brief.setup and "a discard stopped early" in brief.setup
    assert "stopped early" not in build_brief(ledger.state, PLAN).setup     # off: not said


def flagged_night(tmp_path) -> Ledger:
    ledger = night(tmp_path, 2)
    ledger.append(ExperimentProposed(id="e0003", commit="c0000003", parent="base0000",
                                     description="attention sees the whole window", hypothesis="h"))
    ledger.append(RunFinished(run_id="r3", commit="c0000003", seed=0, role="candidate", experiment="e0003",
                              status=Status.LOOKAHEAD, reason="the evaluator's causality probe failed"))
    ledger.append(DecisionMade(id="e0003", commit="c0000003", incumbent="base0000", verdict=Verdict.LOOKAHEAD,
                               reason="lookahead on seed 0: the evaluator's causality probe failed: "
                                      "predictions before it moved by 0.58 nats"))
    return ledger


def test_a_flagged_candidate_is_named_with_its_reason_and_the_goal_restated(tmp_path):
    plan = EvaluationPlan(**{**PLAN.__dict__, "evaluator": True})
    brief = build_brief(flagged_night(tmp_path).state, plan)
    assert "the harness's evaluator, in a sandbox of its own, scores the saved model" in brief.setup
    assert "Flagged, not kept (1): these changed how val_bpb was produced" in brief.recent
    assert "- e0003 lookahead: lookahead on seed 0: the evaluator's causality probe failed" in brief.recent
    assert "What counts is the lowest val_bpb that the harness measures on held-out data" in brief.recent
    assert "failed to run" not in brief.recent        # an integrity verdict is not counted as a crash
    assert "Flagged" not in build_brief(night(tmp_path / "clean", 2).state, plan).recent


def test_lines_the_command_overrides_are_named_fixed_in_the_setup(tmp_path):
    fixed = ("batch_size (line 18) by --batch_size=12", "n_embd (line 24) by --n_embd=128")
    plan = EvaluationPlan(**{**PLAN.__dict__, "target": "config/train_shakespeare_char.py", "fixed": fixed})
    setup = build_brief(night(tmp_path, 1).state, plan).setup
    assert ("Fixed by the command: its flags override these lines of config/train_shakespeare_char.py, "
            "so editing them changes nothing that runs") in setup
    assert "batch_size (line 18) by --batch_size=12; n_embd (line 24) by --n_embd=128." in setup
    assert "Fixed by the command" not in build_brief(night(tmp_path / "b", 1).state, PLAN).setup
