"""A real Ray cluster of two nodes on loopback, for the Ray backend's tests.

CI starts one (.ci/ray_cluster.py) and exports RAY_ADDRESS; without it a session fixture
starts its own with ray.cluster_utils.Cluster and stops exactly the processes it started.
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps every listener on 127.0.0.1 (Ray otherwise binds the
machine's routable address). NIGHTSHIFT_REQUIRE_RAY=1 turns a missing Ray into a failure."""
import os

import pytest

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
