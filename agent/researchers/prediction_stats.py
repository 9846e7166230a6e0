"""Pre-registered predictions from the study's own model: a Gaussian process over the knobs.

The LLM-free researcher predicts candidate − incumbent before the run from every measured
configuration of the study (and the incumbent's measured value). Method, small enough to
check by hand:

1. Coordinates: each knob on a common scale, its position in its search space from 0 to 1
   (log-scaled for `log` knobs; a choice knob by the index of its option).
2. A GP with a squared-exponential kernel (length scale 0.3 of a knob's range, so two
   settings a third of the range apart are still related), signal variance from the spread of
   the measured values (at least the seed noise), and the seed noise as observation noise.
3. The predicted delta is the posterior mean at the candidate minus that at the incumbent;
   its variance is the posterior variance of that difference plus the noise of measuring it
   (one candidate run against a mean of several reference runs: about noise² · 7/6). The
   interval is ± z(0.9) standard deviations, so 80 % of measured deltas should fall inside:
   the claimed confidence, which the report's calibration panel checks.
4. With nothing measured yet the prior alone speaks: delta 0 with a variance that grows with
   how far the candidate moves from the incumbent (the kernel's 1 − k). A small step predicts
   a narrow interval, a jump across the space a wide one: never one constant for every move.
5. Direction: "same" when |delta| ≤ noise sd, else improve/worsen by its sign and the metric's
   direction.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from agent.record.records import Direction
from agent.researchers.base import Prediction
from agent.target.knobs import Knob, same_value

DEFAULT_NOISE_SD = 0.05   # used until the loop has measured seed-to-seed noise
CONFIDENCE = 0.8
Z = 1.2816                # the 90th percentile of a normal: a central 80 % interval
LENGTH_SCALE = 0.3
MAX_HISTORY = 300         # the most recent configurations the model is fitted on (O(n³))


@dataclass(frozen=True)
class TriedConfig:
    """One measured configuration: knob name -> value, and the metric it gave."""

    config: dict[str, Any]
    value: float


def coordinates(knobs: Sequence[Knob], config: dict[str, Any]) -> np.ndarray:
    """`config` on the model's scale: each knob's position in its space, 0 to 1 (a knob
    missing from the config, or a hand-edited non-number, sits at the far edge: 1.5)."""
    point = []
    for knob in knobs:
        value = config.get(knob.name)
        if knob.kind == "choice":
            index = next((i for i, c in enumerate(knob.choices) if same_value(c, value)), None)
            point.append(index / max(len(knob.choices) - 1, 1) if index is not None else 1.5)
            continue
        try:
            point.append(float(knob.normalize(value)))
        except (TypeError, ValueError):
            point.append(1.5)
    return np.array(point, dtype=float)


def knob_distance(knobs: Sequence[Knob], a: dict[str, Any], b: dict[str, Any]) -> float:
    """RMS over knobs of the per-knob distance on the common scale."""
    if not knobs:
        return 0.0
    return float(np.sqrt(np.mean((coordinates(knobs, a) - coordinates(knobs, b)) ** 2)))


def _kernel(x: np.ndarray, y: np.ndarray, variance: float) -> np.ndarray:
    squared = ((x[:, None, :] - y[None, :, :]) ** 2).sum(axis=-1)
    return variance * np.exp(-0.5 * squared / LENGTH_SCALE ** 2)


def predict_delta(
    knobs: Sequence[Knob],
    history: Sequence[TriedConfig],
    candidate: dict[str, Any],
    incumbent: dict[str, Any],
    *,
    incumbent_value: float | None,
    noise_sd: float | None,
    direction: Direction,
    metric: str = "metric",
) -> Prediction:
    """A Prediction of candidate − incumbent from the study's GP (method: module doc)."""
    noise = noise_sd if noise_sd is not None and noise_sd > 0 else DEFAULT_NOISE_SD
    noise_note = f"noise sd {noise:.3g}" + ("" if noise_sd else " (default; not measured yet)")
    data = list(history)[-MAX_HISTORY:]
    if incumbent_value is not None:
        data.append(TriedConfig(dict(incumbent), incumbent_value))
    values = np.array([t.value for t in data], dtype=float)
    # The signal variance: how much the measured settings differ (at least the seed noise);
    # before anything is measured, a guess of two noise sd for a move across the whole space.
    if len(values) > 1:
        variance = max(float(np.var(values)), noise ** 2)
    else:
        variance = 4 * noise ** 2
    query = np.stack([coordinates(knobs, candidate), coordinates(knobs, incumbent)])
    prior = _kernel(query, query, variance)
    if len(data):
        points = np.stack([coordinates(knobs, t.config) for t in data])
        gram = _kernel(points, points, variance) + noise ** 2 * np.eye(len(data))
        cross = _kernel(points, query, variance)
        solve = np.linalg.solve(gram, np.column_stack([values - values.mean(), cross]))
        mean = cross.T @ solve[:, 0]
        cov = prior - cross.T @ solve[:, 1:]
    else:
        mean, cov = np.zeros(2), prior
    delta = float(mean[0] - mean[1])
    var = max(float(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]), 0.0) + noise ** 2 * 7 / 6
    half = Z * math.sqrt(var)
    method = f"GP over {len(data)} measured configs" if data else "GP prior (nothing measured yet)"
    return Prediction(
        direction=_direction(delta, noise, direction),
        expected_delta=delta,
        interval=(delta - half, delta + half),
        confidence=CONFIDENCE,
        rationale=(f"{method}: posterior {metric} difference {delta:+.3g} ± {half:.3g} "
                   f"(80 %), distance {knob_distance(knobs, candidate, incumbent):.2f} of the "
                   f"knob ranges from the incumbent, {noise_note}"),
    )


def _direction(delta: float, noise: float, direction: Direction) -> str:
    if abs(delta) <= noise:
        return "same"
    better = Direction(direction).sign * delta > 0
    return "improve" if better else "worsen"
