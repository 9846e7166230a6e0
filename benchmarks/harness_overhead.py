"""Harness overhead: seconds per experiment spent outside the training process.

    python benchmarks/harness_overhead.py [--experiments 20] [--sandbox local]

Runs the real loop (CLI, ledger, git workspace, snapshot, optuna researcher, decision rule,
sandbox) on a training script that does nothing but print a noisy metric, so almost all of
the wall time is the harness. Prints wall time per experiment and per run, minus the time
the sandboxed processes themselves took (which includes a Python start-up per run).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.record.ledger import fold  # noqa: E402
from tests.loop_helpers import cli_env, events, make_repo, nightshift  # noqa: E402
from tests.night.test_keep_rule_loop import NOISE_SCRIPT, PROGRAM  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=20)
    parser.add_argument("--sandbox", default="local")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        program = PROGRAM.replace("sandbox: local", f"sandbox: {args.sandbox}")
        repo = make_repo(Path(tmp) / "user", {"noise.py": NOISE_SCRIPT, "program.md": program})
        started = time.monotonic()
        done = nightshift(repo, "run", "--tag", "bench", "--max-experiments",
                          str(args.experiments), env=cli_env(Path(tmp) / "data"))
        wall = time.monotonic() - started
        if done.returncode != 0:
            sys.exit(done.stdout + done.stderr)
        state = fold(events(repo, "bench"))
    durations = [r["duration_s"] for r in state.runs]
    outside = wall - sum(durations)
    n_exp, n_runs = len(state.experiments), len(state.runs)
    print(f"sandbox {args.sandbox}: {n_exp} experiments, {n_runs} runs in {wall:.1f} s wall")
    print(f"  sandboxed process time: {sum(durations):.1f} s "
          f"(median {statistics.median(durations):.2f} s per run: python start-up + the script)")
    print(f"  harness, outside the process: {outside:.1f} s = {outside / n_exp:.2f} s per experiment, "
          f"{outside / n_runs:.2f} s per run (includes the CLI's start-up, once)")


if __name__ == "__main__":
    main()
