"""parse_prediction: a researcher's raw prediction, validated with every problem named."""
import json

import pytest

from agent.record.records import Direction
from agent.researchers.prediction import parse_prediction
from tests.researchers.test_claude_researcher import PREDICTION


@pytest.mark.parametrize("change, problem", [
    ({"direction": "better"}, "direction must be"),
    ({"expected_delta": "a lot"}, "expected_delta must be a finite number"),
    ({"interval": [0.01, -0.05]}, "lo < hi"),
    ({"interval": [-0.05]}, "interval must be"),
    ({"confidence": 1.0}, "strictly between 0 and 1"),
    ({"confidence": 80}, "strictly between 0 and 1"),
    ({"rationale": " "}, "rationale"),
    ({"expected_delta": -0.1}, "outside its interval"),
    ({"direction": "worsen"}, "positive expected_delta"),
    ({"direction": "same", "expected_delta": -0.06, "interval": [-0.1, -0.05]}, "containing 0"),
])
def test_unusable_predictions_are_named(change, problem):
    prediction, problems = parse_prediction(PREDICTION | change, Direction.MINIMIZE)
    assert prediction is None and any(problem in p for p in problems), problems


def test_a_prediction_is_read_in_the_metrics_direction():
    maximize = PREDICTION | {"expected_delta": 0.02, "interval": [-0.01, 0.05]}
    prediction, problems = parse_prediction(maximize, Direction.MAXIMIZE)
    assert problems == [] and prediction.to_dict()["interval"] == [-0.01, 0.05]
    assert parse_prediction(json.dumps(PREDICTION), Direction.MINIMIZE)[1] == []  # a JSON string is accepted
