"""What publishing costs a night: the same night with nothing, with a hook on each keep, with
MLflow answering, and with MLflow down (a port where nothing listens).

    python -m benchmarks.overhead.trackers [--nights 3] [--experiments 4]

Each night is `nightshift run --max-experiments N` from a fresh clone of a toy whose learning
rate is worth 0.2 a doubling (the Optuna researcher keeps each doubling), each run sleeping
0.5 s, on the local sandbox; the modes alternate night by night, so a change in the machine's
load falls on all of them. Printed: the median whole night in seconds, and its ratio to the
night with nothing, and how many runs MLflow held at the end. MLflow modes need the [mlflow]
extra (skipped, saying so, without it); the server is started here on 127.0.0.1 and stopped by
its PID. Wall clock under whatever else the machine does: compare rows of one invocation.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = '''\
import json, math, os, random, time
time.sleep(0.5)
LR = 0.003          # search: log(1e-4, 0.1)
value = 2.0 - 0.2 * math.log2(LR / 0.003) + random.Random(f"{os.environ['NIGHTSHIFT_SEED']}/{LR}").gauss(0, 0.01)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
    json.dump({"val_bpb": value}, out)
'''
PROGRAM = '''\
---
target: lr.py
protected: []
command: python lr.py
prepare: null
budget: 2s
grace: 30s
seeds: {{baseline: 2, screen: 1, max: 4}}
sandbox: local
researcher: optuna
metric: val_bpb
{extra}
---
Learning rate first.
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}", "--artifacts-destination", str(folder / "a")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    for _ in range(240):
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2):
                return process, uri
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the MLflow server did not start")


def night(folder: Path, extra: str, experiments: int) -> float:
    repo = folder / "repo"
    repo.mkdir(parents=True)
    (repo / "lr.py").write_text(SCRIPT)
    (repo / "program.md").write_text(PROGRAM.format(extra=extra))
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@localhost", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "toy"], check=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NIGHTSHIFT_DATA_ROOT": str(folder / "data")}
    env.pop("ANTHROPIC_API_KEY", None)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--tag", "bench",
                           "--max-experiments", str(experiments)], cwd=repo, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"a night failed ({extra or 'nothing'}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=3)
    parser.add_argument("--experiments", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nightshift-trackers-") as tmp:
        tmp = Path(tmp)
        modes = {"nothing": "", "on_keep hook": "on_keep: cat > /dev/null"}
        server = None
        if importlib.util.find_spec("mlflow") is None:
            print("MLflow modes skipped: no module named mlflow (pip install -e '.[mlflow]')")
        else:
            (tmp / "server").mkdir()
            server, uri = start_server(tmp / "server")
            modes["mlflow answering"] = f"tracking: {{mlflow: {{uri: '{uri}', experiment: bench}}}}"
            modes["mlflow down"] = f"tracking: {{mlflow: 'http://127.0.0.1:{free_port()}'}}"
        try:
            times: dict[str, list[float]] = {mode: [] for mode in modes}
            for index in range(args.nights):
                for mode, extra in modes.items():
                    times[mode].append(night(tmp / f"{index}-{mode.replace(' ', '_')}", extra, args.experiments))
                    print(f"  night {index + 1} {mode}: {times[mode][-1]:.1f} s", flush=True)
            base = statistics.median(times["nothing"])
            print(f"\n{args.experiments} experiments a night, {args.nights} nights a mode (median whole night)")
            print(f"{'mode':18s} {'night s':>8s} {'ratio':>6s}")
            for mode, values in times.items():
                median = statistics.median(values)
                print(f"{mode:18s} {median:8.1f} {median / base:6.2f}")
            if server is not None:
                from mlflow.tracking import MlflowClient

                experiment = MlflowClient(uri).get_experiment_by_name("bench")
                held = MlflowClient(uri).search_runs([experiment.experiment_id], max_results=5000)
                print(f"MLflow held {len(held)} runs of the {args.nights} nights it answered for")
        finally:
            if server is not None:
                os.killpg(server.pid, signal.SIGTERM)
                server.wait(30)


if __name__ == "__main__":
    main()
