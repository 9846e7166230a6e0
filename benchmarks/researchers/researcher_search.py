"""Where the LLM-free researcher searches: local moves first vs TPE from scratch.

    python -m benchmarks.researchers.researcher_search [--nights 10] [--runs 150] [--seed 0]

Simulated nights on a landscape shaped like a training script's knobs: the defaults are good
but not best (the optimum sits a step or two away in a few knobs), and far moves are much
worse (a learning rate ten times too high, a batch that does not fit the budget). The real
OptunaResearcher proposes (the real study, knob parsing and predictions), the real
SequentialRule decides on runs drawn from the noise model of benchmarks/keep_rule/decisions.py (σ = 1),
with the loop's seeds and paired references. Both arms see the same landscapes and noise:

  local+tpe   today's default: 10 local moves in a trust region, then TPE (a third local)
  tpe         TPE over the whole space from the first proposal (the researcher before)

Printed per arm: real progress (the incumbent's true improvement, σ) after a quarter, half
and all of the night, keeps, candidates, how many of the first 5 candidates were worse than
the incumbent by more than 2σ (what a newcomer watches in the quick start), and the
calibration of the predictions (how often the predicted 80 % interval held). Never asserts.
"""
from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import numpy as np


from agent.decide.decision import Evidence
from agent.decide.sequential import SequentialRule
from agent.record.events import Decision, Direction, Verdict
from agent.record.state import Experiment
from agent.researchers.base import Outcome, ResearchContext
from agent.target.knobs import knob_values, parse_knobs
from agent.researchers.optuna_researcher import OptunaResearcher
from benchmarks.sim.nights import World, load_noise_model

SOURCE = '''\
N_LAYER = 4          # search: int(1, 12)
N_EMBD = 256         # search: choice(128, 192, 256, 384, 512)
LR = 3e-3            # search: log(1e-4, 3e-2)
WEIGHT_DECAY = 0.1   # search: float(0.0, 0.3)
BETA2 = 0.95         # search: float(0.9, 0.999)
WARMUP_FRAC = 0.02   # search: float(0.0, 0.1)
WARMDOWN_FRAC = 0.4  # search: float(0.0, 0.8)
BATCH = 32           # search: choice(8, 16, 32, 64, 128)
'''
KNOBS = parse_knobs(SOURCE)


def landscape(rng: np.random.Generator):
    """A true level (σ units, lower = better) over the knobs, the defaults near its optimum."""
    weights = rng.uniform(4.0, 16.0, size=len(KNOBS))
    default = np.array([_position(k, k.value) for k in KNOBS])
    optimum = np.clip(default + rng.normal(0.0, 0.2, size=len(KNOBS)), 0.0, 1.0)

    def level(config: dict) -> float:
        x = np.array([_position(k, config[k.name]) for k in KNOBS])
        bowl = float(np.sum(weights * (x - optimum) ** 2))
        return bowl + 3.0 * bowl ** 2          # far moves get much worse, fast
    return level


def _position(knob, value) -> float:
    if knob.kind == "choice":
        return knob.choices.index(value) / (len(knob.choices) - 1)
    return min(max(float(knob.normalize(value)), 0.0), 1.0)


def night(arm: str, runs: int, seed: int, noise_model) -> dict:
    rng = np.random.default_rng([seed, 0])
    world, level_of = World(np.random.default_rng([seed, 1]), noise_model), landscape(rng)
    rule = SequentialRule()
    with tempfile.TemporaryDirectory() as tmp:
        researcher = OptunaResearcher(Path(tmp), seed=seed, **(
            {"startup": 0, "local_share": 0.0} if arm == "tpe" else {}))
        source, commit, incumbent, spent = SOURCE, 0, 0, 0
        level = start = level_of(knob_values(source))
        reference = {s: world.run(0, level, s) for s in rule.baseline_seeds()}
        spent += len(reference)
        groups: dict[int, list[float]] = {0: list(reference.values())}
        history: list[Decision] = []
        progress, bad_first, covered, scored, index = [], 0, 0, 0, 0
        while spent < runs:
            index += 1
            values = [v for vs in groups.values() for v in vs]
            noise = float(np.sqrt(np.mean([np.var(v, ddof=1) for v in groups.values() if len(v) > 1])))
            context = ResearchContext(
                program_text="", target="train.py", incumbent_source=source,
                incumbent_commit=str(incumbent), protected={}, ledger_summary="", metric="loss",
                direction=Direction.MINIMIZE, noise_sd=noise, incumbent_value=float(np.mean(list(reference.values()))),
                experiment_index=index)
            proposal = researcher.propose(context)
            commit += 1
            cand_level = level_of(knob_values(proposal.source))
            if index <= 5:
                bad_first += cand_level - level > 2.0
            candidate: dict[int, float] = {}
            while True:
                sd = noise if values else None
                step = rule.next(Evidence(Direction.MINIMIZE, dict(candidate), dict(reference), sd,
                                          len(values), tuple(history)))
                if isinstance(step, Decision):
                    break
                for s in step.candidate_seeds:
                    candidate[s] = world.run(commit, cand_level, s)
                    groups.setdefault(commit, []).append(candidate[s])
                for s in step.reference_seeds:
                    reference.setdefault(s, world.run(incumbent, level, s))
                spent += len(step.candidate_seeds) + len(step.reference_seeds)
            history.append(step)
            measured = -step.effect if step.effect is not None else None
            if measured is not None:
                lo, hi = proposal.prediction.interval
                covered += lo <= measured <= hi
                scored += 1
            record = Experiment(id=f"e{index}", commit=None, parent=str(incumbent),
                                description=proposal.description, hypothesis=proposal.hypothesis,
                                prediction=proposal.prediction, researcher=researcher.name,
                                extra=dict(proposal.extra))
            researcher.observe(record, Outcome(f"e{index}", step.verdict, measured,
                                               float(np.mean(list(candidate.values())))))
            if step.verdict is Verdict.KEEP:
                source, level, incumbent = proposal.source, cand_level, commit
                reference = {s: world.run(commit, level, s) for s in rule.baseline_seeds()}
                groups[commit] = groups.get(commit, []) + list(reference.values())
                spent += len(reference)
            progress.append((spent, start - level))
    at = lambda share: next((p for s, p in progress if s >= share * runs), progress[-1][1])  # noqa: E731
    return {"q1": at(0.25), "q2": at(0.5), "end": start - level, "keeps": sum(
        d.verdict is Verdict.KEEP for d in history), "candidates": index, "bad_first": bad_first,
        "coverage": covered / scored if scored else math.nan}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", type=int, default=10)
    parser.add_argument("--runs", type=int, default=150, help="runs per night (150 ≈ 3 h of 75-s runs)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    noise_model, _ = load_noise_model()
    print(f"{args.nights} nights of {args.runs} runs per arm, the same landscapes and noise; σ units")
    print(f"{'arm':10s} {'¼ night':>8s} {'½ night':>8s} {'night':>8s} {'keeps':>6s} {'cands':>6s} "
          f"{'bad of first 5':>15s} {'80% intervals held':>19s}")
    for arm in ("local+tpe", "tpe"):
        rows = [night(arm, args.runs, args.seed + i, noise_model) for i in range(args.nights)]
        mean = lambda key: float(np.nanmean([r[key] for r in rows]))  # noqa: E731
        print(f"{arm:10s} {mean('q1'):8.2f} {mean('q2'):8.2f} {mean('end'):8.2f} {mean('keeps'):6.1f} "
              f"{mean('candidates'):6.0f} {mean('bad_first'):15.1f} {mean('coverage'):19.0%}", flush=True)


if __name__ == "__main__":
    main()
