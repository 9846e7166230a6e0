"""The night's efficiency figure (agent/review/efficiency.py) on a ledger written by the real
record writer: every run in one share, the shares add to 1, the counts are the hand counts,
and `nightshift status` and the report show it."""
from dataclasses import replace
from io import StringIO

import pytest
from rich.console import Console

from agent.cli.display import print_status
from agent.interface.views import Night, status_view
from agent.program import load_program
from agent.record.events import (DecisionMade, ExperimentInvalid, ExperimentProposed, LoopResumed,
                                 LoopStarted, RunFinished, RunStarted, RunStoppedEarly, Verdict)
from agent.record.ledger import Ledger, read_events
from agent.record.state import fold
from agent.review.efficiency import SHARES, calibration_seeds, night_efficiency
from agent.review.report import build_context, write_report
from sandbox import Status
from tests.interface.strict import validate
from tests.loop_helpers import cli_env, make_repo, nightshift

PROGRAM = {"decision": "sequential", "direction": "minimize",
           "seeds": {"baseline": 2, "screen": 1, "max": 2, "repeat": 1}}


def write_night(folder):
    """Base on calibration seeds 0, 1 (and seed 0 again: the night's repeat); e0001 paired on
    1000, 1001 and kept; its commit on seeds 0, 1; e0002 paired on 2000 and stopped early;
    e0003 crashed; a reference run cut off by a kill (the night resumed)."""
    ledger = Ledger(folder)
    count = 0

    def run(commit, seed, role, value, experiment=None, status=Status.OK, duration=10.0):
        nonlocal count
        count += 1
        run_id = f"r{count}"
        ledger.append(RunStarted(run_id=run_id, commit=commit, seed=seed, role=role, experiment=experiment))
        if status is not None:
            ledger.append(RunFinished(run_id=run_id, commit=commit, seed=seed, role=role,
                                      experiment=experiment, status=status, duration_s=duration,
                                      metric=value if status == Status.OK else None))
        return run_id

    ledger.append(LoopStarted(tag="eff", base_commit="base", program=PROGRAM, budget_s=10))
    run("base", 0, "reference", 2.0)
    run("base", 1, "reference", 2.1)
    run("base", 0, "reference", 2.01)                          # the repeat: calibration too
    ledger.append(ExperimentProposed(id="e0001", commit="c1", parent="base", description="a win"))
    run("base", 1000, "reference", 2.05)
    run("c1", 1000, "candidate", 1.8, "e0001")
    run("base", 1001, "reference", 2.02)
    run("c1", 1001, "candidate", 1.78, "e0001")
    ledger.append(DecisionMade(id="e0001", commit="c1", incumbent="base", verdict=Verdict.KEEP))
    run("c1", 0, "reference", 1.75)
    run("c1", 1, "reference", 1.85)
    ledger.append(ExperimentProposed(id="e0002", commit="c2", parent="c1", description="a loser"))
    run("c1", 2000, "reference", 1.8)
    stopped = f"r{count + 1}"
    ledger.append(RunStarted(run_id=stopped, commit="c2", seed=2000, role="candidate", experiment="e0002"))
    ledger.append(RunStoppedEarly(run_id=stopped, experiment="e0002", seed=2000, checkpoint=0.25,
                                  reached=0.26, gap=-1.0, predicted=-0.5, interval=(-0.7, -0.3),
                                  bound=-0.3, pairs=0, partner="same seed", saved_s=7.0))
    ledger.append(RunFinished(run_id=stopped, commit="c2", seed=2000, role="candidate", experiment="e0002",
                              status=Status.INTERRUPTED, duration_s=3.0, reason="stopped early"))
    count += 1
    ledger.append(DecisionMade(id="e0002", commit="c2", incumbent="c1", verdict=Verdict.DISCARD))
    ledger.append(ExperimentProposed(id="e0003", commit="c3", parent="c1", description="a crash"))
    run("c3", 2000, "candidate", None, "e0003", status=Status.CRASH, duration=1.0)
    ledger.append(DecisionMade(id="e0003", commit="c3", incumbent="c1", verdict=Verdict.CRASH))
    run("c1", 2001, "reference", None, status=None)              # killed with its harness
    ledger.append(LoopResumed(tag="eff"))
    return folder


# by hand: calibration base 0, 1, 0 again, c1 0, 1; paired base 1000, 1001, c1 2000;
# candidates c1 1000, 1001; stopped c2 2000; failed c3's crash and the killed reference run
HAND = {"calibration": 5, "paired": 3, "candidates": 2, "stopped": 1, "failed": 2, "other": 0}


@pytest.mark.parametrize("seeds", ["from the program", "from the ledger alone"])
def test_every_run_counted_once_and_the_shares_add_to_one(tmp_path, seeds):
    state = fold(read_events(write_night(tmp_path / "eff")))
    calibration = calibration_seeds(PROGRAM) if seeds == "from the program" else None
    if calibration is not None:
        assert calibration == {0, 1}
    figure = night_efficiency(state, "minimize", calibration)
    assert figure.counts() == HAND
    assert figure.runs == 13 == len(state.runs) + len(state.interrupted)
    assert sum(figure.shares().values()) == pytest.approx(1.0)
    assert figure.shares()["calibration"] == pytest.approx(5 / 13)
    # the headline: c1 on its reference runs against the base on its own, paired on the two
    # calibration seeds they share (seed 0: 2.0 - 1.75, seed 1: 2.1 - 1.85): by hand
    gain = ((2.0 - 1.75) + (2.1 - 1.85)) / 2
    assert figure.improvement == pytest.approx(gain) == pytest.approx(0.25) and figure.kept == 1
    assert figure.per_run == pytest.approx(gain / 13)
    run_s = 10.0 * 10 + 3.0 + 1.0            # ten finished OK runs, the stopped one, the crash
    assert figure.run_s == pytest.approx(run_s)
    assert figure.per_hour == pytest.approx(gain / (run_s / 3600))
    assert set(figure.counts()) == set(SHARES)


def test_a_night_that_kept_nothing_made_no_progress_and_one_not_measured_says_so(tmp_path):
    state = fold(read_events(write_night(tmp_path / "eff")))
    state.incumbent = state.base_commit             # as if e0001 had not been kept
    state.experiments["e0001"].decision = None
    assert night_efficiency(state).improvement == 0.0
    assert night_efficiency(state).per_run == 0.0
    unmeasured = fold(e for e in read_events(tmp_path / "eff")
                      if not (isinstance(e, (RunStarted, RunFinished)) and e.commit == "c1"
                              and e.role == "reference"))
    figure = night_efficiency(unmeasured)
    assert figure.improvement is None and figure.per_run is None
    assert "not measured yet" in figure.line()


def test_status_and_the_report_show_the_figure(tmp_path):
    folder = write_night(tmp_path / "eff")
    out = StringIO()
    print_status(Console(file=out, width=250), folder, "val_bpb")
    text = out.getvalue()
    assert "efficiency: estimated improvement +0.2500 (incumbent vs baseline, fresh seeds) in 13 runs: " \
           "+0.01923 per run" in text
    assert ("runs: calibration 38% (5), paired references 23% (3), candidates to the end 15% (2), "
            "stopped early 8% (1), failed 15% (2)") in text
    assert ("run time: calibration 48% (50 s), paired references 29% (30 s), candidates to the end "
            "19% (20 s), stopped early 3% (3 s), failed 1% (1 s)") in text
    assert ("the single-run rule: 4 runs, about 40 s on these proposals; this night: 104 s (2.60x); "
            "a cost estimate only") in text
    # the command itself, on a repository holding the night
    repo = make_repo(tmp_path / "user", {"program.md": "---\nresearcher: scripted\n---\nA toy.\n"})
    write_night(repo / "results" / "eff")
    done = nightshift(repo, "status", "--tag", "eff", env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    shown = " ".join(done.stdout.split())
    assert "efficiency: estimated improvement +0.2500" in shown and "+0.01923 per run" in shown
    assert "calibration 38% (5), paired references 23% (3)" in shown
    context = build_context(folder)
    assert context["efficiency"]["runs"] == 13 and context["efficiency"]["calibration"] == 5
    page = write_report(folder).html.read_text()
    assert 'id="efficiency"' in page and "calibration <b>38%</b> (5)" in page
    assert "+0.01923 per run" in page
    assert "calibration <b>48%</b> (50 s)" in page and "stopped early <b>3%</b> (3 s)" in page
    assert "4 runs, about <b>40 s</b> on these proposals; this night: <b>104 s</b> (2.60x)" in page


# write_night's runs, each given its own length (r13, killed with its harness, recorded none)
DURATIONS = {"r1": 12.0, "r2": 14.0, "r3": 13.0, "r4": 9.0, "r5": 20.0, "r6": 8.0, "r7": 22.0,
             "r8": 15.0, "r9": 16.0, "r10": 7.0, "r11": 4.5, "r12": 2.0}


def timed_night(folder):
    """write_night with DURATIONS, and an invalid edit (it never ran under either rule)."""
    write_night(folder)
    Ledger(folder).append(ExperimentInvalid(id="e0004", parent="c1", reason="train.py does not parse",
                                            description="a typo"))
    return fold(replace(e, duration_s=DURATIONS[e.run_id]) if isinstance(e, RunFinished) else e
                for e in read_events(folder))


def test_each_share_in_run_seconds_a_stopped_run_by_what_it_ran(tmp_path):
    figure = night_efficiency(timed_night(tmp_path / "eff"), "minimize", calibration_seeds(PROGRAM))
    assert figure.counts() == HAND
    # by hand: calibration r1 r2 r3 r8 r9, paired r4 r6 r10, candidates r5 r7; the stopped run
    # counts the 4.5 s it ran (not its budget, nor the 7 s it saved); the killed run 0 s
    assert figure.run_seconds() == pytest.approx({
        "calibration": 12 + 14 + 13 + 15 + 16, "paired": 9 + 8 + 7, "candidates": 20 + 22,
        "stopped": 4.5, "failed": 2.0, "other": 0.0})
    assert figure.run_s == pytest.approx(142.5) == pytest.approx(sum(figure.run_seconds().values()))
    assert figure.time_shares()["calibration"] == pytest.approx(70 / 142.5)
    assert figure.time_shares()["stopped"] == pytest.approx(4.5 / 142.5)
    assert figure.per_run_second == pytest.approx(0.25 / 142.5)
    rows = {row["kind"]: row for row in figure.rows()}
    assert rows["stopped"]["count"] == 1 and rows["stopped"]["seconds"] == pytest.approx(4.5)
    assert rows["paired"]["time_share"] == pytest.approx(24 / 142.5)
    assert figure.time_line() == ("calibration 49% (70 s), paired references 17% (24 s), "
                                  "candidates to the end 29% (42 s), stopped early 3% (4 s), failed 1% (2 s)")


def test_the_single_run_rule_s_cost_on_the_same_proposals(tmp_path):
    figure = night_efficiency(timed_night(tmp_path / "eff"), "minimize", calibration_seeds(PROGRAM))
    single = figure.single_run
    # the baseline once and e0001, e0002, e0003 once each (the invalid edit e0004 never ran),
    # each as long as the median full run: r1..r10 -> (13 + 14) / 2; the stopped run is not full
    assert single.runs == 4 and single.median_s == pytest.approx(13.5)
    assert single.estimate_s == pytest.approx(54.0) and single.night_s == pytest.approx(142.5)
    assert single.ratio == pytest.approx(142.5 / 54.0)
    assert single.line() == ("the single-run rule: 4 runs, about 54 s on these proposals; this night: "
                             "2.4 min (2.64x); a cost estimate only: its keeps would differ")
    assert figure.to_dict()["single_run"]["estimate_s"] == pytest.approx(54.0)


def test_no_single_run_figure_before_a_full_run(tmp_path):
    folder = tmp_path / "eff"
    ledger = Ledger(folder)
    ledger.append(LoopStarted(tag="eff", base_commit="base", program=PROGRAM, budget_s=10))
    ledger.append(RunStarted(run_id="r1", commit="base", seed=0, role="reference"))
    ledger.append(RunFinished(run_id="r1", commit="base", seed=0, role="reference",
                              status=Status.CRASH, duration_s=2.0))
    figure = night_efficiency(fold(read_events(folder)))
    assert figure.single_run is None and figure.to_dict()["single_run"] is None
    assert figure.run_seconds()["failed"] == pytest.approx(2.0)


def test_status_json_carries_the_run_time_shares_and_the_single_run_cost(tmp_path):
    state = timed_night(tmp_path / "eff")
    (tmp_path / "program.md").write_text("---\nresearcher: scripted\n---\nA toy.\n")
    document = status_view(Night(tag="eff", folder=tmp_path / "eff", state=state,
                                 program=load_program(tmp_path / "program.md")))
    validate(document, "status")                  # every new field in the schema (and docs/json.md)
    figure = document["efficiency"]
    assert figure["runs"] == 13 and figure["run_s"] == pytest.approx(142.5)
    shares = {row["kind"]: row for row in figure["shares"]}
    assert shares["stopped"]["seconds"] == pytest.approx(4.5) and shares["failed"]["seconds"] == pytest.approx(2.0)
    assert shares["candidates"]["time_share"] == pytest.approx(42 / 142.5)
    assert figure["per_run_second"] == pytest.approx(0.25 / 142.5)
    assert figure["single_run"]["runs"] == 4 and figure["single_run"]["estimate_s"] == pytest.approx(54.0)
    assert figure["single_run"]["ratio"] == pytest.approx(142.5 / 54.0)
