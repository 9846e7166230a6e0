"""`nightshift status --json` and `nightshift show ID [--json]` as an agent calls them: the real
command line in a subprocess, its stdout parsed as one JSON document and validated against the
shipped schema, closed (tests/interface/strict.py)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from tests.interface.night import TAG
from tests.interface.strict import validate
from tests.loop_helpers import cli_env, nightshift


def cli(night, *args: str):
    return nightshift(night.repo, *args, env=cli_env(night.repo.parent), timeout=120)


def document(night, *args: str) -> dict:
    done = cli(night, *args, "--tag", TAG, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)     # the whole of stdout: one document and nothing else


def test_status_json_is_one_valid_document_of_the_night(night):
    status = document(night, "status")
    validate(status, "status")
    c1 = night.commits["e0001"]
    assert status["schema"] == "nightshift.status/1" and status["tag"] == TAG
    assert (status["metric"], status["direction"]) == ("val_bpb", "minimize")
    assert status["counts"] == {"discard": 1, "invalid": 1, "keep": 1, "misreported": 1, "pending": 1}
    assert status["baseline"]["commit"] == night.base and status["baseline"]["mean"] == 2.01
    incumbent = status["incumbent"]
    assert (incumbent["commit"], incumbent["experiment"]) == (c1, "e0001")
    assert incumbent["values"] == [{"seed": 2, "value": 1.965}, {"seed": 3, "value": 1.975}]   # fresh seeds
    assert abs(incumbent["selection_mean"] - 1.965) < 1e-12 and abs(incumbent["mean"] - 1.97) < 1e-12
    assert status["noise"]["sd"] > 0 and status["noise"]["dof"] == 4   # base: 2 runs, e0001: 4
    rows = {row["id"]: row for row in status["experiments"]}
    assert [row["verdict"] for row in rows.values()] == ["keep", "discard", "invalid", "misreported", "pending"]
    assert abs(rows["e0002"]["delta"] - 0.02) < 1e-12 and rows["e0002"]["parent"] == c1
    assert status["pending"] == ["e0005"]
    [flying] = status["in_flight"]
    assert (flying["experiment"], flying["seed"], flying["role"]) == ("e0005", 2, "candidate")
    [flagged] = status["flagged"]
    assert flagged["id"] == "e0004" and flagged["verdict"] == "misreported"
    assert flagged["evidence"] == {"reported": 0.5, "measured": 2.1, "seed": 2}
    assert [k["id"] for k in status["kept"]] == ["e0001"] and status["kept"][0]["interval"] == [0.01, 0.08]
    assert status["running"] is False and status["lock"] is None
    assert status["stopped_reason"] == "interrupted (Ctrl-C)"
    assert status["hypotheses"] == [{"id": "h0002", "text": "a longer warmup", "origin": "cli"}]


def test_show_json_has_everything_about_one_experiment(night):
    shown = document(night, "show", "e0001")
    validate(shown, "experiment")
    assert shown["schema"] == "nightshift.experiment/1" and shown["kind"] == "experiment"
    assert (shown["id"], shown["commit"], shown["parent"]) == ("e0001", night.commits["e0001"], night.base)
    assert shown["prediction"] == {"direction": "improve", "expected_delta": -0.03, "interval": [-0.06, 0.0],
                                   "confidence": 0.8, "rationale": "a wider model fits more"}
    assert shown["verdict"] == "keep" and shown["decision"]["p_value"] == 0.012
    assert shown["decision"]["comparison"]["paired"] is True
    assert shown["score"]["covered"] is True and shown["extra"] == {"params": {"WIDTH": 128}}
    assert "-WIDTH = 64" in shown["diff"] and "+WIDTH = 128" in shown["diff"]   # git diff parent..commit
    assert [(p["seed"], p["candidate"], p["incumbent"]) for p in shown["pairs"]] == [(0, 1.96, 2.0), (1, 1.97, 2.02)]
    assert [run["seed"] for run in shown["runs"]] == [0, 1] and all(run["counted"] for run in shown["runs"])
    run = shown["runs"][0]
    assert Path(run["log"]).is_absolute() and Path(run["log"]).read_text().startswith("step 100")
    assert run["curve"]["fractions"] == [0.1, 0.25, 0.5, 0.75, 1.0] and len(run["curve"]["losses"]) == 5
    assert run["curve"]["steps"] == [10, 25, 50, 75, 100] and run["curve"]["placed"] == "elapsed"
    for figure in ("grad_norm", "update_ratio", "tokens_per_s", "flops_per_s", "train_loss"):
        assert isinstance(run["dynamics"][figure], float), figure
    assert (run["measured_by"], run["eval_duration_s"], run["peak_memory_mb"]) == ("evaluator", 0.4, 812.5)
    # what each candidate run is compared with: the parent on the same seeds
    assert [(r["commit"], r["seed"], r["metric"]) for r in shown["parent_runs"]] == \
        [(night.base, 0, 2.0), (night.base, 1, 2.02)]
    assert all(r["dynamics"] and r["curve"] for r in shown["parent_runs"])
    assert [r["seed"] for r in shown["reference_runs"]] == [2, 3]     # its fresh seeds, once kept


def test_show_incumbent_is_the_kept_experiment_the_night_stands_on(night):
    shown = document(night, "show", "incumbent")
    validate(shown, "experiment")
    assert shown["id"] == "e0001" and shown["commit"] == night.commits["e0001"]


def test_an_unknown_id_names_the_ids_there_are_and_exits_1(night):
    done = cli(night, "show", "e0099", "--tag", TAG, "--json")
    assert done.returncode == 1 and done.stdout == ""
    assert "e0099" in done.stderr and "e0001, e0002, e0003, e0004, e0005" in done.stderr
    assert "incumbent" in done.stderr


def test_a_tag_without_a_ledger_is_the_usual_error_and_nothing_on_stdout(night):
    for command in (("status",), ("show", "e0001")):
        done = cli(night, *command, "--tag", "nope", "--json")
        assert done.returncode == 1 and done.stdout == ""
        assert "no loop at" in done.stderr and f"Known tags: {TAG}" in done.stderr


def test_without_json_a_person_reads_text(night):
    done = cli(night, "show", "e0001", "--tag", TAG)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("e0001 keep") and "WIDTH 64 -> 128" in text
    assert "effect +0.0450 [+0.0100, +0.0800] p=0.012 on 2 seeds" in text
    # the prediction is the metric's raw change, not an effect: it says so where it is shown
    assert "prediction: improve, delta -0.0300 [-0.0600, +0.0000] at 80% (candidate − incumbent)" in text
    assert re.search(r"prediction held: measured delta -0\.\d+ \(candidate − incumbent\)", text), text
    assert "grad_norm 0.8" in text and "curve: 5 points" in text and "+WIDTH = 128" in text
    status = cli(night, "status", "--tag", TAG)
    assert status.returncode == 0 and status.stdout.startswith(f"{TAG}: 5 experiments")
