"""The early-stop rule: a candidate's partial curve against its incumbent's on the same
seed, in units of the noise of curves, calibrated on the night's finished pairs
(agent/decide/early_stop.py, agent/decide/curve_forecast.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from agent.decide.curve_forecast import CurveNoise, forecast
from agent.decide.early_stop import (CannotPair, Continue, EarlyStopSettings, FinishedPair, Stop,
                                     curve_noise, gap_at, judge, why_unpaired)
from agent.record.curves import Curve, CurvePoint, curve_point
from sandbox.progress import ProgressReader

SETTINGS = EarlyStopSettings()
FRACTIONS = np.linspace(0.02, 1.0, 50)
# The spread of a run's loss across seeds in the world of `curve` and `night_pairs`: a
# same-seed gap of 0.028 is one noise unit (√2 × 0.02), as is a final difference of `scale`.
NOISE = CurveNoise({c: (0.02, 10) for c in SETTINGS.checkpoints})


def curve(shift: float = 0.0, noise: float = 0.0, rng=None, cross: float | None = None,
          lr=None, batch_shape=None, total_steps=None) -> Curve:
    """A training curve: 3 − 1.5·√f, moved by `shift` (positive: worse) in proportion to how
    far the run is, or crossing: behind early, ahead after `cross`."""
    points = []
    for i, f in enumerate(FRACTIONS):
        moved = shift * f if cross is None else shift * (cross - f) / cross
        loss = 3 - 1.5 * math.sqrt(f) + moved + (rng.normal(0, noise) if rng is not None else 0)
        points.append(CurvePoint(fraction=float(f), loss=float(loss), step=10 * i,
                                 lr=None if lr is None else float(lr(f))))
    return Curve(tuple(points), batch_shape, total_steps)


def night_pairs(rng, n=30, slope=1.0, resid=0.01, noise=0.005):
    """Finished pairs whose final improvement is `slope` × the loss gap plus a little."""
    pairs = []
    for _ in range(n):
        shift = rng.normal(0, 0.05)
        cand, inc = curve(shift, noise, rng), curve(0.0, noise, rng)
        final = -slope * shift + rng.normal(0, resid)
        pairs.append(FinishedPair.of(cand, inc, final, SETTINGS.checkpoints))
    return pairs


def issue_29_curve(at_25: float, at_end: float) -> Curve:
    """A train.py-like curve through `at_25` at 25 % of the budget and `at_end` at its end
    (down from ln 256 = 5.5 at its start), a point every 2 % of the budget."""
    fractions = np.linspace(0.02, 1.0, 50)
    shape = lambda f: 1 / (1 + 6 * f)  # noqa: E731 -- falls fast, then flattens
    scale = (at_25 - at_end) / (shape(0.25) - shape(1.0))
    return Curve(tuple(CurvePoint(fraction=float(f), loss=float(at_end + scale * (shape(f) - shape(1.0))),
                                  step=i, lr=0.01) for i, f in enumerate(fractions)))


def test_a_gap_far_beyond_the_noise_of_curves_stops_at_the_first_checkpoint_without_a_pair():
    # Issue 29's night: the learning rate at the bottom of its range, 4.36 against 2.35 for the
    # incumbent's run on the seed at 25 % of the budget. The night had measured its curves'
    # spread on six baseline seeds (0.072 at 25 % on two busy cores) and its final paired
    # spread (0.23), and had finished no pair yet.
    rng = np.random.default_rng(29)
    baseline = [issue_29_curve(2.35 + rng.normal(0, 0.07), 2.42 + rng.normal(0, 0.1)) for _ in range(6)]
    noise = curve_noise([baseline], SETTINGS.checkpoints)
    candidate, incumbent = issue_29_curve(4.36, 5.49), issue_29_curve(2.35, 2.42)
    result = judge(candidate.upto(0.26), incumbent, [], SETTINGS, scale=0.23, noise=noise)
    assert isinstance(result, Stop), result
    assert result.forecast.checkpoint == 0.25 and result.forecast.pairs == 0
    assert result.forecast.gap_units < -10 and result.forecast.bound < 0
    assert "a discard stopped early at 25%" in result.reason


def test_a_gap_of_a_few_noise_units_waits_for_the_night_s_pairs():
    # Three noise units behind: the prior alone does not know that it carries over...
    worse, incumbent = curve(shift=0.17).upto(0.52), curve()
    alone = judge(worse, incumbent, [], SETTINGS, scale=0.02, noise=NOISE)
    assert isinstance(alone, Continue) and alone.forecast.pairs == 0
    assert -4 < alone.forecast.gap_units < -2 and alone.forecast.bound > 0
    # ...a night whose pairs show that a gap carries over does
    pairs = night_pairs(np.random.default_rng(0))
    assert isinstance(judge(worse, incumbent, pairs, SETTINGS, scale=0.02, noise=NOISE), Stop)


def test_nothing_stops_before_the_night_has_measured_the_spread_of_its_curves():
    worse, incumbent = curve(shift=5.0).upto(0.52), curve()
    for noise in (None, CurveNoise({}), CurveNoise({c: (0.02, 1) for c in SETTINGS.checkpoints})):
        result = judge(worse, incumbent, [], SETTINGS, scale=0.02, noise=noise)
        assert isinstance(result, Continue) and "spread of curves" in result.reason


def test_a_night_whose_pairs_show_another_slope_leaves_the_measured_one():
    # A seeded step-budgeted script: final differences far narrower than its curves' spread
    # across seeds, so in noise units a gap carries over six for one, not one. Ten pairs say so.
    rng = np.random.default_rng(6)
    pairs = [(x, 6 * x + rng.normal(0, 0.3)) for x in rng.normal(0, 1, 10)]
    ahead = forecast(1.0, 0.5, pairs, gap_unit=1.0, final_unit=1.0, tail=0.01 / 3)
    assert 5 < ahead.predicted < 7 and ahead.interval[0] > 3
    # with the prior alone, one for one; its lower end still counts most of a large gap
    alone = forecast(-10.0, 0.5, [], gap_unit=1.0, final_unit=1.0, tail=0.01 / 3)
    assert -10.5 < alone.predicted < -9.5 and alone.bound < -3


def test_the_spread_of_curves_is_pooled_within_commits():
    rng = np.random.default_rng(8)
    one = [curve(noise=0.0).upto(1.0)] + [curve(shift=rng.normal(0, 0.1)) for _ in range(5)]
    other = [curve(shift=3.0 + rng.normal(0, 0.1)) for _ in range(3)]   # another level: not spread
    spread = curve_noise([one, other], SETTINGS.checkpoints).spread
    assert set(spread) == set(SETTINGS.checkpoints) and all(dof == 7 for _, dof in spread.values())
    assert 0.01 < spread[0.5][0] < 0.1            # about 0.1 × the gap's share there, not 3
    assert curve_noise([one[:1]], SETTINGS.checkpoints).gap_unit(0.5) is None    # one run: none


def test_a_clearly_worse_run_stops_at_a_checkpoint_once_the_night_has_pairs():
    rng = np.random.default_rng(0)
    pairs = night_pairs(rng)
    worse = curve(shift=0.2, noise=0.005, rng=rng).upto(0.52)
    result = judge(worse, curve(noise=0.005, rng=rng), pairs, SETTINGS, scale=0.02, noise=NOISE)
    assert isinstance(result, Stop), result
    assert result.forecast.checkpoint == 0.5 and result.saved == pytest.approx(0.5)
    lo, hi = result.forecast.interval
    assert lo < result.forecast.predicted < hi < 0 and result.forecast.bound == hi
    assert "a discard stopped early" in result.reason


def test_a_run_within_the_noise_is_not_stopped():
    rng = np.random.default_rng(1)
    pairs = night_pairs(rng)
    close = curve(shift=0.005, noise=0.005, rng=rng).upto(0.8)
    assert isinstance(judge(close, curve(noise=0.005, rng=rng), pairs, SETTINGS, scale=0.02, noise=NOISE), Continue)


def test_a_late_crossing_run_is_not_stopped():
    # Behind at 50% but closing fast: the gap's straight line crosses before the end.
    rng = np.random.default_rng(2)
    pairs = night_pairs(rng, slope=2.0, resid=0.002)
    crossing = curve(shift=0.15, cross=0.8).upto(0.51)
    incumbent = curve()
    assert gap_at(crossing, incumbent, 0.5) < 0 and gap_at(crossing, incumbent, 0.25) < gap_at(crossing, incumbent, 0.5)
    result = judge(crossing, incumbent, pairs, SETTINGS, scale=0.02, noise=NOISE)
    assert isinstance(result, Continue) and "closing" in result.reason
    # the same deficit, not closing, stops
    flat = curve(shift=0.035 / 0.5).upto(0.51)
    assert isinstance(judge(flat, incumbent, pairs, SETTINGS, scale=0.02, noise=NOISE), Stop)


def test_before_the_first_checkpoint_or_when_off_it_only_continues():
    rng = np.random.default_rng(3)
    pairs, worse = night_pairs(rng), curve(shift=1.0)
    assert "before the first" in judge(worse.upto(0.2), curve(), pairs, SETTINGS, scale=0.02, noise=NOISE).reason
    off = EarlyStopSettings(mode="off")
    assert judge(worse, curve(), pairs, off, scale=0.02, noise=NOISE) == Continue("early stopping is off")


@pytest.mark.parametrize("candidate, incumbent, why", [
    (curve(), Curve(), "the incumbent's run on this seed printed no progress lines"),
    (Curve(), curve(), "no progress lines by 25%"),
    (curve(batch_shape="64x256"), curve(batch_shape="64x128"), "a different context"),
    (curve(total_steps=5000), curve(total_steps=4000), "a different step grid"),
    (curve(lr=lambda f: 1.0 if f < 0.6 else (1 - f) / 0.4),
     curve(lr=lambda f: 1.0 if f < 0.4 else (1 - f) / 0.6), "a different learning-rate schedule"),
])
def test_curves_that_cannot_be_paired_say_why(candidate, incumbent, why):
    result = judge(candidate.upto(0.9), incumbent, [], SETTINGS, scale=0.02, noise=NOISE, now=0.9)
    assert isinstance(result, CannotPair) and why in result.reason


def test_a_different_batch_count_on_the_same_context_is_paired_and_judged():
    # a batch of 8 against 64, far behind at 25 %: judged like any other change (issue 40's
    # clear loser that ran to the end as "a different batch shape")
    small = curve(shift=3.0, batch_shape="8x64")
    result = judge(small.upto(0.3), curve(batch_shape="64x64"), [], SETTINGS, scale=0.02, noise=NOISE, now=0.3)
    assert isinstance(result, Stop), result
    unknown = judge(small.upto(0.3), curve(), [], SETTINGS, scale=0.02, noise=NOISE, now=0.3)
    assert not isinstance(unknown, CannotPair)   # one side's shape unknown: paired as before


def test_a_warm_up_read_at_rounded_clocks_is_one_schedule_and_a_longer_one_is_not():
    # train.py prints its clock to 0.1 s: in a 20-s budget's 0.4-s warm-up two runs' lines at
    # the "same" fraction 0.015 report 66 % and 78 % of the peak (real pairs of
    # benchmarks/early_stop/paired_curves_batch.jsonl), and one run's last warm-up line may
    # come after the other's first line at the peak
    def warm(until: float, first: float, at_first: float) -> Curve:
        points = [CurvePoint(fraction=first, loss=3.0, step=1, lr=at_first)]
        points += [CurvePoint(fraction=float(f), loss=3.0 - f, step=2 + i,
                              lr=min(1.0, f / until) * (1.0 if f < 0.4 else (1 - f) / 0.6))
                   for i, f in enumerate(np.arange(0.025, 0.9, 0.02))]
        return Curve(tuple(points))
    incumbent = warm(0.02, 0.015, 0.66)
    assert why_unpaired(warm(0.02, 0.015, 0.78), incumbent, 0.9, SETTINGS) is None
    assert why_unpaired(warm(0.03, 0.02, 0.6), incumbent, 0.9, SETTINGS) is None
    longer = why_unpaired(warm(0.08, 0.015, 0.19), incumbent, 0.9, SETTINGS)
    assert longer is not None and "a different learning-rate schedule" in longer
    # a schedule that decays from its peak at once (no plateau) is still compared from there
    decaying = Curve(tuple(CurvePoint(fraction=float(f), loss=3.0 - f, step=i, lr=1.0 - f)
                           for i, f in enumerate(np.arange(0.02, 0.9, 0.02))))
    assert "a different learning-rate schedule" in why_unpaired(incumbent, decaying, 0.9, SETTINGS)


def test_a_peak_learning_rate_change_keeps_the_schedule_paired():
    shape = lambda f: 1.0 if f < 0.4 else (1 - f) / 0.6  # noqa: E731
    twice = curve(lr=lambda f: 2 * shape(f))
    assert not isinstance(judge(twice.upto(0.6), curve(lr=shape), [], SETTINGS, scale=0.02, noise=NOISE), CannotPair)


def test_one_schedule_read_from_points_that_start_at_different_times_stays_paired():
    # Two runs of one commit: the candidate printed its first line inside the 2 % warm-up,
    # the incumbent (slower to start) only after it. Only where both have points counts; held
    # flat before the incumbent's first point, its rate read as another schedule (31 % of the
    # peak on a real null pair of benchmarks/early_stop/paired_curves.jsonl).
    schedule = lambda f: min(1.0, f / 0.02) if f < 0.4 else (1 - f) / 0.6  # noqa: E731

    def run(first: float) -> Curve:
        points = [CurvePoint(fraction=float(f), loss=3 - math.sqrt(f), step=i, lr=schedule(f))
                  for i, f in enumerate(np.linspace(first, 1.0, 40))]
        return Curve(tuple(points))
    early, late = run(0.012), run(0.07)
    assert not isinstance(judge(early.upto(0.6), late, [], SETTINGS, scale=0.02, noise=NOISE), CannotPair)
    # a truly different schedule over the shared stretch is still refused
    other = Curve(tuple(CurvePoint(fraction=p.fraction, loss=p.loss, step=p.step,
                                   lr=1.0 if p.fraction < 0.6 else (1 - p.fraction) / 0.4)
                        for p in late.points))
    assert isinstance(judge(early.upto(0.9), other, [], SETTINGS, scale=0.02, noise=NOISE, now=0.9), CannotPair)


def test_the_forecast_bound_holds_as_often_as_it_claims():
    # Pairs from a night where the final improvement follows the mid-run gap linearly with
    # real scatter: a new run ends above the one-sided bound about `tail` of the time.
    rng, tail, above, n = np.random.default_rng(7), 0.05, 0, 0
    for _ in range(40):
        pairs = night_pairs(rng, n=40, slope=1.0, resid=0.03, noise=0.01)
        for _ in range(10):
            shift = rng.normal(0.0, 0.05)
            gap = gap_at(curve(shift, 0.01, rng), curve(0.0, 0.01, rng), 0.5)
            calibration = [(p.gaps[0.5], p.final_gap) for p in pairs]
            bound = forecast(gap, 0.5, calibration, gap_unit=NOISE.gap_unit(0.5), final_unit=0.04,
                             tail=tail).bound
            above += -shift + rng.normal(0, 0.03) > bound
            n += 1
    assert tail / 4 <= above / n <= 2 * tail, above / n


def test_stopped_runs_would_rarely_have_ended_above_the_threshold():
    # The same kind of night: runs that end at or above 0 are almost never stopped, while
    # clear losers are (three checkpoints share 1 − confidence, and closing gaps wait).
    rng, wrong, stopped = np.random.default_rng(4), 0, 0
    for _ in range(30):
        pairs = night_pairs(rng, n=40, slope=1.0, resid=0.02, noise=0.01)
        for _ in range(10):
            shift = rng.normal(0.02, 0.05)
            run, inc = curve(shift, 0.01, rng), curve(0.0, 0.01, rng)
            final = -shift + rng.normal(0, 0.02)
            result = judge(run.upto(float(rng.choice([0.3, 0.55, 0.8]))), inc, pairs, SETTINGS,
                           scale=0.03, noise=NOISE)
            if isinstance(result, Stop):
                stopped += 1
                wrong += final >= 0
    assert stopped >= 20, "the rule should stop the clear losers"
    assert wrong <= 2


def test_settings_refuse_what_makes_no_sense():
    with pytest.raises(ValueError, match="mode"):
        EarlyStopSettings(mode="sometimes")
    with pytest.raises(ValueError, match="checkpoints"):
        EarlyStopSettings(checkpoints=(0.5, 0.25))
    with pytest.raises(ValueError, match="confidence"):
        EarlyStopSettings(confidence=0.3)


def test_progress_lines_become_points_on_the_budget():
    reader = ProgressReader(r"iter (?P<iter>\d+): loss (?P<loss>[0-9.]+)")
    bundled = reader.feed("step 300 | loss 2.4512 | lr 1.0e-02 | grad_norm 0.5 | elapsed 15.0s")
    point = curve_point(bundled, budget_s=60)
    assert point == CurvePoint(fraction=0.25, loss=2.4512, step=300, lr=0.01)
    nanogpt = reader.feed("iter 40: loss 3.2100, time 12.3ms")
    assert curve_point(nanogpt, budget_s=60) is None            # no clock of its own...
    assert curve_point(nanogpt, budget_s=60, wall_s=30).fraction == 0.5   # ...the harness's
    assert curve_point(nanogpt, budget_s=60, total_steps=400).fraction == 0.1
    tqdm = reader.feed(" 25%|██▌       | 500/2000 [00:10<00:30, 50.0it/s]")
    assert tqdm.loss is None and curve_point(tqdm, budget_s=60) is None   # no loss to compare
    diverged = reader.feed("step 10 | loss nan | elapsed 1.0s")
    assert curve_point(diverged, budget_s=60) is None


def test_a_curve_for_the_ledger_is_compact():
    long = Curve(tuple(CurvePoint(fraction=i / 999, loss=3 - i / 999) for i in range(1000)))
    short = long.compact(64)
    assert 2 < len(short.points) <= 64
    assert short.points[0] == long.points[0] and short.points[-1] == long.points[-1]
    assert [p.fraction for p in short.points] == sorted(p.fraction for p in short.points)
    assert curve().compact() == curve()


def test_what_loses_is_the_callers_to_say():
    # The loop asks its keep rule whether a run ending there ends the candidate: a stricter
    # bar (the screen's futility boundary) stops more, a lenient one nothing.
    rng = np.random.default_rng(5)
    pairs = night_pairs(rng)
    run, incumbent = curve(shift=0.01, noise=0.005, rng=rng).upto(0.8), curve(noise=0.005, rng=rng)
    default = judge(run, incumbent, pairs, SETTINGS, scale=0.02, noise=NOISE)
    assert isinstance(default, Continue) and default.forecast.bound > 0
    strict = judge(run, incumbent, pairs, SETTINGS, scale=0.02, noise=NOISE,
                   loses=lambda g: g <= default.forecast.bound + 0.01)
    assert isinstance(strict, Stop)
    assert isinstance(judge(run, incumbent, pairs, SETTINGS, scale=0.02, noise=NOISE, loses=lambda g: g <= -1), Continue)
