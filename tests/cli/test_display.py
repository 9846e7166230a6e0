"""What the console says of a decision: the evidence and the rule's whole reason."""
from rich.console import Console

from agent.cli.display import RichObserver
from agent.record.events import Decision, DecisionMade, Role, RunFinished, Verdict
from sandbox.protocol import Status

REASON = ("futility: p=0.45 >= 0.16 at look 3 (3 of up to 8 seeds, unknown regime; or the 3 pairs' "
          "own t test, Bonferroni)")


def printed(seeds: tuple[int, ...]) -> str:
    console = Console(record=True, width=400, highlight=False)
    decision = Decision(verdict=Verdict.DISCARD, effect=-0.0013, interval=(-0.025, 0.0224),
                        p_value=0.908, seeds=seeds, reason=REASON)
    RichObserver(console).decided(DecisionMade(id="e0001", commit="aa0559c1", incumbent="337f1353",
                                               verdict=Verdict.DISCARD, reason=REASON, decision=decision))
    return console.export_text()


def test_a_decision_line_carries_the_rule_s_whole_reason():
    # the quick start of 2026-12-04 printed "...; or the 3 pairs' own t test, " and stopped there
    text = printed((1000, 1001, 1002))
    assert "e0001 DISCARD effect -0.0013 [-0.0250, +0.0224] p=0.908 on 3 seeds" in text
    assert text.rstrip().endswith("own t test, Bonferroni)"), text


def test_one_seed_is_one_seed():
    assert "p=0.908 on 1 seed " in printed((1000,)).replace(",", " ")


def finished_line(results, status: Status, reason: str = "") -> str:
    console = Console(record=True, width=400, highlight=False)
    run = RunFinished(run_id="r0007", commit="aa0559c1", seed=1000, role=Role.CANDIDATE, experiment="e0003",
                      status=status, reason=reason, log="runs/r0007/log.txt", duration_s=12.0,
                      metric=1.5 if status == Status.OK else None)
    RichObserver(console, results=results).run_finished(run)
    return console.export_text()


def test_a_crashed_run_names_its_log_from_where_the_user_is(tmp_path, monkeypatch):
    # the summary says what failed; the whole traceback is one path away
    monkeypatch.chdir(tmp_path)
    text = finished_line(tmp_path / "results" / "night1", Status.CRASH, "exit code 1: RuntimeError: boom")
    assert "crash exit code 1: RuntimeError: boom" in text
    assert "    log: results/night1/runs/r0007/log.txt" in text
    (tmp_path / "results").mkdir()
    monkeypatch.chdir(tmp_path / "results")
    assert "log: night1/runs/r0007/log.txt" in finished_line(tmp_path / "results" / "night1", Status.CRASH)
    assert "log:" not in finished_line(tmp_path / "results" / "night1", Status.OK)
    assert "log:" not in finished_line(None, Status.CRASH)


def test_an_experiment_left_undecided_by_a_stopped_night_is_pending_and_says_how_to_go_on(tmp_path):
    from agent.cli.display import print_status
    from tests.interface.night import write_night

    night = write_night(tmp_path)     # e0005's run was in flight when its loop was killed
    console = Console(record=True, width=300, highlight=False)
    print_status(console, night.folder, "val_bpb")
    text = console.export_text()
    assert "not decided when the night stopped: e0005 (`nightshift run --tag agents` goes on with it)" in text
    row = next(line for line in text.splitlines() if line.startswith("e0005"))
    assert "pending" in row and "running" not in row
