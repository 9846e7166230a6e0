"""What each keep cost, on a user's own script: `python -m benchmarks.compute.own_script_nights`.

A realistic night on karpathy/makemore as shipped (tests/fixtures/makemore, examples/makemore/
program.md: its argparse defaults are the knobs, 501 steps a run, so a bigger model simply
trains longer): the LLM-free Optuna researcher proposes, the real `nightshift run` decides.
The same night (same researcher seed, so the same first proposals) runs under each
`compute:` policy (default: equal, then free), and the ledger is read back:

- every keep, with its effect and its run time against its incumbent's (the decision's
  `compute`), and the parameter counts both printed;
- the wins refused for their compute (discards whose evidence says `refused: compute`);
- the run time the night spent, and the last incumbent's run time against the base's: how
  much more compute a night's result costs to train than the script you started from.

Under `free`, the single-run rule's blind spot appears: keeps that are bigger models. Under
`equal`, every keep trains in the base's time (within run-time noise). Each night takes
minutes (a run is 11-14 s for the default model on one thread, 40-50 s for the biggest);
`--experiments N` and `--policies equal,+50%,free` size it.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT))

from agent.record.events import Role, Verdict  # noqa: E402
from agent.record.state import fold  # noqa: E402
from agent.record.ledger import read_events  # noqa: E402
from tests.loop_helpers import set_front_matter  # noqa: E402

MAKEMORE = PROJECT / "tests" / "fixtures" / "makemore"


def makemore_repo(root: Path, compute: str) -> Path:
    root.mkdir(parents=True)
    for name in ("makemore.py", "names.txt", "LICENSE"):
        shutil.copy(MAKEMORE / name, root / name)
    program = set_front_matter((PROJECT / "examples" / "makemore" / "program.md").read_text(),
                               sandbox="local", researcher="optuna", compute=compute)
    (root / "program.md").write_text(program)
    git = ["git", "-C", str(root), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "makemore as shipped"], check=True)
    return root


def night(root: Path, experiments: int, seed: int) -> tuple[object, float]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "COLUMNS": "160"}
    env.pop("ANTHROPIC_API_KEY", None)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--tag", "bench", "-n", str(experiments),
                           "--seed", str(seed)], cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the night failed (rc {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return fold(read_events(root / "results" / "bench" / "ledger.jsonl")), time.monotonic() - started


def median_time(state, commit: str) -> float | None:
    times = [r.duration_s for r in state.runs if r.commit == commit and r.ok and r.duration_s]
    return statistics.median(times) if times else None


def report(policy: str, state, wall_s: float) -> dict:
    print(f"\n== compute: {policy}  ({len(state.experiments)} experiments, {len(state.runs)} runs, "
          f"{sum(r.duration_s or 0 for r in state.runs):.0f} s of run time, {wall_s:.0f} s wall)")
    print(f"{'id':6} {'verdict':18} {'effect':>8} {'compute':>8} {'cand s':>7} {'inc s':>7} {'params':>19}  description")
    keeps, refused = [], []
    for d in state.decisions:
        experiment = state.experiments.get(d.id)
        if experiment is None:
            continue
        c = d.compute
        is_refused = d.evidence.get("refused") == "compute"
        word = f"{d.verdict.value}{' (compute)' if is_refused else ''}"
        params = (f"{c.candidate_params:,.0f}/{c.incumbent_params:,.0f}"
                  if c and c.candidate_params and c.incumbent_params else "-")
        effect = f"{d.effect:+.4f}" if d.effect is not None else "-"
        print(f"{d.id:6} {word:18} {effect:>8} {(f'{c.ratio:.2f}x' if c else '-'):>8} "
              f"{(f'{c.candidate_s:.1f}' if c else '-'):>7} {(f'{c.incumbent_s:.1f}' if c else '-'):>7} "
              f"{params:>19}  {experiment.description[:60]}")
        if d.verdict == Verdict.KEEP:
            keeps.append(d)
        if is_refused:
            refused.append(d)
    base_s, last_s = median_time(state, state.base_commit), median_time(state, state.incumbent)
    ratios = [d.compute.ratio for d in keeps if d.compute]
    growth = last_s / base_s if base_s and last_s else None
    print(f"keeps {len(keeps)} (run time vs their incumbent's: "
          f"{', '.join(f'{r:.2f}x' for r in ratios) or 'none'}); refused for compute {len(refused)}; "
          f"the night's result trains in {growth:.2f}x the base's time" if growth else "")
    return {"policy": policy, "keeps": len(keeps), "refused": len(refused), "ratios": ratios,
            "growth": growth, "run_s": sum(r.duration_s or 0 for r in state.runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=8, help="experiments per night")
    parser.add_argument("--policies", default="equal,free", help="compute: policies, comma-separated")
    parser.add_argument("--seed", type=int, default=3, help="the Optuna researcher's seed")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="compute-bench-") as tmp:
        for policy in args.policies.split(","):
            root = makemore_repo(Path(tmp) / policy.replace("%", "pct").replace("+", ""), policy)
            state, wall_s = night(root, args.experiments, args.seed)
            rows.append(report(policy, state, wall_s))
    print("\nside by side (the same researcher seed):")
    print(f"{'compute:':10} {'keeps':>5} {'refused':>7} {'keeps max x':>11} {'result x base':>13} {'run time':>9}")
    for row in rows:
        biggest = f"{max(row['ratios']):.2f}x" if row["ratios"] else "-"
        growth = f"{row['growth']:.2f}x" if row["growth"] else "-"
        print(f"{row['policy']:10} {row['keeps']:>5} {row['refused']:>7} {biggest:>11} {growth:>13} {row['run_s']:>8.0f}s")


if __name__ == "__main__":
    main()
