"""Where one run would have decided otherwise (agent/review/single_run.py), on a ledger written
by the real record writer and read back by `nightshift status`'s printer: a null that beat the
incumbent on one of its seeds (the single-run rule keeps it there), a win whose first run lost
to the incumbent's mean (it drops it), and the experiments both rules agree on on every seed
or that had no test, left out."""
from io import StringIO

from rich.console import Console

from agent.cli.display import print_status
from agent.record.events import DecisionMade, ExperimentProposed, LoopStarted
from agent.record.ledger import Ledger, read_events
from agent.record.records import Decision, Direction, Verdict
from agent.record.state import fold
from agent.review.single_run import other_verdicts, summary_lines


def decided(ledger, experiment, verdict, candidate, reference, reason, description):
    ledger.append(ExperimentProposed(id=experiment, commit=f"c{experiment}", parent="base",
                                     description=description))
    test = Decision(verdict=verdict, effect=0.0, seeds=tuple(candidate), candidate_values=candidate,
                    reference_values=reference, rule="sequential", reason=reason) if candidate else None
    ledger.append(DecisionMade(id=experiment, commit=f"c{experiment}", incumbent="base",
                               verdict=verdict, reason=reason, decision=test))


def write_night(folder):
    ledger = Ledger(folder)
    ledger.append(LoopStarted(tag="one", base_commit="base", program={}, budget_s=10))
    # a null: its first run 0.03 below the incumbent's on seed 1000, then two seeds that are not
    decided(ledger, "e0001", Verdict.DISCARD, {1000: 2.00, 1001: 2.10, 1002: 2.09},
            {1000: 2.03, 1001: 2.04, 1002: 2.05, 0: 2.05}, "futility: p=0.71 >= 0.16 at look 3",
            "GRAD_CLIP 1.0 -> 2.0")
    # a win whose first run lost on its seed; the incumbent had no run there: its mean is the bar
    decided(ledger, "e0002", Verdict.KEEP, {2000: 2.06, 2001: 1.90, 2002: 1.91},
            {0: 2.05, 1: 2.03}, "p=0.003 <= 0.005 at look 3", "LR 3e-3 -> 6e-3")
    # both rules agree: a loser whose first run lost, and a win whose first run won
    decided(ledger, "e0003", Verdict.DISCARD, {3000: 2.40}, {3000: 2.05}, "futility: p=0.99", "DEPTH 4 -> 1")
    decided(ledger, "e0004", Verdict.KEEP, {4000: 1.80, 4001: 1.82}, {4000: 2.00, 4001: 2.01},
            "p=0.001", "WARMUP 0 -> 100")
    # no test: a crash
    decided(ledger, "e0005", Verdict.CRASH, {}, {}, "crash: CUDA error", "ATTN flash")


def test_the_experiments_one_run_would_have_decided_otherwise_and_why(tmp_path):
    write_night(tmp_path)
    state = fold(read_events(tmp_path))
    others = other_verdicts(state.experiments.values(), Direction.MINIMIZE)
    assert [(o.experiment, o.single_run_keeps, o.verdict) for o in others] == [
        ("e0001", True, Verdict.DISCARD), ("e0002", False, Verdict.KEEP)]
    null, win = others
    assert null.first_run == 2.03 - 2.00 and null.against == "the incumbent on seed 1000"
    assert (null.seeds_otherwise, null.seeds_paired) == (1, 3)      # kept on 1 of its 3 seeds
    assert win.first_run == (2.05 + 2.03) / 2 - 2.06 and win.against == "the mean of 2 incumbent runs"
    assert "single-run rule keeps it; Nightshift: discard (futility: p=0.71" in null.line()
    assert "single-run rule drops it; Nightshift: keep (p=0.003" in win.line()
    # the other direction turns every comparison over: the null now wins on 2 of its 3 seeds
    flipped = {o.experiment: o for o in other_verdicts(state.experiments.values(), Direction.MAXIMIZE)}
    assert set(flipped) == {"e0001", "e0003", "e0004"}
    assert (flipped["e0001"].seeds_otherwise, flipped["e0001"].against) == (2, "the incumbent on seed 1001")
    assert (flipped["e0004"].seeds_otherwise, flipped["e0004"].seeds_paired) == (2, 2)
    assert "one run loses to the incumbent's on 2 of its 2 seeds" in flipped["e0004"].line()


def test_status_says_it_in_a_head_line_and_a_line_an_experiment(tmp_path):
    write_night(tmp_path)
    out = StringIO()
    print_status(Console(file=out, width=400), tmp_path, "val_bpb")
    text = out.getvalue()
    assert "one run would have decided 2 of 4 tested experiments otherwise" in text
    assert ("e0001 GRAD_CLIP 1.0 -> 2.0: one run beats the incumbent's on 1 of its 3 seeds (+0.03 against "
            "the incumbent on seed 1000)") in text
    assert "e0002 LR 3e-3 -> 6e-3: one run -0.02 against the mean of 2 incumbent runs" in text
    head = text.index("one run would have decided")
    after = text[head:].splitlines()[1:4]
    assert [line.split()[0] for line in after[:2]] == ["e0001", "e0002"]
    assert not after[2].lstrip().startswith("e000")      # the agreeing ones are not listed


def test_a_long_list_names_the_latest_and_counts_the_rest(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(LoopStarted(tag="many", base_commit="base", program={}, budget_s=10))
    for i in range(11):
        decided(ledger, f"e{i:04d}", Verdict.DISCARD, {1000 + i: 2.0}, {1000 + i: 2.1},
                "futility", f"null {i}")
    state = fold(read_events(tmp_path))
    lines = summary_lines(list(state.experiments.values()), Direction.MINIMIZE, limit=8)
    assert lines[0].startswith("one run would have decided 11 of 11")
    assert [line.split()[0] for line in lines[1:9]] == [f"e{i:04d}" for i in range(3, 11)]
    assert lines[-1] == "  and 3 earlier ones (`nightshift show <id>` tells each)"
    assert summary_lines([], Direction.MINIMIZE) == []


def test_the_report_says_it_beside_the_single_run_rules_cost(tmp_path):
    from agent.review.report import build_context, write_report

    write_night(tmp_path)
    context = build_context(tmp_path)
    assert context["one_run"]["tested"] == 4
    assert [(r["id"], r["single_run_keeps"]) for r in context["one_run"]["rows"]] == [
        ("e0001", True), ("e0002", False)]
    page = write_report(tmp_path).html.read_text()
    assert "Where one run would have decided otherwise, on some of their seeds: <b>2</b> of 4 tested" in page
    assert ("<b>e0001</b> GRAD_CLIP 1.0 -&gt; 2.0: one run beats the incumbent's on 1 of its 3 seeds (+0.03 "
            "against the incumbent on seed 1000), the single-run rule keeps it; Nightshift: discard "
            "(futility: p=0.71 &gt;= 0.16 at look 3)") in page
    assert ("<b>e0002</b> LR 3e-3 -&gt; 6e-3: one run -0.02 against the mean of 2 incumbent runs, the "
            "single-run rule drops it") in page
