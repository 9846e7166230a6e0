"""The metric's direction as a type: its sign, and the ledger's strings unchanged."""
import json

from agent.record.events import Direction


def test_the_sign_makes_an_improvement_positive_either_way():
    assert Direction.MINIMIZE.improvement(candidate=2.0, reference=2.5) == 0.5
    assert Direction.MAXIMIZE.improvement(candidate=2.0, reference=2.5) == -0.5
    assert Direction.MINIMIZE.better(1.0, 2.0) and not Direction.MAXIMIZE.better(1.0, 2.0)
    assert (Direction.MINIMIZE.better_word, Direction.MAXIMIZE.best_word) == ("lower", "highest")


def test_the_value_strings_are_the_ledgers():
    assert Direction("minimize") is Direction.MINIMIZE
    assert json.dumps({"direction": Direction.MAXIMIZE}) == '{"direction": "maximize"}'
    assert f"{Direction.MINIMIZE}" == "minimize"
