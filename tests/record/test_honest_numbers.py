"""A kept commit is shown at its fresh-seed value, everywhere a person reads it.

The night below is the winner's curse in miniature: the truth of both commits is 2.00, the
candidate's selecting runs happened to come out at 1.90 and it was kept. results.tsv,
`status` and the report must show it at what its fresh seeds say (2.00), with the
selection mean only as a labelled aside, and "not yet measured" before those runs exist.
"""
import csv

from rich.console import Console

from agent.cli.display import print_status
from agent.record.events import (Decision, DecisionMade, ExperimentProposed, LoopStarted,
                                 Prediction, RunFinished, RunStarted, Verdict)
from agent.record.ledger import Ledger
from agent.record.records import Direction
from agent.record.views import TSV_FILE, write_tsv
from agent.review.report import build_context
from sandbox import Status

BASE, KEPT = "a" * 40, "b" * 40
BASE_VALUES = {0: 2.01, 1: 1.99, 2: 2.02, 3: 1.98}
SELECTING = {1000: 1.89, 1001: 1.91}            # the lucky runs that selected it
FRESH = {0: 2.00, 1: 2.01, 2: 1.99, 3: 2.02}     # its value, measured after the keep


def run(ledger, commit, seed, role, value, experiment=None):
    run_id = f"{commit[:4]}-{role}-{seed}"
    ledger.append(RunStarted(run_id=run_id, commit=commit, seed=seed, role=role, experiment=experiment))
    ledger.append(RunFinished(run_id=run_id, commit=commit, seed=seed, role=role, experiment=experiment,
                              status=Status.OK, metric=value, duration_s=1.0))


def kept_night(folder, fresh=True):
    ledger = Ledger(folder)
    ledger.append(LoopStarted(tag="curse", base_commit=BASE, program={"metric": "val_bpb"}))
    for seed, value in BASE_VALUES.items():
        run(ledger, BASE, seed, "reference", value)
    ledger.append(ExperimentProposed(id="e0001", commit=KEPT, parent=BASE, description="lucky",
                                     prediction=Prediction("improve", -0.1, (-0.2, 0.0)), researcher="x"))
    for seed, value in SELECTING.items():
        run(ledger, KEPT, seed, "candidate", value, "e0001")
        run(ledger, BASE, seed, "reference", 2.0)
    ledger.append(DecisionMade(id="e0001", commit=KEPT, incumbent=BASE, verdict=Verdict.KEEP,
                               decision=Decision(Verdict.KEEP, effect=0.1, interval=(0.05, 0.15),
                                                 p_value=0.01, seeds=(1000, 1001))))
    if fresh:
        for seed, value in FRESH.items():
            run(ledger, KEPT, seed, "reference", value)
    return ledger


def tsv_rows(folder):
    with open(folder / TSV_FILE, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def status_text(folder):
    console = Console(record=True, width=200)
    print_status(console, folder, "val_bpb")
    return console.export_text()


def test_results_tsv_shows_a_kept_commit_at_its_fresh_seed_value(tmp_path):
    ledger = kept_night(tmp_path)
    write_tsv(ledger.state, tmp_path)
    baseline, row = tsv_rows(tmp_path)
    assert (baseline["description"], float(baseline["val_bpb"])) == ("baseline", 2.0)
    assert row["status"] == "keep" and float(row["val_bpb"]) == sum(FRESH.values()) / 4
    assert row["description"] == "lucky"


def test_results_tsv_labels_the_selection_mean_until_the_fresh_seeds_land(tmp_path):
    ledger = kept_night(tmp_path, fresh=False)
    write_tsv(ledger.state, tmp_path)
    _, row = tsv_rows(tmp_path)
    assert float(row["val_bpb"]) == sum(SELECTING.values()) / 2
    assert "selection mean: not yet measured on fresh seeds" in row["description"]


def test_status_prints_the_incumbent_fresh_or_not_yet_measured(tmp_path):
    kept_night(tmp_path / "measured")
    text = status_text(tmp_path / "measured")
    assert "incumbent bbbbbbbb  val_bpb 2.0050" in text and "fresh seeds" in text
    assert "selection mean 1.9000 over 2 seeds (biased low by selection)" in text   # val_bpb is minimized
    console = Console(record=True, width=200)
    print_status(console, tmp_path / "measured", "accuracy", direction=Direction.MAXIMIZE)
    assert "(biased high by selection)" in console.export_text()
    kept_night(tmp_path / "not_yet", fresh=False)
    text = status_text(tmp_path / "not_yet")
    assert "incumbent bbbbbbbb  val_bpb not yet measured on fresh seeds" in text


def test_the_reports_headline_is_fresh_incumbent_against_fresh_baseline_with_its_interval(tmp_path):
    kept_night(tmp_path)
    context = build_context(tmp_path)
    assert context["best"]["mean"] == sum(FRESH.values()) / 4 and context["best"]["fresh"]
    assert context["best"]["selection_mean"] == 1.90
    improvement = context["improvement"]
    diffs = [BASE_VALUES[s] - FRESH[s] for s in FRESH]        # minimised: baseline - incumbent
    assert abs(improvement["value"] - sum(diffs) / 4) < 1e-12 and improvement["paired"] == 4
    lo, hi = improvement["interval"]
    assert lo < 0 < hi                                         # the truth: no improvement
    assert context["chart_data"]["frontier"][-1][1] == sum(FRESH.values()) / 4


def test_the_report_has_no_headline_before_the_fresh_seeds(tmp_path):
    kept_night(tmp_path, fresh=False)
    context = build_context(tmp_path)
    assert context["improvement"] is None and context["best"]["mean"] is None
    assert context["best"]["selection_mean"] == 1.90


def test_status_shows_a_run_of_a_dead_loop_as_interrupted(tmp_path):
    ledger = kept_night(tmp_path)
    ledger.append(RunStarted(run_id="ghost", commit=KEPT, seed=7, role="reference"))
    text = status_text(tmp_path)
    assert "interrupted (no loop runs on this tag" in text and "in flight" not in text
