"""Dispatch overhead per run of each place to run: local workers, a Ray cluster, a Slurm cluster.

    python -m benchmarks.overhead.dispatch_overhead [--runs 20] [--clusters local,ray,slurm]

One run at a time (latency, not throughput) of a script that only writes the time it started
and ended, through the real `Workers` of each backend and the local sandbox. Two figures a run:
- submit -> start: from `Workers.submit` to the script's first line (the sandbox's start-up,
  and on a cluster the shipping of the snapshot, the scheduler, the node's Python);
- finish -> seen: from the script's last line to the harness holding its JobOutcome (the
  sandbox's tear-down, the answer's way back, the harness's polling).
Ray uses $RAY_ADDRESS, else a two-node cluster on 127.0.0.1 started here (and stopped);
Slurm uses $SLURM_CONF, else the cluster of .ci/slurm_cluster.py started here (root, slurm-wlm
and munge installed; stopped by its PID). A cluster that cannot be had is skipped, saying why.
Everything runs on this machine, so the clocks of "node" and harness are one. Figures are wall
clock under whatever else the machine does: compare rows of one invocation only.
"""
from __future__ import annotations

import argparse
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # Ray on loopback only

from cluster.protocol import ClusterUnavailable, Job
from cluster.select import make_workers
from cluster.slurm_settings import SlurmSettings
from sandbox.local import LocalRunner
from sandbox.protocol import Limits, RunSpec, Status

SCRIPT = '''\
import json, os, time
start = time.time()
out = os.environ["NIGHTSHIFT_OUT"]
json.dump({"val_bpb": 1.0, "t_start": start, "t_end": time.time()}, open(os.path.join(out, "result.json"), "w"))
'''
PROJECT = Path(__file__).resolve().parents[2]


def job(root: Path, name: str, i: int) -> Job:
    out = root / "runs" / f"{name}-{i}" / "out"
    out.mkdir(parents=True)
    spec = RunSpec(command=f"{sys.executable} train.py", snapshot_dir=root / "snapshot",
                   data_dir=root / "data", out_dir=out, seed=i, budget_s=60, grace_s=30,
                   metric="val_bpb", limits=Limits(memory_mb=512))
    return Job(run_id=f"{name}-{i}", spec=spec)


def measure(name: str, workers_of, root: Path, runs: int) -> tuple[list[float], list[float], list[float]]:
    done: queue.Queue = queue.Queue()

    def on_done(outcome) -> None:
        done.put((time.time(), outcome))

    workers = workers_of(on_done)
    before, after, queued = [], [], []
    try:
        for i in range(runs + 1):       # the first run warms caches (and ships the data): not counted
            submitted = time.time()
            workers.submit(workers.slots[0], job(root, name, i))
            seen, outcome = done.get(timeout=600)
            result = outcome.result
            if result is None or result.status is not Status.OK:
                raise SystemExit(f"{name} run {i}: {outcome.error or result.status}: "
                                 f"{result.reason if result else ''}")
            if i:
                before.append(result.metrics["t_start"] - submitted)
                after.append(seen - result.metrics["t_end"])
                if outcome.queued_s is not None:
                    queued.append(outcome.queued_s)
    finally:
        workers.close()
    return before, after, queued


def ray_address(stack: list) -> str:
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": False})
    cluster.add_node(num_cpus=1, num_gpus=0)
    cluster.wait_for_nodes()
    stack.append(lambda: (ray.shutdown(), cluster.shutdown()))   # the driver first, then the nodes
    return cluster.address


def slurm_conf(stack: list) -> str:
    if os.environ.get("SLURM_CONF"):
        return os.environ["SLURM_CONF"]
    if not shutil.which("slurmctld") or os.getuid() != 0:
        raise ClusterUnavailable("no SLURM_CONF, and no local cluster can be started here "
                                 "(needs root, slurm-wlm and munge)")
    root = Path(tempfile.mkdtemp(prefix="ns-slurm-", dir="/tmp"))
    proc = subprocess.Popen([sys.executable, str(PROJECT / ".ci" / "slurm_cluster.py"), str(root)])
    stack.append(lambda: (proc.terminate(), proc.wait(60)))
    deadline = time.monotonic() + 90
    while not (root / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise ClusterUnavailable(f"the local Slurm cluster did not start (logs in {root / 'log'})")
        time.sleep(0.2)
    os.environ["SLURM_CONF"] = str(root / "slurm.conf")
    return os.environ["SLURM_CONF"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--clusters", default="local,ray,slurm")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nightshift-dispatch-"))
    (root / "snapshot").mkdir()
    (root / "snapshot" / "train.py").write_text(SCRIPT)
    (root / "data").mkdir()
    (root / "shared").mkdir()
    runner, stack, rows = LocalRunner(), [], []
    try:
        for name in args.clusters.split(","):
            try:
                if name == "ray":
                    options = {"address": ray_address(stack)}
                elif name == "slurm":
                    options = {"slurm": SlurmSettings(shared_dir=str(root / "shared")),
                               "job_prefix": "nightshift-bench", "memory_mb": 512}
                    slurm_conf(stack)
                else:
                    options = {}

                def workers_of(on_done, name=name, options=options):
                    return make_workers(name, runner=runner, sandbox="local", image="", workers=1,
                                        on_done=on_done, **options)

                rows.append((name, *measure(name, workers_of, root, args.runs)))
            except (ClusterUnavailable, ImportError) as error:
                print(f"{name} skipped: {error}")
    finally:
        for stop in reversed(stack):
            stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.runs} runs each, one at a time, of a script that only writes its start and end "
          f"times; local sandbox; seconds")
    print(f"{'cluster':8} {'submit->start median':>21} {'p90':>7} {'of which queued':>16} "
          f"{'finish->seen median':>20} {'p90':>7} {'overhead per run':>17}")
    for name, before, after, queued in rows:
        p90 = lambda xs: sorted(xs)[max(int(0.9 * len(xs)) - 1, 0)]  # noqa: E731
        waited = f"{statistics.median(queued):.2f}" if queued else "-"
        print(f"{name:8} {statistics.median(before):21.2f} {p90(before):7.2f} {waited:>16} "
              f"{statistics.median(after):20.2f} {p90(after):7.2f} "
              f"{statistics.median(before) + statistics.median(after):17.2f}")
    print("(of which queued: Slurm's queued_s, from submit to the job's own first line on the "
          "node, before the sandbox starts)")


if __name__ == "__main__":
    main()
