"""What the console says of a decision: the evidence and the rule's whole reason."""
from rich.console import Console

from agent.cli.display import RichObserver
from agent.record.events import Decision, DecisionMade, Verdict

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
