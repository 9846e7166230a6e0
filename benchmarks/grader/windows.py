"""What drawing the evaluation windows from a secret does to val_bpb's noise, and why the
draw is one per night, not one per run.

    python -m benchmarks.grader.windows [--seeds 6] [--budget 60] [--secrets 8] [--models DIR]

Trains the unmodified train.py on `--seeds` seeds (one after another, as benchmarks/train/
baseline.py does), then scores each seed's model on `--secrets` secrets, three ways:
- the public rule's windows (evenly spaced: the evaluator's before the draw);
- windows drawn per night (train/evaluate.py `Draw`): one secret, the same windows for every
  seed;
- windows drawn per run: the secret and the run's seed, each seed its own windows.
Printed for each: one run's sd across seeds (what the keep rule's `sd` sees), and the sd
across seeds of the difference of two models scored alike (consecutive seeds' models standing
for a candidate and its incumbent: what `pair_sd` sees). Per night, the draw moves every
run's windows together: it adds nothing to either. Per run, it adds the draw's own spread.
The models run in processes apart, as in the evaluator, forked before anything here computes.
`--models DIR` keeps the trained models there and reuses them. It prints; it never asserts.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.train.baseline import run_seed   # first: train/ on the path would make `train` train.py

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "train"))


def public_starts(length: int, context_len: int, budget: int):
    """The evaluator's rule before the draw: evenly spaced, first at the start, last at the end."""
    import torch
    span = context_len + 1
    n = min(budget, length) // span
    return torch.arange(n) * (length - span) // max(n - 1, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--budget", type=float, default=60.0, help="training seconds per run")
    parser.add_argument("--secrets", type=int, default=8, help="other secrets each model is scored on")
    parser.add_argument("--models", type=Path, help="keep the trained models here (and reuse them)")
    args = parser.parse_args()
    import prepare
    data_dir = prepare.prepare()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with tempfile.TemporaryDirectory(prefix="nightshift-windows-") as tmp:
        folder = args.models or Path(tmp)
        for seed in range(args.seeds):
            if not (folder / f"seed{seed}" / "model.pt2").exists():
                run_seed(seed, args.budget, data_dir, folder / f"seed{seed}")
                print(f"seed {seed}: trained ({args.budget:g} s, load {os.getloadavg()[0]:.2f})", flush=True)
        score(folder, args.seeds, args.secrets, data_dir, cores)


def score(folder: Path, seeds: int, secrets: int, data_dir: Path, cores: int) -> None:
    from model_process import ModelProcess, keep_freed_memory   # imports torch: forked before anything computes
    processes = [ModelProcess.fork(threads=cores) for _ in range(seeds)]
    keep_freed_memory()
    import torch

    import evaluate
    from prepare import EVAL_BYTES, load_split
    torch.set_num_threads(cores)
    val = load_split(data_dir, "val")
    nights = [os.urandom(32) for _ in range(secrets)]
    public, per_night, per_run, previous = [], [], [], []    # [model][secret]
    for seed, process in enumerate(processes):
        with process:
            scorer = evaluate.Scorer(process, process.load(folder / f"seed{seed}" / evaluate.ARTIFACT))
            T, span = scorer.context_len, scorer.context_len + 1
            bpb = lambda starts: scorer.bits_per_byte(evaluate._cut(val, starts, span))[0]   # noqa: E731
            drawn = lambda secret: bpb(evaluate.window_starts(   # noqa: E731
                len(val), T, EVAL_BYTES, evaluate.Draw(secret).generator("val")))
            public.append(bpb(public_starts(len(val), T, EVAL_BYTES)))
            per_night.append([drawn(night) for night in nights])
            per_run.append([drawn(night + seed.to_bytes(8, "little")) for night in nights])
            # on the previous seed's windows: the pair (seed - 1, seed) scored alike, as a
            # candidate and its incumbent on one seed are
            previous.append([drawn(night + (seed - 1).to_bytes(8, "little", signed=True)) for night in nights])
        print(f"seed {seed}: val_bpb {public[-1]:.4f} on the public windows; drawn per night "
              f"{statistics.mean(per_night[-1]):.4f} (sd {statistics.stdev(per_night[-1]):.4f} across "
              f"{secrets} secrets, range {min(per_night[-1]):.4f} to {max(per_night[-1]):.4f})", flush=True)

    def spreads(values: list[list[float]], partners: list[list[float]]) -> tuple[float, float]:
        """(one run's sd across seeds, the sd across seeds of a pair's difference, the pair
        scored on one set of windows), mean over secrets."""
        runs = statistics.mean(statistics.stdev(m[k] for m in values) for k in range(secrets))
        pairs = statistics.mean(statistics.stdev(values[i][k] - partners[i + 1][k] for i in range(seeds - 1))
                                for k in range(secrets))
        return runs, pairs
    rows = {"public rule": (statistics.stdev(public),
                            statistics.stdev(public[i] - public[i + 1] for i in range(seeds - 1))),
            "drawn per night": spreads(per_night, per_night), "drawn per run": spreads(per_run, previous)}
    print(f"\nsd across {seeds} seeds (mean over {secrets} secrets): one run | a pair's difference")
    for name, (run, pair) in rows.items():
        print(f"  {name:16} {run:.4f} | {pair:.4f}")
    draw = statistics.mean(statistics.stdev(m) for m in per_night)
    print(f"the draw alone, one model across {secrets} secrets: sd {draw:.4f}")


if __name__ == "__main__":
    main()
