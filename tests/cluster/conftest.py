"""Real clusters on loopback: Ray (two nodes) and Slurm (munged, slurmctld, two slurmd).

Ray: CI starts one (.ci/ray_cluster.py) and exports RAY_ADDRESS; without it a session fixture
starts its own with ray.cluster_utils.Cluster and stops exactly the processes it started.
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps every listener on 127.0.0.1 (Ray otherwise binds the
machine's routable address).

Slurm: CI starts one (.ci/slurm_cluster.py) and exports SLURM_CONF; without it the session
fixture starts the same script (root, with slurm-wlm and munge installed) and stops it by its
PID, which stops the daemons by theirs.

Tests that use them are marked `needs("ray")` or `needs("slurm")` (tests/needs.py): where
either is missing they skip, saying the fix, before these fixtures start anything."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]

# Before anything imports ray: Ray reads it once, at import.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="session")
def ray_address():
    if os.environ.get("RAY_ADDRESS"):
        yield os.environ["RAY_ADDRESS"]
        return
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": False})
    cluster.add_node(num_cpus=1, num_gpus=0)
    cluster.wait_for_nodes()
    try:
        yield cluster.address
    finally:
        cluster.shutdown()


@pytest.fixture(scope="session")
def slurm_conf():
    """The path of a running Slurm cluster's slurm.conf (also in os.environ["SLURM_CONF"],
    so the CLI run by a test finds it)."""
    if os.environ.get("SLURM_CONF"):
        yield os.environ["SLURM_CONF"]
        return
    root = Path(tempfile.mkdtemp(prefix="ns-slurm-", dir="/tmp"))   # short: munge's socket path
    cluster = subprocess.Popen([sys.executable, str(PROJECT / ".ci" / "slurm_cluster.py"), str(root)])
    deadline = time.monotonic() + 90
    while not (root / "ready").exists():
        if cluster.poll() is not None or time.monotonic() > deadline:
            cluster.kill()
            pytest.fail(f"the local Slurm cluster did not start; logs in {root / 'log'}")
        time.sleep(0.2)
    os.environ["SLURM_CONF"] = str(root / "slurm.conf")
    try:
        yield os.environ["SLURM_CONF"]
    finally:
        del os.environ["SLURM_CONF"]
        cluster.terminate()
        cluster.wait(60)
        shutil.rmtree(root, ignore_errors=True)
