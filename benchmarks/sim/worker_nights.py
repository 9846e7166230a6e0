"""Simulated nights on N workers with learning curves: the one scheduler simulation, shared by
`benchmarks.keep_rule.decisions --workers` (stopper "today": every run to its budget) and
`--early-stop` (benchmarks/early_stop/curve_table.py).

The loop's scheduler in miniature (N workers, batched looks, superseding, the real
SequentialRule) with runs that print a curve while they train, so that a run can end
before its budget. Time is in runs (one ≈ 75 s: 0.1 start-up, 0.8 training, 0.1 evaluation;
each run lasts 0.9–1.1 of that); a run stopped at checkpoint c costs 0.1 + 0.8·c and skips
its evaluation. Three ways to treat a candidate run's curve:

- today: every run runs its full budget;
- nightshift: agent/decide/early_stop.py's rule, at 25/50/75% of the budget, against the
  incumbent's run on the same seed (its curve so far), calibrated on the night's finished
  pairs, and stopping only when the keep rule would discard the candidate even at the
  favourable end of the forecast; the candidate is then discarded;
- median: Optuna's MedianPruner on the same curves (its own defaults: 5 startup trials, no
  warm-up): a candidate's first run is a trial, reporting its training loss at the same
  checkpoints; pruned when worse than the median of finished trials there; discarded.

The curve model, in σ units of the final metric (σ = 1): a run's loss at budget fraction f is
`B(f) + parent level + (level − parent level)·w(f) + seed effect + (the rest of its luck)·√f
+ line noise`, so it ends at the run's final value. The seed effect (shared by all commits on
the seed) shows from the start; the commit's own luck and the wall-clock jitter grow as it
trains. w(f) = √f for most changes; for a `crossing` share (learning rate, width) w(f) =
(f − f×)/(1 − f×), f× ~ U(0.3, 0.9): behind early, ahead at the end (or the reverse); a
`schedule` share also changes the learning-rate schedule, which the rule refuses to pair.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from agent.decide import noise as noise_module
from agent.decide.decision import Evidence, RunMore
from agent.decide.curve_forecast import PRIOR, CurveNoise, Prior, pooled_curve_noise
from agent.decide.early_stop import EarlyStopSettings, FinishedPair, Stop, judge, loss_before
from agent.decide.sequential import SequentialRule
from agent.record.curves import Curve, CurvePoint
from agent.record.events import Decision, Direction, Verdict

RUN_S = 75.0
START, TRAIN = 0.1, 0.8              # shares of a run's time: start-up, training (the rest: eval)
STOPPERS = ("today", "nightshift", "median")


@dataclass(frozen=True)
class CurveModel:
    points: int = 40                 # progress lines per run
    line_noise: float = 0.3          # one line's loss noise (one batch), σ units
    crossing: float = 0.25           # share of candidates whose curve crosses the incumbent's
    schedule: float = 0.10           # share that also change the schedule (cannot be paired)


def warmdown(start: float):
    return lambda f: 1.0 if f < start else (1 - f) / (1 - start)


@dataclass
class Run:
    commit: int
    seed: int
    candidate: bool
    start: float
    length: float                    # its full time, runs
    final: float
    curve: Curve
    stopped: bool = False

    def fraction(self, now: float) -> float:
        return min(max((now - self.start - START * self.length) / (TRAIN * self.length), 0.0), 1.0)


@dataclass
class Candidate:
    commit: int
    level: float
    gain: float
    history: tuple
    kind: str
    cross: float
    values: dict[int, float] = field(default_factory=dict)
    looks: list[int] = field(default_factory=list)
    asked: RunMore | None = None
    trial: object = None             # its Optuna trial (median pruner)


@dataclass
class Result:
    progress: float = 0.0
    hours: float = 0.0
    decided: int = 0                 # candidates kept, discarded or inconclusive
    candidates: int = 0
    keeps: dict[str, int] = field(default_factory=lambda: {"true": 0, "null": 0, "harmful": 0})
    stopped: int = 0                 # candidates discarded by a stopped run
    wins_stopped: int = 0            # ... whose true effect was an improvement
    premature: int = 0               # stopped, though the full run would not have ended it there
    premature_wins: int = 0          # ... and a real improvement
    unpaired: int = 0                # judgements the rule refused (cannot pair)
    candidate_time: float = 0.0      # worker time in candidate runs
    saved_time: float = 0.0          # worker time stopped runs did not use
    superseded: int = 0
    runs: int = 0                    # runs started


def night(stopper: str, workers: int, draw, world, rng: np.random.Generator, curves: np.random.Generator,
          runs_per_worker: int, model: CurveModel = CurveModel(), rule: SequentialRule | None = None,
          settings: EarlyStopSettings = EarlyStopSettings(), prior: Prior = PRIOR,
          reapply: float = 0.5) -> Result:
    """One night; `draw()` gives a new candidate's true gain, `world` the final values."""
    rule = rule or SequentialRule()
    result, horizon = Result(), float(runs_per_worker)
    level, incumbent, commit, now, seq = 0.0, 0, 0, 0.0, 0
    reference: dict[int, float] = {}
    finished: dict[tuple[int, int], Run] = {}
    running: dict[tuple[int, int], Run] = {}
    history: list[Decision] = []
    pending: list[Candidate] = []
    events: list[tuple[float, int, str, tuple[int, int], int]] = []
    table: dict[int, dict[int, float]] = {}
    groups: dict[int, list[float]] = {}
    pairs: list[FinishedPair] = []
    paired: set[tuple[int, int]] = set()
    losses: dict[int, dict[float, list[float]]] = {}     # commit -> checkpoint -> its runs' losses
    spread: list = [-1, CurveNoise({})]
    waiting_reapply: list[float] = []
    study = _study() if stopper == "median" else None
    schedule_of = {0: warmdown(0.4)}

    grid = np.arange(1, model.points + 1) / model.points
    shapes: dict[int, np.ndarray] = {0: np.zeros(model.points)}   # commit -> level along the run

    def shape(c: int, kind: str, cross: float, gain: float) -> np.ndarray:
        """Its parent's shape plus its own change: −gain·w(f), ending at −gain."""
        w = np.sqrt(grid) if kind == "plain" else (grid - cross) / (1 - cross)
        return shapes[incumbent] - gain * w

    def curve_of(c: int, seed: int, final: float) -> Curve:
        g = world.seed_effect[seed]
        rest = final - shapes[c][-1] - g
        losses = 4 * (1 - np.sqrt(grid)) + shapes[c] + g + rest * np.sqrt(grid) \
            + curves.normal(0, model.line_noise, model.points)
        lr = schedule_of[c]
        return Curve(tuple(CurvePoint(float(f), float(x), k + 1, lr(float(f)))
                           for k, (f, x) in enumerate(zip(grid, losses))))

    def start(c: int, seed: int, lvl: float, is_candidate: bool) -> None:
        nonlocal seq
        value = world.run(c, lvl, seed)
        result.runs += 1
        run = Run(c, seed, is_candidate, now, rng.uniform(0.9, 1.1), value, curve_of(c, seed, value))
        running[c, seed] = run
        seq += 1
        heapq.heappush(events, (now + run.length, seq, "finish", (c, seed), 0))
        if is_candidate and stopper != "today":
            for k, checkpoint in enumerate(settings.checkpoints):
                seq += 1
                at = now + run.length * (START + TRAIN * checkpoint)
                heapq.heappush(events, (at, seq, "check", (c, seed), k))

    def noise() -> tuple[float | None, int]:
        ss = dof = 0
        for values in groups.values():
            if len(values) > 1:
                mean = sum(values) / len(values)
                ss += sum((v - mean) ** 2 for v in values)
                dof += len(values) - 1
        return (math.sqrt(ss / dof), dof) if dof else (None, 0)

    def evidence(cand: Candidate, values: dict[int, float] | None = None) -> Evidence:
        sd, dof = noise()
        return Evidence(Direction.MINIMIZE, dict(values or cand.values), dict(reference), sd, dof,
                        cand.history, looks=tuple(cand.looks),
                        batch=max(1, workers // max(1, len(pending))), runs=table)

    def end_candidate(cand: Candidate) -> None:
        for key in [k for k in running if k[0] == cand.commit]:
            run = running.pop(key)
            result.candidate_time += now - run.start
        if cand in pending:
            pending.remove(cand)

    def stop(cand: Candidate, run: Run) -> None:
        result.stopped += 1
        result.wins_stopped += cand.gain > 1e-12
        # Would the full run have ended the candidate at this look? (Its value is drawn.)
        full = rule.next(evidence(cand, {**cand.values, run.seed: run.final}))
        if not (isinstance(full, Decision) and full.verdict is Verdict.DISCARD):
            result.premature += 1
            result.premature_wins += cand.gain > 1e-12
        result.saved_time += run.start + run.length - now
        run.stopped = True
        end_candidate(cand)
        history.append(Decision(Verdict.DISCARD, reason="a discard stopped early"))
        result.decided += 1

    def judged(cand: Candidate, run: Run, k: int) -> bool:
        """Whether the run stops at checkpoint k."""
        checkpoint = settings.checkpoints[k]
        if stopper == "median":
            if cand.trial is None or run.seed != min(cand.values, default=run.seed):
                return False
            cand.trial.report(loss_before(run.curve.upto(checkpoint), checkpoint), k)
            return cand.trial.should_prune()
        mine = run.curve.upto(checkpoint + 1e-9)
        theirs, inc_final = partner_of(run.seed)
        if theirs is None:
            result.unpaired += 1
            return False
        estimate = noise_module.estimate(evidence(cand))
        scale = estimate.pair_sd if estimate.pair_dof >= 2 else (estimate.sd or 0) * math.sqrt(2)
        def loses(gap: float) -> bool:
            if inc_final is None:
                return False         # the incumbent's run on this seed is still running
            step = rule.next(evidence(cand, {**cand.values, run.seed: inc_final - gap}))
            return isinstance(step, Decision) and step.verdict is Verdict.DISCARD

        verdict = judge(mine, theirs, pairs, settings, scale=scale or 0.0, noise=curve_spread(),
                        now=checkpoint, loses=loses, prior=prior)
        result.unpaired += type(verdict).__name__ == "CannotPair"
        return isinstance(verdict, Stop)

    def curve_spread() -> CurveNoise:
        """The spread of the finished runs' curves across seeds, within commits (as the night's
        agent/night/early_stops.py measures it), recomputed when a run has finished."""
        if spread[0] != len(finished):
            spread[:] = [len(finished), pooled_curve_noise(
                {c: [by_checkpoint[c] for by_checkpoint in losses.values()] for c in settings.checkpoints})]
        return spread[1]

    def partner_of(seed: int) -> tuple[Curve | None, float | None]:
        """What a candidate run on `seed` is compared with: the incumbent's run on that seed
        (its curve so far; its final once it ended), or, when the rule ran none there (it
        stops pairing when seeds share nothing), the mean curve of its finished runs."""
        same = finished.get((incumbent, seed)) or running.get((incumbent, seed))
        if same is not None:
            done = (incumbent, seed) in finished
            return (same.curve if done else same.curve.upto(same.fraction(now)),
                    same.final if done else None)
        runs = [r for (c, _), r in finished.items() if c == incumbent]
        if not runs:
            return None, None
        losses = np.mean([[p.loss for p in r.curve.points] for r in runs], axis=0)
        mean = Curve(tuple(dataclasses.replace(p, loss=float(x))
                           for p, x in zip(runs[0].curve.points, losses)))
        return mean, float(np.mean([r.final for r in runs]))

    def pair_up(c: int, seed: int) -> None:
        """A finished candidate run and what it was compared with, both finished: a pair."""
        key = (c, seed)
        if key in paired or key not in finished or not any(x.commit == c for x in pending):
            return
        theirs, final = partner_of(seed)
        if theirs is None or final is None:
            return
        paired.add(key)
        pairs.append(FinishedPair.of(finished[key].curve, theirs, final - finished[key].final,
                                     settings.checkpoints))

    while True:
        if all(s in reference for s in rule.baseline_seeds()):
            for cand in list(pending):
                asked = cand.asked
                if asked and (any(s not in cand.values for s in asked.candidate_seeds)
                              or any(s not in reference for s in asked.reference_seeds)):
                    continue
                step = rule.next(evidence(cand))
                if isinstance(step, RunMore):
                    if step.look is not None and step.look not in cand.looks:
                        cand.looks.append(step.look)
                    cand.asked = step
                    continue
                end_candidate(cand)
                history.append(step)
                result.decided += 1
                if step.verdict is Verdict.KEEP:
                    result.keeps["true" if cand.gain > 1e-12 else "null" if cand.gain > -1e-12
                                 else "harmful"] += 1
                    level, incumbent = cand.level, cand.commit
                    reference = {}
                    for other in list(pending):
                        result.superseded += 1
                        end_candidate(other)
                        if rng.random() < reapply:
                            waiting_reapply.append(other.gain)
                    break
        while now < horizon and len(running) < workers:
            wanted = None
            for cand in pending:
                asked = cand.asked
                # the incumbent's run on a seed first: the candidate's curve has a partner
                for s in (asked.reference_seeds if asked else ()):
                    if s not in reference and (incumbent, s) not in running:
                        wanted = (incumbent, s, level, False)
                        break
                for s in (asked.candidate_seeds if asked and wanted is None else ()):
                    if s not in cand.values and (cand.commit, s) not in running:
                        wanted = (cand.commit, s, cand.level, True)
                        break
                if wanted:
                    break
            if wanted is None:
                for s in rule.baseline_seeds():
                    if s not in reference and (incumbent, s) not in running:
                        wanted = (incumbent, s, level, False)
                        break
            if wanted is None:
                gain = waiting_reapply.pop(0) if waiting_reapply else draw()
                commit += 1
                result.candidates += 1
                u = curves.random()
                kind = "plain" if u >= model.crossing else "schedule" if u < model.schedule else "crossing"
                cand = Candidate(commit, level - gain, gain, tuple(history), kind,
                                 float(curves.uniform(0.3, 0.9)))
                shapes[commit] = shape(commit, kind, cand.cross, gain)
                schedule_of[commit] = warmdown(0.6) if kind == "schedule" else schedule_of[incumbent]
                if study is not None:
                    cand.trial = study.ask()
                cand.asked = rule.next(evidence(cand))
                pending.append(cand)
                continue
            start(*wanted)
        if not events:
            break
        now, _, what, key, k = heapq.heappop(events)
        run = running.get(key)
        if run is None or run.stopped:
            continue
        cand = next((x for x in pending if x.commit == key[0]), None)
        if what == "check":
            if cand is not None and judged(cand, run, k):
                if study is not None and cand.trial is not None:
                    study.tell(cand.trial, state=_pruned())
                stop(cand, run)
            continue
        running.pop(key)
        finished[key] = run
        if run.candidate:
            result.candidate_time += run.length
        table.setdefault(key[0], {}).setdefault(key[1], run.final)
        for c in settings.checkpoints:
            if (x := loss_before(run.curve, c)) is not None:
                losses.setdefault(key[0], {k: [] for k in settings.checkpoints})[c].append(x)
        groups.setdefault(key[0], []).append(run.final)
        if key[0] == incumbent:
            reference.setdefault(key[1], run.final)
            for other in pending:
                pair_up(other.commit, key[1])
        if cand is not None:
            cand.values[key[1]] = run.final
            pair_up(cand.commit, key[1])
            if study is not None and cand.trial is not None and key[1] == min(cand.values):
                study.tell(cand.trial, run.final)
                cand.trial = None
    result.progress, result.hours = -level, now * RUN_S / 3600
    return result


def _study():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(direction=Direction.MINIMIZE.value, pruner=optuna.pruners.MedianPruner())


def _pruned():
    import optuna

    return optuna.trial.TrialState.PRUNED
