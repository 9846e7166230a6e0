"""Start (and hold) a local two-node Ray cluster on 127.0.0.1 for the tests.

    python .ci/ray_cluster.py ADDRESS_FILE &     # writes host:port to ADDRESS_FILE when ready

Kept alive until SIGTERM, when it stops exactly the Ray processes it started. Every listener
stays on loopback: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (Ray 2.60 binds the routable address
otherwise, even with --node-ip-address 127.0.0.1; the Ray CLI refuses to add a second node in
that mode, so the cluster is built with ray.cluster_utils, which does not).
"""
import os
import signal
import sys
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
from ray.cluster_utils import Cluster  # noqa: E402

cluster = Cluster(initialize_head=True, connect=False,
                  head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": False})
cluster.add_node(num_cpus=1, num_gpus=0)
cluster.wait_for_nodes()
stopping = False


def stop(*_):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
with open(sys.argv[1], "w") as handle:
    handle.write(cluster.address)
while not stopping:
    time.sleep(0.5)
cluster.shutdown()
