"""The baseline: val_bpb and throughput of the unmodified train/train.py over several seeds.

    python -m benchmarks.train.baseline [--seeds 3] [--budget 60] [--corpus PATH] [--data-root DIR]

Runs train.py under the run protocol, one seed after another (never side by side: they would
share the cores and each would measure less), and prints per seed and overall: val_bpb (mean
+- sd across seeds), tokens/s, achieved FLOP/s (6 x params x tokens/s, the weights' share of
the work), and that figure as a fraction of a matmul peak measured in this same invocation:
the best of 25 reps of a 2048^3 matmul, before and after the runs, on as many threads as
train.py uses; fp32, and bf16 too, since train.py runs its matmuls in bf16 where the CPU has
native bf16. On CUDA it also prints train.py's MFU (against the device's dense bf16 peak).
Also what the numbers depend on: corpus hash, python and torch versions, the load average,
and how much CPU other processes took during each run ("others"); when that is not ~0 the
figures are pessimistic. It prints; it never asserts.
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
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # as train.py: measure the peak it can reach
REPO = Path(__file__).resolve().parents[2]
from train import prepare


def busy_cpu_seconds() -> float | None:
    """CPU seconds all processes have used since boot (Linux), or None."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")   # minus idle, iowait


def run_seed(seed: int, budget: float, data_dir: Path, out: Path) -> tuple[dict, float | None]:
    """One training run as the harness would start it: its result.json and the cores other
    processes used meanwhile (None where that cannot be measured), or an exit."""
    env = {**os.environ, "NIGHTSHIFT_SEED": str(seed), "NIGHTSHIFT_BUDGET_S": str(budget),
           "NIGHTSHIFT_OUT": str(out), "NIGHTSHIFT_DATA": str(data_dir), "NIGHTSHIFT_SPLIT": "val"}
    child_cpu = lambda: sum(os.times()[2:4])   # CPU seconds of finished children (this run's)
    busy0, mine0, t0 = busy_cpu_seconds(), child_cpu(), time.time()
    proc = subprocess.run([sys.executable, "train/train.py"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    busy1, mine1, t1 = busy_cpu_seconds(), child_cpu(), time.time()
    if proc.returncode != 0:
        sys.exit(f"seed {seed}: train.py exited {proc.returncode}\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    others = None if busy0 is None else max(0.0, (busy1 - busy0) - (mine1 - mine0)) / (t1 - t0)
    return json.loads((out / "result.json").read_text()), others


def matmul_peak(torch, device: str, dtype, n: int = 2048, reps: int = 25) -> float:
    """Best-of-reps FLOP/s of an n^3 matmul: what the hardware reaches on a large, friendly shape
    (many reps, ~3 s on 2 cores: on a shared machine the best of few would be pessimistic)."""
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    out = torch.empty(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(2):
        torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(reps):
        sync(); t = time.perf_counter()
        torch.mm(a, b, out=out)
        sync(); best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


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
    device = "cuda" if torch.cuda.is_available() else "cpu"
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(threads)   # as train.py does
    print(f"corpus {meta['corpus_hash'][:16]} ({meta['source']}), python {platform.python_version()}, "
          f"torch {torch.__version__}, {threads} cores, budget {args.budget:g}s, load {os.getloadavg()[0]:.2f}")

    def peaks() -> dict[str, float]:
        if device == "cuda":
            return {"bf16": matmul_peak(torch, device, torch.bfloat16, n=8192)}
        return {"fp32": matmul_peak(torch, device, torch.float32), "bf16": matmul_peak(torch, device, torch.bfloat16)}

    before = peaks()
    print("matmul peak before the runs: " + ", ".join(f"{k} {v / 1e9:,.1f} GFLOP/s" for k, v in before.items()), flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            load_before = os.getloadavg()[0]
            r, others = run_seed(seed, args.budget, data_dir, Path(tmp) / f"seed{seed}")
            results.append(r)
            flops = 6 * r["params"] * r["tokens_per_s"]
            mfu = f" | mfu {r['mfu']:.1%}" if r.get("mfu") is not None else ""
            print(f"seed {seed}: val_bpb {r['val_bpb']:.4f} | steps {r['steps']} | tokens/s {r['tokens_per_s']:,.0f} | "
                  f"{flops / 1e9:,.1f} GFLOP/s{mfu} | eval {r['eval_seconds']:.1f}s | total {r['total_seconds']:.1f}s | "
                  f"load {load_before:.2f}->{os.getloadavg()[0]:.2f} | others "
                  + ("n/a" if others is None else f"{others:.2f} cores"), flush=True)
    after = peaks()
    print("matmul peak after the runs:  " + ", ".join(f"{k} {v / 1e9:,.1f} GFLOP/s" for k, v in after.items()))
    peak = {k: max(before[k], after[k]) for k in before}   # best-of: load only ever lowers it

    bpb = [r["val_bpb"] for r in results]
    sd = statistics.stdev(bpb) if len(bpb) > 1 else float("nan")
    tokens_per_s = statistics.median(r["tokens_per_s"] for r in results)
    flops = 6 * results[0]["params"] * tokens_per_s
    print(f"val_bpb: {statistics.mean(bpb):.4f} +- {sd:.4f} (sd over {len(bpb)} seeds) | device {results[0]['device']} | "
          f"params {results[0]['params']:,} | steps/s {statistics.mean(r['steps'] / r['train_seconds'] for r in results):.1f}")
    print(f"throughput (median over seeds): {tokens_per_s:,.0f} tokens/s | achieved {flops / 1e9:,.1f} GFLOP/s (6 x params x tokens/s)")
    for kind, value in peak.items():
        print(f"matmul peak {kind} {value / 1e9:,.1f} GFLOP/s | achieved / peak {kind}: {flops / value:.1%}")
    mfus = [r["mfu"] for r in results if r.get("mfu") is not None]
    if mfus:
        print(f"mfu (train.py, vs the device's dense bf16 peak, attention included): {statistics.median(mfus):.1%}")


if __name__ == "__main__":
    main()
