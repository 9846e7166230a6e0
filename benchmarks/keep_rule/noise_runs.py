"""Measure run-to-run noise of train/train.py for benchmarks/sim/noise_model.json.

    python -m benchmarks.keep_rule.noise_runs OUT_DIR [--cpu-budget 30] [--gpu-budget 20] [--parallel 7]

Two commits: A = train.py as is, B = LR doubled (3e-3 -> 6e-3). CPU runs are pinned two
cores each (the 2-core CPU proxy; torch threads set to 2 in the copies), several side by
side; GPU runs (if CUDA) one at a time alongside. Seeds 0..9 per commit on CPU, plus re-runs
of some (commit, seed) to see how well a seed repeats under a wall-clock budget. Results go
to OUT_DIR/runs.jsonl line by line (a killed run still leaves what finished).
"""
import argparse, json, os, re, shutil, subprocess, sys, tempfile, threading, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ap = argparse.ArgumentParser()
ap.add_argument("out"); ap.add_argument("--cpu-budget", type=float, default=30)
ap.add_argument("--gpu-budget", type=float, default=20); ap.add_argument("--parallel", type=int, default=7)
args = ap.parse_args()
out = Path(args.out); out.mkdir(parents=True, exist_ok=True)
lock = threading.Lock()
def record(row):
    with lock, open(out / "runs.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")

data = subprocess.run([sys.executable, str(ROOT / "train/prepare.py")], capture_output=True, text=True, check=True)
data_dir = re.findall(r"data_dir: (.*)", data.stdout)[-1].strip()
work = Path(tempfile.mkdtemp())
for name, lr in (("A", "3e-3"), ("B", "6e-3")):
    d = work / name; d.mkdir()
    shutil.copy(ROOT / "train/prepare.py", d)
    src = (ROOT / "train/train.py").read_text()
    src = re.sub(r"^LR = 3e-3 ", f"LR = {lr} ", src, flags=re.M)
    src = src.replace("torch.set_num_threads(os.cpu_count() or 1)", "torch.set_num_threads(2)")
    (d / "train.py").write_text(src)

def run(commit, seed, device, budget, rep, cores=None):
    o = tempfile.mkdtemp()
    env = dict(os.environ, NIGHTSHIFT_DATA=data_dir, NIGHTSHIFT_SEED=str(seed),
               NIGHTSHIFT_BUDGET_S=str(budget), NIGHTSHIFT_OUT=o)
    cmd = [sys.executable, "train.py"]
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        cmd = ["taskset", "-c", cores] + cmd
    t = time.time()
    p = subprocess.run(cmd, cwd=work / commit, env=env, capture_output=True, text=True)
    try:
        r = json.loads((Path(o) / "result.json").read_text())
    except Exception:
        r = {"error": p.stderr[-500:]}
    record({"device": device, "commit": commit, "seed": seed, "rep": rep, "budget_s": budget,
            "val_bpb": r.get("val_bpb"), "steps": r.get("steps"), "wall_s": time.time() - t,
            "error": r.get("error")})

cpu_jobs = [(c, s, 0) for s in range(10) for c in "AB"] + [("A", s, 1) for s in range(4)] + [("B", s, 1) for s in range(2)]
gpu_jobs = [(c, s, 0) for s in range(4) for c in "AB"] + [("A", 0, 1), ("B", 0, 1)]
has_gpu = subprocess.run([sys.executable, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"]).returncode == 0
free = list(range(args.parallel))
flock = threading.Lock()
def cpu_job(job):
    with flock: slot = free.pop()
    try: run(*job[:2], "cpu", args.cpu_budget, job[2], cores=f"{2*slot},{2*slot+1}")
    finally:
        with flock: free.append(slot)
def gpu_all():
    for job in gpu_jobs: run(*job[:2], "cuda", args.gpu_budget, job[2])
g = threading.Thread(target=gpu_all) if has_gpu else None
if g: g.start()
with ThreadPoolExecutor(args.parallel) as ex: list(ex.map(cpu_job, cpu_jobs))
if g: g.join()
print("done", has_gpu)
