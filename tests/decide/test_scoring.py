from agent.decide.scoring import calibration, score_prediction

PREDICTION = {"direction": "improve", "expected_delta": -0.03, "interval": [-0.06, -0.01],
              "confidence": 0.8}


def test_improvement_on_minimised_metric_is_negative_delta():
    score = score_prediction(PREDICTION, {"effect": 0.04, "interval": [0.01, 0.07]}, "minimize")
    assert score.measured_delta == -0.04
    assert score.measured_direction == "improve" and score.direction_right
    assert score.covered
    assert abs(score.error - (-0.01)) < 1e-12


def test_interval_through_zero_means_same():
    score = score_prediction(PREDICTION, {"effect": 0.004, "interval": [-0.02, 0.03]}, "minimize")
    assert score.measured_direction == "same"
    assert not score.direction_right and not score.covered


def test_nothing_to_score_without_effect_or_prediction():
    assert score_prediction(PREDICTION, {"effect": None}, "minimize") is None
    assert score_prediction(None, {"effect": 0.1}, "minimize") is None


def test_calibration_counts_coverage():
    scores = [{"direction_right": True, "covered": True, "error": 0.01, "confidence": 0.8},
              {"direction_right": False, "covered": False, "error": -0.03, "confidence": 0.8},
              None]
    cal = calibration(scores)
    assert cal["n"] == 2 and cal["coverage"] == 0.5 and cal["direction_accuracy"] == 0.5
    assert abs(cal["mean_abs_error"] - 0.02) < 1e-12
