"""Real clusters on loopback: Ray (two nodes) and Slurm (munged, slurmctld, two slurmd).

Ray: CI starts one (.ci/ray_cluster.py) and exports RAY_ADDRESS; without it a session fixture
starts its own with ray.cluster_utils.Cluster and stops exactly the processes it started.
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps every listener on 127.0.0.1 (Ray otherwise binds the
machine's routable address). NIGHTSHIFT_REQUIRE_RAY=1 turns a missing Ray into a failure.

Slurm: CI starts one (.ci/slurm_cluster.py) and exports SLURM_CONF; without it the session
fixture starts the same script (root, with slurm-wlm and munge installed) and stops it by its
PID, which stops the daemons by theirs. NIGHTSHIFT_REQUIRE_SLURM=1 turns a missing Slurm into
a failure."""
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
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("NIGHTSHIFT_REQUIRE_RAY") == "1":
            pytest.fail("ray is not installed (pip install -e '.[ray]'), and CI requires it")
        pytest.skip("ray is not installed: pip install -e '.[ray]'")
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
    def missing(why: str) -> None:
        if os.environ.get("NIGHTSHIFT_REQUIRE_SLURM") == "1":
            pytest.fail(f"{why}, and CI requires Slurm")
        pytest.skip(why)

    try:
        import submitit  # noqa: F401
    except ImportError:
        missing("submitit is not installed: pip install -e '.[slurm]'")
    if os.environ.get("SLURM_CONF"):
        yield os.environ["SLURM_CONF"]
        return
    if not (shutil.which("slurmctld") and shutil.which("slurmd") and shutil.which("munged")):
        missing("Slurm is not installed: apt-get install slurm-wlm munge")
    if os.getuid() != 0:
        missing("starting a local Slurm cluster needs root")
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
