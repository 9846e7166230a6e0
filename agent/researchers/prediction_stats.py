"""Pre-registered predictions from a history of tried knob settings (no model, no LLM).

Method (deliberately simple, so a reviewer can check it by hand):

1. Fewer than `min_history` measured configurations: predict "same", delta 0, interval
   ±2·noise_sd. We know nothing yet beyond the seed-to-seed noise.
2. Otherwise, k-nearest neighbours in knob space. Every knob is put on a common scale:
   numeric knobs as a fraction of their search range (log-scaled for `log` knobs), choice knobs
   as 0 (same option) or 1 (different). The distance between two configurations is the
   root-mean-square of these per-knob differences. The candidate's metric is predicted as the
   plain mean of the measured values of the k nearest configurations, and the reference as the
   incumbent's measured value (or, when the loop has none yet, the same k-NN estimate at the
   incumbent's configuration). The incumbent's measured value also joins the neighbours as
   one more data point. expected_delta = predicted − reference (candidate − incumbent,
   metric units).
3. Interval: expected_delta ± 2·sqrt(spread² + noise²), where spread is the sample sd of the
   neighbours' values (how much the metric varies among nearby settings: our model error) and
   noise the seed-to-seed sd (the measurement error of the delta). Confidence is stated as 0.8
   although 2 sd would be ~95 % for a normal error: k-NN errors are heavier-tailed than
   normal, and a stated 0.8 we meet is worth more than a 0.95 we miss.
4. Direction: "same" when |expected_delta| ≤ noise_sd, else "improve"/"worsen" by its sign
   and the metric's direction.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from agent.researchers.knobs import Knob, same_value
from agent.researchers.base import Prediction

DEFAULT_NOISE_SD = 0.05   # used until the loop has measured seed-to-seed noise
CONFIDENCE = 0.8
INTERVAL_SDS = 2.0


@dataclass(frozen=True)
class TriedConfig:
    """One measured configuration: knob name -> value, and the metric it gave."""

    config: dict[str, Any]
    value: float


def knob_distance(knobs: Sequence[Knob], a: dict[str, Any], b: dict[str, Any]) -> float:
    """RMS over knobs of per-knob differences on a common scale (see module doc). A knob missing
    from either side counts as maximally different (1)."""
    if not knobs:
        return 0.0
    total = 0.0
    for knob in knobs:
        if knob.name not in a or knob.name not in b:
            diff = 1.0
        elif knob.kind == "choice":
            diff = 0.0 if same_value(a[knob.name], b[knob.name]) else 1.0
        else:
            try:
                diff = abs(knob.normalize(a[knob.name]) - knob.normalize(b[knob.name]))
            except (TypeError, ValueError):   # a hand-edited non-number: treat as far away
                diff = 1.0
        total += diff * diff
    return math.sqrt(total / len(knobs))


def nearest(knobs: Sequence[Knob], history: Sequence[TriedConfig], query: dict[str, Any],
            k: int) -> list[tuple[float, TriedConfig]]:
    """The k tried configurations closest to `query`, as (distance, tried), nearest first."""
    ranked = sorted(((knob_distance(knobs, t.config, query), i, t) for i, t in enumerate(history)),
                    key=lambda item: (item[0], item[1]))
    return [(d, t) for d, _, t in ranked[:k]]


def predict_delta(
    knobs: Sequence[Knob],
    history: Sequence[TriedConfig],
    candidate: dict[str, Any],
    incumbent: dict[str, Any],
    *,
    incumbent_value: float | None,
    noise_sd: float | None,
    direction: str,
    metric: str = "metric",
    k: int = 5,
    min_history: int = 3,
) -> Prediction:
    """A Prediction of candidate − incumbent from the measured history (method: module doc)."""
    noise = noise_sd if noise_sd is not None and noise_sd > 0 else DEFAULT_NOISE_SD
    noise_note = f"noise sd {noise:.3g}" + ("" if noise_sd else " (default; not measured yet)")
    if len(history) < min_history:
        return Prediction(
            direction="same", expected_delta=0.0,
            interval=(-INTERVAL_SDS * noise, INTERVAL_SDS * noise), confidence=CONFIDENCE,
            rationale=f"prior: only {len(history)} measured configs (< {min_history}); "
                      f"no effect expected, ±{INTERVAL_SDS:g}·{noise_note}",
        )
    if incumbent_value is not None:
        # The incumbent's own measurement is a data point too: a candidate one small step from
        # it should be predicted close to it.
        history = [*history, TriedConfig(config=dict(incumbent), value=incumbent_value)]
    neighbours = nearest(knobs, history, candidate, k)
    values = [t.value for _, t in neighbours]
    predicted = statistics.fmean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    if incumbent_value is not None:
        reference, ref_note = incumbent_value, f"incumbent measured {incumbent_value:.4g}"
    else:
        reference = statistics.fmean(t.value for _, t in nearest(knobs, history, incumbent, k))
        ref_note = f"incumbent estimated {reference:.4g} by the same k-NN"
    delta = predicted - reference
    half = INTERVAL_SDS * math.sqrt(spread * spread + noise * noise)
    distances = [d for d, _ in neighbours]
    return Prediction(
        direction=_direction(delta, noise, direction),
        expected_delta=delta,
        interval=(delta - half, delta + half),
        confidence=CONFIDENCE,
        rationale=(
            f"k-NN: mean {metric} of the {len(values)} nearest of {len(history)} measured configs "
            f"(distance {min(distances):.2f}-{max(distances):.2f}) = {predicted:.4g}, {ref_note}; "
            f"interval ±{INTERVAL_SDS:g}·sqrt(spread {spread:.3g}² + {noise_note}²)"
        ),
    )


def _direction(delta: float, noise: float, direction: str) -> str:
    if abs(delta) <= noise:
        return "same"
    better = delta < 0 if direction == "minimize" else delta > 0
    return "improve" if better else "worsen"

