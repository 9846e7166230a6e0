from agent.decide.scoring import score_prediction
from agent.record.events import Decision, Direction, Prediction, Score, Verdict
from agent.record.state import calibration

PREDICTION = Prediction("improve", -0.03, (-0.06, -0.01), 0.8)


def decision(effect, interval=None):
    return Decision(verdict=Verdict.DISCARD, effect=effect, interval=interval)


def test_improvement_on_minimised_metric_is_negative_delta():
    score = score_prediction(PREDICTION, decision(0.04, (0.01, 0.07)), Direction.MINIMIZE)
    assert score.measured_delta == -0.04
    assert score.measured_direction == "improve" and score.direction_right
    assert score.covered
    assert abs(score.error - (-0.01)) < 1e-12


def test_interval_through_zero_means_same():
    score = score_prediction(PREDICTION, decision(0.004, (-0.02, 0.03)), Direction.MINIMIZE)
    assert score.measured_direction == "same"
    assert not score.direction_right and not score.covered


def test_nothing_to_score_without_effect_or_prediction():
    assert score_prediction(PREDICTION, decision(None), Direction.MINIMIZE) is None
    assert score_prediction(PREDICTION, None, Direction.MINIMIZE) is None
    assert score_prediction(None, decision(0.1), Direction.MINIMIZE) is None


def test_calibration_counts_coverage():
    scores = [Score(0.0, "same", True, True, 0.01, 0.8), Score(0.0, "same", False, False, -0.03, 0.8),
              None]
    cal = calibration(scores)
    assert cal.n == 2 and cal.coverage == 0.5 and cal.direction_accuracy == 0.5
    assert abs(cal.mean_abs_error - 0.02) < 1e-12
    assert calibration([None]).n == 0
