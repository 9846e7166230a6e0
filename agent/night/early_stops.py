"""Early stopping in a night: which runs are judged, against what, and what a stop records.

The rule is agent/decide/early_stop.py (a pure function); this module gives it the night.
Only a candidate's runs are judged, each once per checkpoint of program.md's `early_stop:`
that its curve crosses (its progress lines on its budget; the harness's clock for a run that
prints none). Reference runs (the incumbent's, its baseline seeds and their repeat) are never
judged, nor are noise, replay or ablation runs, which never reach the night's scheduler.

- **Against what.** The incumbent's run on the same seed: its whole curve and final value once
  it finished, its curve so far while it runs (then no stop: its final value is not known).
  Where the keep rule ran the incumbent on no such seed (it stops pairing on machines where
  seeds share nothing), the mean curve and mean value of the incumbent's reference runs.
- **Calibrated on.** The night's finished pairs: every candidate run that ended OK with a
  curve, against its incumbent's as above, and the spread of its curves: every commit's runs
  on two or more seeds (the incumbent's reference runs first), derived from the ledger's state
  alone, so a resumed night fits the same line.
- **What loses.** A run whose favourable forecast, ending there, would make the keep rule
  discard its candidate, asked of the rule itself with that value on this seed.
- **What a stop is.** A `run_stopped_early` event, then the loop cancels the candidate's runs
  and records the discard once they ended; the run is never a result, a reference or a noise
  measurement (agent/record/state.py). A curve that cannot be compared is recorded once
  (`run_unpaired`, with why) and never stopped.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable

from agent.decide import noise
from agent.decide.decision import DecisionRule, Evidence
from agent.decide.curve_forecast import PRIOR, CurveNoise, Prior
from agent.decide.early_stop import (CannotPair, EarlyStopSettings, FinishedPair, Stop, curve_noise,
                                     judge)
from agent.night.in_flight import InFlight
from agent.record.curves import Curve, mean_curve
from agent.record.events import (Decision, Direction, Role, RunFinished, RunStarted, RunStoppedEarly,
                                 RunUnpaired, Verdict)
from agent.record.state import Experiment, LoopState

SAME_SEED, MEAN = "same seed", "incumbent mean"


@dataclass(frozen=True)
class Partner:
    """What a candidate run's curve is compared with."""

    curve: Curve
    final: float | None          # None: the incumbent's run on this seed is still going
    kind: str                    # SAME_SEED | MEAN


class EarlyStopping:
    def __init__(self, settings: EarlyStopSettings, rule: DecisionRule, direction: Direction,
                 prior: Prior = PRIOR) -> None:
        self.settings, self.rule, self.direction, self.prior = settings, rule, Direction(direction), prior
        self._judged: dict[str, int] = {}      # run_id -> checkpoints judged so far
        self._done: set[str] = set()           # runs never judged again (unpaired, stopped)
        self._pairs: tuple[int, list[FinishedPair]] = (-1, [])
        self._noise: tuple[int, CurveNoise] = (-1, CurveNoise({}))
        self._means: dict[tuple[str, int], Partner | None] = {}
        # (commit, seed) -> the first OK reference run, and commit -> its OK reference runs,
        # as of `_indexed` runs of the state
        self._indexed = 0
        self._same: dict[tuple[str, int], RunFinished] = {}
        self._selected: dict[tuple[str, int], RunFinished] = {}   # (commit, seed) -> its candidate run
        self._references: dict[str, list[RunFinished]] = {}

    def look(self, state: LoopState, flight: InFlight,
             evidence: Callable[[Experiment, dict[int, float]], Evidence]) -> list[RunStoppedEarly | RunUnpaired]:
        """Judge each candidate run in flight whose curve crossed a checkpoint since the last
        look: what to record (the loop cancels a stopped run's candidate's runs)."""
        events = []
        for run_id, job in flight.candidates():
            started = state.in_flight.get(run_id)
            event = started and self.check(state, started, flight.live.curve(run_id), evidence,
                                           flight.reference_curve, job.spec.budget_s)
            if event:
                events.append(event)
        return events

    def check(self, state: LoopState, run: RunStarted, curve: Curve,
              evidence: Callable[[Experiment, dict[int, float]], Evidence],
              running_curve: Callable[[str, int], Curve | None],
              budget_s: float) -> RunStoppedEarly | RunUnpaired | None:
        """Judge candidate run `run` if its curve crossed a checkpoint since the last look: the
        event to record, or None to go on. `evidence(experiment, candidate values)`: the keep
        rule's evidence with those values; `running_curve(commit, seed)`: the curve so far of a
        reference run in flight."""
        if not self._judges(run):
            return None
        experiment = state.experiments.get(run.experiment or "")
        if experiment is None or experiment.decided or experiment.stopped_early is not None:
            return None
        if not curve.points:
            return None          # no progress line yet (start-up is on the harness's clock)
        total = self._total_steps(state, experiment.parent, run.seed) if curve.placed == "clock" else None
        position = curve.on_steps(total).reached if total else curve.reached
        crossed = sum(1 for c in self.settings.checkpoints if c <= position)
        if crossed <= self._judged.get(run.run_id, 0):
            return None
        self._judged[run.run_id] = crossed
        values = state.ok_values(experiment.commit, Role.CANDIDATE)
        estimate = noise.estimate(evidence(experiment, values))
        scale = estimate.pair_sd if estimate.pair_dof >= 2 else (estimate.sd or 0.0) * math.sqrt(2)
        partner = self.partner(state, experiment.parent, run.seed, running_curve,
                               paired=estimate.seed_share > 0)
        if partner is None:
            return None          # the incumbent has no reference run with a curve yet

        def loses(gain: float) -> bool:
            if partner.final is None:
                return False
            value = partner.final + self.direction.sign * gain
            step = self.rule.next(evidence(experiment, {**values, run.seed: value}))
            return isinstance(step, Decision) and step.verdict == Verdict.DISCARD

        mine, theirs = aligned(curve, partner.curve, total)
        verdict = judge(mine, theirs, self.pairs(state), self.settings, scale=scale or 0.0,
                        noise=self.curve_noise(state), now=position, loses=loses, prior=self.prior)
        if isinstance(verdict, CannotPair):
            self._done.add(run.run_id)
            return RunUnpaired(run_id=run.run_id, experiment=experiment.id, reason=verdict.reason)
        if not isinstance(verdict, Stop):
            return None
        self._done.add(run.run_id)
        cast = verdict.forecast
        return RunStoppedEarly(
            run_id=run.run_id, experiment=experiment.id, seed=run.seed, checkpoint=cast.checkpoint,
            reached=round(position, 4), gap=cast.gap, predicted=cast.predicted,
            interval=cast.interval, bound=cast.bound, pairs=cast.pairs, partner=partner.kind,
            saved_s=round(max(1.0 - position, 0.0) * budget_s + evaluation_s(state), 1),
            reason=f"{verdict.reason}, on seed {run.seed} against the incumbent's "
                   f"{'run on it' if partner.kind == SAME_SEED else 'mean curve'}")

    def finished(self, run: RunFinished) -> RunUnpaired | None:
        """A candidate run that ended without a single progress line: why it was never judged
        (said at its end, as the harness's clock counts start-up, which may take a share of the
        budget before the first line)."""
        if not self._judges(run) or run.curve is not None:
            return None
        self._done.add(run.run_id)
        return RunUnpaired(run_id=run.run_id, experiment=run.experiment,
                           reason="the run printed no progress lines the harness could read "
                                  "(a loss, and a step or its training time)")

    def _judges(self, run: RunStarted | RunFinished) -> bool:
        return self.settings.enabled and run.role == Role.CANDIDATE and run.run_id not in self._done

    def partner(self, state: LoopState, incumbent: str, seed: int,
                running_curve: Callable[[str, int], Curve | None] | None = None,
                paired: bool = True) -> Partner | None:
        """The incumbent's run on `seed` once it finished; while it runs, its curve so far
        where the night credits pairing (`paired`: seeds share noise, so its final value is
        what the keep rule will compare with; no stop until it is known), else the mean;
        without one, the mean of its finished reference runs (None: none has a curve yet).
        With several workers a candidate's first run and its paired incumbent run go side
        by side: on a machine where seeds share nothing the mean is what the rule compares
        with anyway, so early stops there behave as on one worker."""
        self._index(state)
        same = self._same_seed(incumbent, seed)
        if same is not None:
            return Partner(same.curve or Curve(), same.metric, SAME_SEED)
        going = running_curve(incumbent, seed) if running_curve else None
        if going is not None and paired:
            return Partner(going, None, SAME_SEED)
        return self._mean(state, incumbent)

    def _total_steps(self, state: LoopState, incumbent: str, seed: int) -> int | None:
        """The steps a step-budgeted run takes, by the incumbent's finished runs (its run on
        this seed, else the median of its reference runs): the same command, the same steps."""
        self._index(state)
        same = self._same_seed(incumbent, seed)
        runs = [same] if same is not None else self._references.get(incumbent, [])
        lasts = [r.curve.points[-1].step for r in runs if r.curve and r.curve.points
                 and r.curve.points[-1].step]
        return int(statistics.median(lasts)) if lasts else None

    def _same_seed(self, incumbent: str, seed: int) -> RunFinished | None:
        """The incumbent's finished run on `seed`: a reference run, else the run that selected
        it there (where a seed fixes the run the keep rule pairs the next candidates on the new
        incumbent's selecting seeds, so that run is the partner the rule compares with)."""
        return self._same.get((incumbent, seed)) or self._selected.get((incumbent, seed))

    def _index(self, state: LoopState) -> None:
        for run in state.runs[self._indexed:]:
            if run.ok and run.metric is not None and run.role == Role.REFERENCE:
                self._same.setdefault((run.commit, run.seed), run)
                self._references.setdefault(run.commit, []).append(run)
            elif run.ok and run.metric is not None and run.role == Role.CANDIDATE:
                self._selected.setdefault((run.commit, run.seed), run)
        self._indexed = len(state.runs)

    def _mean(self, state: LoopState, incumbent: str) -> Partner | None:
        runs = [r for r in self._references.get(incumbent, []) if r.curve is not None]
        key = (incumbent, len(runs))
        if key not in self._means:
            curve = mean_curve([r.curve for r in runs])
            self._means[key] = None if curve is None else Partner(
                curve, statistics.fmean(r.metric for r in runs), MEAN)
        return self._means[key]

    def curve_noise(self, state: LoopState) -> CurveNoise:
        """The spread of the night's curves at each checkpoint, across seeds within a commit:
        each commit's first OK run on a seed (a re-run of a seed is jitter, not the seed's
        spread), on its own axis (recomputed when a run lands)."""
        if self._noise[0] != len(state.runs):
            by_commit: dict[str, dict[int, Curve]] = {}
            for run in state.runs:
                if run.ok and run.curve is not None and run.curve.points:
                    by_commit.setdefault(run.commit, {}).setdefault(run.seed, own_axis(run.curve))
            commits = [list(runs.values()) for runs in by_commit.values()]
            self._noise = (len(state.runs), curve_noise(commits, self.settings.checkpoints))
        return self._noise[1]

    def pairs(self, state: LoopState) -> list[FinishedPair]:
        """The night's finished pairs, from the state alone (recomputed when a run lands)."""
        if self._pairs[0] != len(state.runs):
            self._pairs = (len(state.runs), finished_pairs(self, state))
        return self._pairs[1]


def finished_pairs(stopping: EarlyStopping, state: LoopState) -> list[FinishedPair]:
    """Every candidate run that ended OK with a curve, against its incumbent's (as `partner`
    says), in the order they finished."""
    sign = -stopping.direction.sign
    pairs = []
    for run in state.runs:
        experiment = state.experiments.get(run.experiment or "")
        if run.role != Role.CANDIDATE or not run.ok or run.curve is None or experiment is None:
            continue
        partner = stopping.partner(state, experiment.parent, run.seed)
        if partner is None or partner.final is None or not partner.curve.points:
            continue
        total = (stopping._total_steps(state, experiment.parent, run.seed)
                 if "clock" in (run.curve.placed, partner.curve.placed) else None)
        mine, theirs = aligned(run.curve, partner.curve, total)
        pairs.append(FinishedPair.of(mine, theirs, sign * (partner.final - run.metric),
                                     stopping.settings.checkpoints))
    return pairs


def aligned(candidate: Curve, incumbent: Curve, total: int | None) -> tuple[Curve, Curve]:
    """Two curves on one axis: where either was placed on the harness's clock (a script that
    prints steps but no training time: nanoGPT's `iter N: loss X`), both by their steps over
    the incumbent's `total`, so that a candidate slower per step is compared step for step."""
    if not total or "clock" not in (candidate.placed, incumbent.placed):
        return candidate, incumbent
    return candidate.on_steps(total), incumbent.on_steps(total)


def own_axis(curve: Curve) -> Curve:
    """A finished run's curve on its own steps where it was placed on the harness's clock (as
    `aligned` places a pair), else as it is."""
    last = curve.points[-1].step if curve.points else None
    return curve.on_steps(last) if curve.placed == "clock" and last else curve


def evaluation_s(state: LoopState) -> float:
    """What a run's evaluation step takes, typically (0 without one): a stopped run skips it."""
    spent = [r.eval_duration_s for r in state.runs if r.eval_duration_s]
    return statistics.median(spent) if spent else 0.0


def stop_decision(experiment: Experiment, stop: RunStoppedEarly, reference: dict[int, float]) -> Decision:
    """The keep rule's record of a candidate discarded by a stopped run: no effect is
    measured (a partial run is not a measurement); the forecast is in `details`."""
    values = {run.seed: run.metric for run in experiment.runs if run.ok and run.metric is not None}
    return Decision(
        verdict=Verdict.DISCARD, seeds=tuple(values), candidate_values=values,
        reference_values=dict(reference), rule="early_stop", reason=stop.reason,
        details={"run_id": stop.run_id, "seed": stop.seed, "checkpoint": stop.checkpoint,
                 "reached": stop.reached, "gap": stop.gap, "predicted": stop.predicted,
                 "interval": list(stop.interval), "bound": stop.bound, "pairs": stop.pairs,
                 "partner": stop.partner, "saved_s": stop.saved_s})


def stopped_reason(stop: RunStoppedEarly) -> str:
    """What a stopped run's own record says."""
    return f"stopped early at {stop.reached:.0%} of its budget by the harness: {stop.reason}"
