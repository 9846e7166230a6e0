"""What a newcomer's first command shows: `python -m benchmarks.quickstart.first_command`.

Runs the README's first command (its `nightshift run ...`, read from the README's quick start)
from fresh clones of this repository's HEAD, each with a fresh data folder (the corpus is
prepared again), one after another, and reads each night back from its ledger:

- the whole command's wall time, and when the first keep was decided;
- the keeps (kept changes, with their measured effect);
- the experiments the single-run rule would have kept and Nightshift did not, on some of their
  seeds (the console's "one run would have decided ... otherwise" lines,
  agent/review/single_run.py), with on how many.

A run *shows the product* when it has a keep and such an experiment, within `--limit`
minutes (issue 41: 8 minutes, in 5 of 6 fresh runs on each of two machine speeds).

`--budget-scale S` simulates a machine S times as fast (0.5: half as fast) by scaling the
command's `--budget`: the model sees the steps that machine's run would take. The run
overheads (startup, evaluation) are this machine's, so the wall time of a truly slower
machine is longer than a scaled budget shows.

    python -m benchmarks.quickstart.first_command --runs 6
    python -m benchmarks.quickstart.first_command --runs 6 --budget-scale 0.5
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT))

from agent.record.ledger import read_events  # noqa: E402
from agent.record.events import LoopStarted  # noqa: E402
from agent.record.records import Direction, Verdict  # noqa: E402
from agent.record.state import fold  # noqa: E402
from agent.review.single_run import other_verdicts  # noqa: E402

SECRETS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")


@dataclass(frozen=True)
class FirstCommand:
    """One fresh run of the README's first command, read from its ledger."""

    rc: int
    wall_s: float
    first_keep_s: float | None
    keeps: tuple[str, ...]            # "MUON_LR 0.02 -> 0.04 (+0.12)"
    single_run_keeps: tuple[str, ...]  # descriptions the single-run rule keeps, Nightshift not
    experiments: int

    def shows(self, limit_s: float) -> bool:
        return self.rc == 0 and bool(self.keeps) and bool(self.single_run_keeps) and self.wall_s <= limit_s


def readme_command(readme: Path) -> list[str]:
    """The `nightshift run ...` of the README's quick start, as arguments after `nightshift`."""
    match = re.search(r"nightshift (run [^\n`]*)", readme.read_text())
    if match is None:
        raise SystemExit(f"{readme}: no `nightshift run ...` in the quick start")
    return shlex.split(match.group(1))


def scaled(arguments: list[str], scale: float) -> list[str]:
    """The arguments with `--budget Ns` times `scale`."""
    out = list(arguments)
    index = out.index("--budget")
    seconds = float(out[index + 1].rstrip("s")) * scale
    out[index + 1] = f"{seconds:g}s"
    return out


def run_once(arguments: list[str], workdir: Path, log: Path) -> FirstCommand:
    clone, data = workdir / "clone", workdir / "data"
    subprocess.run(["git", "clone", "-q", str(PROJECT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    env["NIGHTSHIFT_DATA_ROOT"] = str(data)
    started = time.time()
    with open(log, "w") as out:
        # `python -m agent.cli` in the clone is the `nightshift` that `pip install -e .` there gives
        rc = subprocess.run([sys.executable, "-m", "agent.cli", *arguments], cwd=clone, env=env,
                            stdout=out, stderr=subprocess.STDOUT).returncode
    return read_night(clone, rc, started, time.time() - started)


def read_night(clone: Path, rc: int, started: float, wall: float) -> FirstCommand:
    """The night the command ran in `clone`, from its ledger (`started`: the command's epoch)."""
    ledgers = sorted(clone.glob("results/*/ledger.jsonl"))
    if not ledgers:
        return FirstCommand(rc, wall, None, (), (), 0)
    events = list(read_events(ledgers[-1]))
    state = fold(events)
    started_event = next(e for e in events if isinstance(e, LoopStarted))
    direction = Direction(started_event.program.get("direction", "minimize"))
    experiments = list(state.experiments.values())
    kept = [e for e in experiments if e.verdict is Verdict.KEEP]
    first_keep = None
    if kept and kept[0].decision is not None and kept[0].decision.time:
        first_keep = datetime.fromisoformat(kept[0].decision.time).timestamp() - started
    keeps = tuple(f"{e.description} ({e.decision.decision.effect:+.3f})" for e in kept)
    others = tuple(o.description + (f" (on {o.seeds_otherwise} of {o.seeds_paired} seeds)" if o.seeds_paired else "")
                   for o in other_verdicts(experiments, direction) if o.single_run_keeps)
    return FirstCommand(rc, wall, first_keep, keeps, others, len(experiments))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=6, help="fresh clones, one after another (default 6)")
    parser.add_argument("--budget-scale", type=float, default=1.0,
                        help="simulate a machine this many times as fast by scaling --budget (default 1)")
    parser.add_argument("--limit", type=float, default=8.0, help="minutes the command may take (default 8)")
    parser.add_argument("--logs", type=Path, default=None, help="keep each run's console output and ledger here")
    args = parser.parse_args()
    arguments = scaled(readme_command(PROJECT / "README.md"), args.budget_scale)
    print(f"nightshift {shlex.join(arguments)}  (budget x{args.budget_scale:g}), {args.runs} fresh clones "
          f"of {subprocess.run(['git', '-C', str(PROJECT), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}",
          flush=True)
    print(f"{'run':>3} {'rc':>3} {'whole':>7} {'1st keep':>8}  keeps / what one run would have kept", flush=True)
    results = []
    for run in range(1, args.runs + 1):
        workdir = Path(tempfile.mkdtemp(prefix="nightshift-first-command-"))
        log = (args.logs or workdir) / f"run{run}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            result = run_once(arguments, workdir, log)
            for ledger in (workdir / "clone").glob("results/*/ledger.jsonl") if args.logs else ():
                shutil.copy(ledger, log.with_suffix(".ledger.jsonl"))     # to read the night again
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        results.append(result)
        first = f"{result.first_keep_s / 60:.1f} min" if result.first_keep_s is not None else "-"
        print(f"{run:>3} {result.rc:>3} {result.wall_s / 60:>5.1f} m {first:>8}  "
              f"keeps: {'; '.join(result.keeps) or 'none'} | one run keeps: "
              f"{'; '.join(result.single_run_keeps) or 'none'}", flush=True)
    shown = sum(r.shows(args.limit * 60) for r in results)
    walls = sorted(r.wall_s / 60 for r in results)
    print(f"shows a keep and a change one run would have kept, within {args.limit:g} min: "
          f"{shown} of {len(results)}; whole command {walls[0]:.1f}-{walls[-1]:.1f} min "
          f"(median {walls[len(walls) // 2]:.1f})")


if __name__ == "__main__":
    main()
