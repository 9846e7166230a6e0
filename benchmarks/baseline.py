"""The baseline: val_bpb of the unmodified train/train.py over several seeds on this machine.

    python benchmarks/baseline.py [--seeds 3] [--budget 60] [--corpus PATH] [--data-root DIR]

Runs train.py under the run protocol, one seed after another (never side by side: they would
share the cores and each would measure less), and prints val_bpb as mean +- sd across seeds,
steps/s, tokens/s, and what the numbers depend on: corpus hash, python and torch versions,
the machine's load average. On a shared machine the figures are pessimistic.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "train"))
import prepare  # noqa: E402


def run_seed(seed: int, budget: float, data_dir: Path, out: Path) -> dict:
    """One training run as the harness would start it; its result.json, or an exit."""
    env = {**os.environ, "NIGHTSHIFT_SEED": str(seed), "NIGHTSHIFT_BUDGET_S": str(budget),
           "NIGHTSHIFT_OUT": str(out), "NIGHTSHIFT_DATA": str(data_dir), "NIGHTSHIFT_SPLIT": "val"}
    proc = subprocess.run([sys.executable, "train/train.py"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"seed {seed}: train.py exited {proc.returncode}\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    return json.loads((out / "result.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=60.0, help="training seconds per run")
    parser.add_argument("--corpus", type=Path, help="default: the stdlib sources")
    parser.add_argument("--data-root", type=Path)
    args = parser.parse_args()

    data_dir = prepare.prepare(args.corpus, args.data_root)
    meta = json.loads((data_dir / "meta.json").read_text())
    import torch
    print(f"corpus {meta['corpus_hash'][:16]} ({meta['source']}), python {platform.python_version()}, "
          f"torch {torch.__version__}, {len(os.sched_getaffinity(0))} cores, budget {args.budget:g}s")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            load_before = os.getloadavg()[0]
            r = run_seed(seed, args.budget, data_dir, Path(tmp) / f"seed{seed}")
            results.append(r)
            print(f"seed {seed}: val_bpb {r['val_bpb']:.4f} | steps {r['steps']} | "
                  f"steps/s {r['steps'] / r['train_seconds']:.1f} | tokens/s {r['tokens_per_s']:,.0f} | "
                  f"eval {r['eval_seconds']:.1f}s | total {r['total_seconds']:.1f}s | "
                  f"load {load_before:.1f}->{os.getloadavg()[0]:.1f}", flush=True)
    bpb = [r["val_bpb"] for r in results]
    sd = statistics.stdev(bpb) if len(bpb) > 1 else float("nan")
    rate = statistics.mean(r["steps"] / r["train_seconds"] for r in results)
    print(f"val_bpb: {statistics.mean(bpb):.4f} +- {sd:.4f} (sd over {len(bpb)} seeds) | "
          f"steps/s {rate:.1f} | device {results[0]['device']} | params {results[0]['params']:,}")


if __name__ == "__main__":
    main()
