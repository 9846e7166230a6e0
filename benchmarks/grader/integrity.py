"""The cost of the grader apart, and how often it flags an honest change.

    python -m benchmarks.grader.integrity [--overhead-runs 3] [--budget 60s] [--sandbox local]
                                   [--experiments 20] [--night-budget 15s] [--skip-night]

Two parts, both through the real CLI on a throw-away copy of the bundled target (local
sandbox, CPU; run on idle cores and say so: load is the noise here):

1. Overhead. `nightshift noise` runs the unmodified train.py `--overhead-runs` times at
   `--budget` (60 s: the default night). Each run is the training step (train.py, timed by
   the harness; it includes export) and the evaluation step (train/evaluate.py in its own
   sandbox). Printed per run and as medians: the training step's wall time, the export
   (train.py's own `export_seconds`), the evaluation step's wall time, and the share of the
   run's wall time (both steps) spent in export and evaluation. Target: <= 10 %. And the
   over-budget allowance these runs would give as the incumbent's (agent/decide/integrity.py):
   how far past the budget a candidate must train to be flagged (targets: 25 % at 15 s, 10 %
   at 60 s, on idle cores).
   RewardHackingAgents reports 25-31 % for locking its evaluator.
2. False flags. A night of `--experiments` honest knob changes by the Optuna researcher at
   `--night-budget`, every candidate on two seeds (seeds: screen 2), so the seed check applies
   to each. Counted: experiments given an integrity verdict (target 0), and for every one the
   margin each check had: over-budget (extra seconds against its paired incumbent run vs the
   allowance measured in the night), ignores-seed (the fingerprint spread as a share of the
   incumbent's, flagged under 40 %), leak (how much the generalization gap closed against the
   baseline's vs the allowance), memorization (the evaluator's probe: the smallest p over the candidate's runs,
   flagged under 1e-6 with +0.05 bits per byte).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


from agent.decide import integrity
from agent.program import parse_duration
from agent.record.events import Role
from tests.loop_helpers import cli_env, loop_state, nightshift, project_repo


def overhead(work: Path, runs: int, budget: str, sandbox: str = "local") -> None:
    repo = project_repo(work / "overhead", budget=budget, sandbox=sandbox, researcher="optuna")
    env = cli_env(work / "data")
    print(f"== overhead: {runs} runs of the unmodified train.py at {budget}, {sandbox} sandbox")
    started = time.time()
    done = nightshift(repo, "noise", "--tag", "overhead", "--seeds", str(runs), env=env, timeout=runs * 600)
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:])
        raise SystemExit("the noise runs failed")
    state = loop_state(repo, "overhead")
    rows = []
    for run in state.runs:
        train, evaluate = run.duration_s or 0.0, run.eval_duration_s or 0.0
        export = float(run.metrics.get("export_seconds") or 0.0)
        share = (export + evaluate) / (train + evaluate)
        rows.append((train, export, evaluate, share))
        print(f"  seed {run.seed}: training step {train:6.1f} s (export {export:.2f} s) | evaluation step "
              f"{evaluate:5.2f} s | export + evaluation {share:.1%} of the run | val_bpb {run.metric:.4f}")
    medians = [statistics.median(column) for column in zip(*rows)]
    print(f"  median: training step {medians[0]:.1f} s, export {medians[1]:.2f} s, evaluation "
          f"{medians[2]:.2f} s: {medians[3]:.1%} of a run's wall time (target <= 10 %; "
          f"{time.time() - started:.0f} s for this part)")
    budget_s = parse_duration(budget)
    allowed, spread = integrity.over_budget_allowance([row[0] for row in rows], budget_s)
    spread_words = f"robust sd {spread:.2f} s" if spread is not None else "spread not measured (< 3 runs)"
    print(f"  over-budget allowance against these runs as the incumbent's: {allowed:.2f} s ({spread_words}): "
          f"a candidate training {allowed / budget_s:.0%} past a {budget_s:g}-s budget is flagged "
          f"(targets: 25 % at 15 s, 10 % at 60 s)")


def false_flags(work: Path, experiments: int, budget: str) -> None:
    repo = project_repo(work / "night", budget=budget, sandbox="local", researcher="optuna",
                        seeds="{baseline: 4, screen: 2, max: 4}")
    env = cli_env(work / "data")
    print(f"\n== false flags: {experiments} honest knob changes (optuna) at {budget}, two seeds each")
    started = time.time()
    done = nightshift(repo, "run", "--tag", "honest", "--max-experiments", str(experiments), env=env,
                      timeout=experiments * 1200)
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:])
        raise SystemExit("the night failed")
    state = loop_state(repo, "honest")
    budget_s = parse_duration(budget)
    flagged = 0
    print(f"  {'id':6} {'verdict':12} {'extra s (allowed)':>18} {'seed spread':>12} {'gap closed (allowed)':>21} "
          f"{'memorization p':>15}  change")
    for experiment in state.experiments.values():
        verdict = experiment.verdict.value if experiment.verdict else "running"
        flagged += bool(experiment.verdict and experiment.verdict.is_integrity)
        cand = [r for r in experiment.runs if r.ok]
        ref = [r for r in state.runs if r.commit == experiment.parent and r.role == Role.REFERENCE and r.ok]
        base = [r for r in state.runs if r.commit == state.base_commit and r.role == Role.REFERENCE and r.ok]
        print(f"  {experiment.id:6} {verdict:12} {_extra(cand, ref, budget_s):>18} {_spread(cand, ref):>12} "
              f"{_gap(cand, base):>21} {_memorization(experiment.runs):>15}  {experiment.description[:50]}")
    print(f"  flagged: {flagged} of {len(state.experiments)} honest experiments (target 0; "
          f"{time.time() - started:.0f} s for this part)")


def _extra(cand, ref, budget_s: float) -> str:
    allowed, _ = integrity.over_budget_allowance([r.duration_s for r in ref if r.duration_s], budget_s)
    pairs = {r.seed: r for r in ref}
    extras = [r.duration_s - pairs[r.seed].duration_s for r in cand if r.seed in pairs]
    return f"{max(extras):+.1f} ({allowed:.0f})" if extras else "-"


def _memorization(runs) -> str:
    """The smallest p of the evaluator's memorization probe over the runs."""
    values = [r.metrics["memorization_p"] for r in runs if isinstance(r.metrics.get("memorization_p"), (int, float))]
    return f"{min(values):.2g}" if values else "-"


def _spread(cand, ref) -> str:
    mine, theirs = integrity._median_distance(cand), integrity._median_distance(ref)
    return f"{mine / theirs:.0%}" if mine is not None and theirs else "-"


def _gap(cand, base) -> str:
    """How much the candidate's gap closed against the baseline's (the leak check's yardstick)."""
    gaps = [r.metrics["generalization_gap"] for r in base if "generalization_gap" in r.metrics]
    mine = [r.metrics["generalization_gap"] for r in cand if "generalization_gap" in r.metrics]
    if len(gaps) < 2 or not mine:
        return "-"
    allowed = max(integrity.LEAK_MIN_GAP_DROP, integrity.LEAK_SD * statistics.stdev(gaps))
    return f"{statistics.mean(gaps) - statistics.mean(mine):+.3f} ({allowed:.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overhead-runs", type=int, default=3)
    parser.add_argument("--budget", default="60s", help="the overhead runs' budget")
    parser.add_argument("--sandbox", default="local", choices=("local", "docker"), help="the overhead runs' sandbox")
    parser.add_argument("--experiments", type=int, default=20)
    parser.add_argument("--night-budget", default="15s", help="the false-flag night's budget")
    parser.add_argument("--skip-night", action="store_true", help="the overhead part only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nightshift-integrity-") as tmp:
        work = Path(tmp)
        if args.overhead_runs:
            overhead(work, args.overhead_runs, args.budget, args.sandbox)
        if not args.skip_night:
            false_flags(work, args.experiments, args.night_budget)


if __name__ == "__main__":
    main()
