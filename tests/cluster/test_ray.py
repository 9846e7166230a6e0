"""The Ray backend on a real two-node cluster on loopback: runs land on both nodes, their
results come back, Ctrl-C cancels every task, and nothing listens beyond 127.0.0.1."""
import json
import re
import signal
import subprocess
import sys
import time


from agent.record.events import Role
from sandbox import Status
from tests.loop_helpers import cli_env, loop_state, make_repo, nightshift
from tests.cluster.graded import GRADE, GRADED_PROGRAM, GRADED_SCRIPT, PREPARE
from tests.night.test_scheduler import PROGRAM, SLEEPY, assert_no_run_twice, leftovers
from tests.needs import needs

pytestmark = needs("ray")


def ray_env(tmp_path, address):
    return {**cli_env(tmp_path / "data"), "RAY_ADDRESS": address,
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def test_every_ray_listener_is_on_loopback(ray_address):
    listeners = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    ray_lines = [line for line in listeners.splitlines()
                 if re.search(r'"(raylet|gcs_server|ray::|python[\d.]*)"', line)]
    assert ray_lines, "no Ray listener found"
    for line in ray_lines:
        local = line.split()[3]
        assert local.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")), line


def test_a_night_on_the_cluster_lands_on_both_nodes_and_brings_results_back(tmp_path, ray_address):
    repo = make_repo(tmp_path / "user", {"sleepy.py": GRADED_SCRIPT.replace("DELAY = 0.5", "DELAY = 1.0"),
                                         "prep.py": PREPARE, "grade.py": GRADE, "program.md": GRADED_PROGRAM})
    done = nightshift(repo, "run", "--tag", "ray", "--cluster", "ray", "--workers", "3",
                      "--max-experiments", "3", env=ray_env(tmp_path, ray_address), timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    state = loop_state(repo, "ray")
    runs = [r for r in state.runs if r.status == Status.OK]
    assert len({r.node for r in runs}) == 2, {r.node for r in runs}   # both nodes took runs
    for run in runs:
        assert run.metric is not None and run.backend == "local"
        assert run.measured_by == "evaluator" and run.metric == run.metrics["model"] + 0.001
        log = repo / "results" / "ray" / run.log
        result = log.parent / "out" / "result.json"
        assert log.exists() and result.exists()                      # shipped back to the head
        trained = json.loads(result.read_text())
        assert trained["train"] == "train bytes" and trained["val_size"] == 0   # val hidden from training
        assert trained["source_size"] is None           # and its source: outside the run's view
        assert "val_bpb:" in (log.parent / "eval" / "log.txt").read_text()  # the evaluation's, back too
    assert_no_run_twice(state)
    assert any(r.role == Role.CANDIDATE for r in runs)
    started = (repo / "results" / "ray" / "ledger.jsonl").read_text()
    assert '"cluster": "ray"' in started


def test_ctrl_c_cancels_every_task_on_the_cluster(tmp_path, ray_address):
    import ray

    repo = make_repo(tmp_path / "user", {"sleepy.py": SLEEPY.replace("DELAY = 0.5", "DELAY = 30.0"),
                                         "program.md": PROGRAM})
    env = ray_env(tmp_path, ray_address)
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "cancel", "--cluster",
                             "ray", "--workers", "3"], cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    ledger = repo / "results" / "cancel" / "ledger.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = ledger.read_text() if ledger.exists() else ""
        if text.count('"run_started"') >= 3:
            break
        time.sleep(0.2)
    time.sleep(3)                                  # the tasks are running on the nodes
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    state = loop_state(repo, "cancel")
    assert not state.in_flight and all(r.status == Status.INTERRUPTED for r in state.interrupted)
    ray.init(address=ray_address, ignore_reinit_error=True, log_to_driver=False)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:        # every CPU the tasks held is free again
            if ray.available_resources().get("CPU", 0) >= ray.cluster_resources().get("CPU", 0):
                break
            time.sleep(0.5)
        assert ray.available_resources().get("CPU", 0) >= ray.cluster_resources().get("CPU", 0)
    finally:
        ray.shutdown()
    assert leftovers(repo) == [], "a sandboxed run outlived its cancelled task"
