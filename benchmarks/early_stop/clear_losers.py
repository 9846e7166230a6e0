"""What a clear loser costs in a real night: `python -m benchmarks.early_stop.clear_losers`.

Issue 40's first measurement, as a script: a night of nothing but clear losers, through the
real `nightshift run` (scripted researcher, local sandbox, early stopping on, the defaults
otherwise), on two targets that print a loss curve:

- `train`: the bundled train/train.py at a 20-s budget; the losers are knobs at the bad end
  of their ranges (each learning rate at its bottom, a batch of 8, one layer);
- `makemore`: karpathy/makemore as shipped (tests/fixtures/makemore, examples/makemore/
  program.md: 501 steps a run, its argparse defaults the knobs); the losers are its learning
  rate at 1e-5, a width of 8 and one layer of width 16 (flag defaults edited in place).

For each discard it prints where it ended (the checkpoint of its stop, or run to the end:
why not stopped), and its candidate run time over a full run's (the median of the night's
full runs of the incumbent): 1.0 is what the single-run rule pays for the same loser, and
issue 40's target is <= 0.5. Run time is the harness's wall clock of each run, start-up and
evaluation included (a stopped run by the seconds it ran). Each night takes a few minutes;
`--target train|makemore|both`, `--budget` for train.py's.
"""
from __future__ import annotations

import argparse
import json
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

from agent.decide.early_stop import EarlyStopSettings, gap_at  # noqa: E402
from agent.night.early_stops import EarlyStopping, aligned  # noqa: E402
from agent.record.events import Direction, Role, RunFinished  # noqa: E402
from agent.record.ledger import read_events  # noqa: E402
from agent.record.state import fold  # noqa: E402
from tests.loop_helpers import project_repo, set_front_matter  # noqa: E402

MAKEMORE = PROJECT / "tests" / "fixtures" / "makemore"

TRAIN_LOSERS = [
    ({"replace": ["LR = 1e-2 ", "LR = 1e-4 "], "description": "LR at the bottom of its range"}),
    ({"replace": ["EMBED_LR = 0.2 ", "EMBED_LR = 0.001"], "description": "EMBED_LR at its bottom"}),
    ({"replace": ["MUON_LR = 0.02 ", "MUON_LR = 0.003"], "description": "MUON_LR at its bottom"}),
    ({"replace": ["BATCH_SIZE = 64 ", "BATCH_SIZE = 8  "], "description": "a batch of 8"}),
    ({"replace": ["N_LAYER = 2 ", "N_LAYER = 1 "], "description": "one layer"}),
]
MAKEMORE_LOSERS = [     # inside examples/makemore's knob ranges, at their bad ends
    ({"replace": ["type=float, default=5e-4, help=\"learning rate\"", "type=float, default=1e-4, help=\"learning rate\""],
      "description": "learning rate 1e-4 (the bottom of its range)"}),
    ({"replace": [["'--n-embd', type=int, default=64", "'--n-embd', type=int, default=32"],
                  ["'--n-layer', type=int, default=4", "'--n-layer', type=int, default=2"]],
      "description": "the smallest model: 2 layers of width 32"}),
    ({"replace": ["type=int, default=32, help=\"batch size", "type=int, default=16, help=\"batch size"],
      "description": "a batch of 16"}),
]


def git_commit(root: Path) -> None:
    git = ["git", "-C", str(root), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "as shipped"], check=True)


def makemore_repo(root: Path) -> Path:
    root.mkdir(parents=True)
    for name in ("makemore.py", "names.txt", "LICENSE"):
        shutil.copy(MAKEMORE / name, root / name)
    program = set_front_matter((PROJECT / "examples" / "makemore" / "program.md").read_text(),
                               sandbox="local", researcher="scripted")
    (root / "program.md").write_text(program)
    git_commit(root)
    return root


def night(repo: Path, losers: list[dict], workdir: Path) -> tuple[object, float]:
    script = workdir / "losers.json"
    script.write_text(json.dumps(losers))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(PYTHONPATH=str(PROJECT), COLUMNS="160", NIGHTSHIFT_DATA_ROOT=str(workdir / "data"))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--tag", "losers", "--script", str(script),
                           "--max-experiments", str(len(losers))], cwd=repo, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the night failed (rc {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return fold(read_events(repo / "results" / "losers" / "ledger.jsonl")), time.monotonic() - started


def report(label: str, state, wall_s: float) -> list[float]:
    """Print each discard's cost; return the costs (candidate run time over a full run's)."""
    full = [r.duration_s for r in state.runs
            if r.role == Role.REFERENCE and r.ok and r.duration_s and r.commit == state.base_commit]
    full_s = statistics.median(full)
    print(f"\n== {label}: {len(state.experiments)} losers, a full run {full_s:.1f} s "
          f"(median of {len(full)} incumbent runs), {wall_s:.0f} s wall")
    print(f"{'id':6} {'verdict':12} {'cost':>5} {'cand s':>7}  where it ended; what")
    costs = []
    for experiment in state.experiments.values():
        runs = [r for r in list(state.runs) + list(state.interrupted)
                if r.experiment == experiment.id and r.role == Role.CANDIDATE]
        spent = sum(r.duration_s or 0.0 for r in runs if isinstance(r, RunFinished))
        stop = experiment.stopped_early
        verdict = experiment.verdict.value if experiment.verdict else "-"
        cost = spent / full_s
        if stop is not None:
            where = f"stopped at {stop.reached:.0%}: {stop.reason}"
        elif not runs:
            where = f"never ran: {experiment.decision.reason if experiment.decision else '?'}"
        else:
            where = f"{len(runs)} run(s) to the end: {why_not_stopped(state, experiment.id)}"
        if runs and verdict != "keep":
            costs.append(cost)
        print(f"{experiment.id:6} {verdict:12} {cost:5.2f} {spent:7.1f}  {where}; {experiment.description}")
        for run in runs:
            if isinstance(run, RunFinished):
                print(f"{'':33}seed {run.seed}: {gaps_in_units(state, run)}")
    if not costs:
        print("no loser ran")
        return costs
    print(f"run time per discard: {statistics.fmean(costs):.2f} of a full run "
          f"(median {statistics.median(costs):.2f}; the single-run rule pays 1.0; target <= 0.5)")
    return costs


def gaps_in_units(state, run: RunFinished) -> str:
    """The candidate's loss gap to its partner at each checkpoint, in the night's noise units
    as the night measured them at its end (a diagnostic: the night judged with less)."""
    settings = EarlyStopSettings()
    stopping = EarlyStopping(settings, rule=None, direction=Direction.MINIMIZE)
    experiment = state.experiments[run.experiment]
    partner = stopping.partner(state, experiment.parent, run.seed)
    if run.curve is None or not run.curve.points or partner is None:
        return "no curve to compare"
    total = (stopping._total_steps(state, experiment.parent, run.seed)
             if "clock" in (run.curve.placed, partner.curve.placed) else None)
    mine, theirs = aligned(run.curve, partner.curve, total)
    noise = stopping.curve_noise(state)
    said = []
    for checkpoint in settings.checkpoints:
        gap, unit = gap_at(mine, theirs, checkpoint), noise.gap_unit(checkpoint)
        if gap is not None:
            said.append(f"{checkpoint:.0%} {gap:+.3f}" + (f" ({gap / unit:+.1f} units)" if unit else ""))
    return ", ".join(said) + f" against the incumbent's {partner.kind}" if said else "no gap"


def why_not_stopped(state, experiment_id: str) -> str:
    unpaired = [u.reason for u in state.unpaired.values() if u.experiment == experiment_id]
    return unpaired[0] if unpaired else "its forecast never confidently lost"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--target", choices=("train", "makemore", "both"), default="both")
    parser.add_argument("--budget", default="20s", help="train.py's budget (default 20s)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="clear-losers-") as tmp:
        work = Path(tmp)
        if args.target in ("train", "both"):
            repo = project_repo(work / "train", budget=args.budget, sandbox="local", researcher="scripted")
            state, wall = night(repo, TRAIN_LOSERS, work)
            report(f"train.py at {args.budget}", state, wall)
        if args.target in ("makemore", "both"):
            repo = makemore_repo(work / "makemore")
            state, wall = night(repo, MAKEMORE_LOSERS, work)
            report("makemore, 501 steps", state, wall)
    return 0


if __name__ == "__main__":
    sys.exit(main())
