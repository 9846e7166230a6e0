"""When a night stops: the experiment count, or the wall clock in hours or minutes."""
import pytest

from agent.night.stop_rules import StopRules


def test_minutes_count_like_hours_and_name_themselves():
    rules = StopRules(minutes=7, started=0.0)
    assert rules.seconds == 420
    assert StopRules(hours=0.5).seconds == 1800 and StopRules().seconds is None
    clock = StopRules(minutes=0.0)
    assert clock.time_is_up() and clock.reached(0) == "reached --minutes 0"
    assert StopRules(hours=0.0).reached(0) == "reached --hours 0"
    assert StopRules(max_experiments=2, minutes=60).reached(2) == "reached --max-experiments 2"
    assert StopRules(minutes=60).reached(5) is None


def test_hours_and_minutes_together_are_refused():
    with pytest.raises(ValueError, match="not both"):
        StopRules(hours=1, minutes=5)
