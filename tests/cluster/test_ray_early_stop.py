"""Early stopping on the real two-node Ray cluster: a run's lines reach the head while it
trains (a local worker's `on_output`, the same for a task on a node), and a night there stops
a clearly worse candidate at a checkpoint as on this machine."""
import json
import sys
import threading
import time


from agent.record.events import Verdict
from sandbox import Status
from tests.cluster.test_ray import ray_env
from tests.loop_helpers import loop_state, nightshift
from tests.needs import needs
from tests.night.test_early_stop_night import (CALIBRATION, UNDER_TEST, clearly_worse_stopped,
                                               night_repo)

pytestmark = needs("ray")


def test_a_tasks_lines_reach_the_head_while_it_runs_in_order_and_before_its_end(tmp_path, ray_address):
    from cluster.protocol import Job
    from cluster.ray_cluster import RayWorkers
    from sandbox import Limits, RunSpec

    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "count.py").write_text(
        "import time\nfor i in range(12):\n    print(f'step {i} | loss {5 - i / 4:.2f} | elapsed {i * 0.25:.2f}s', flush=True)\n"
        "    time.sleep(0.25)\n")
    (tmp_path / "data").mkdir()
    out = tmp_path / "run" / "out"
    out.mkdir(parents=True)
    spec = RunSpec(command="python count.py", snapshot_dir=snapshot, data_dir=tmp_path / "data",
                   out_dir=out, seed=0, budget_s=3.0, metric="val_bpb", grace_s=30.0,
                   limits=Limits(), metric_required=False, python=sys.executable)
    heard: list[tuple[float, str]] = []
    ended = threading.Event()
    workers = RayWorkers(address=ray_address, sandbox="local", image="nightshift:latest", workers=1,
                         on_done=lambda outcome: ended.set())
    try:
        workers.submit(workers.slots[0], Job(run_id="r1", spec=spec),
                       on_output=lambda run_id, line: heard.append((time.monotonic(), line)))
        assert ended.wait(120), "the task never ended"
        finished = time.monotonic()
    finally:
        workers.close()
        import ray

        ray.shutdown()      # this process joined the cluster: leave it, as a harness would
    lines = [line for _, line in heard]
    assert lines == [f"step {i} | loss {5 - i / 4:.2f} | elapsed {i * 0.25:.2f}s" for i in range(12)]
    # the first line came while the run still had most of its three seconds to go
    assert heard[0][0] < heard[-1][0] - 1.5 and heard[-1][0] <= finished


def test_a_night_on_the_cluster_stops_a_clearly_worse_candidate_at_a_checkpoint(tmp_path, ray_address):
    script = [{"knobs": {"LEVEL": level}, "description": f"worse by {level - 2:.2f}"}
              for level in CALIBRATION] + UNDER_TEST[:2]
    repo = night_repo(tmp_path)
    (tmp_path / "script.json").write_text(json.dumps(script))
    done = nightshift(repo, "run", "--tag", "rs", "--cluster", "ray", "--workers", "2", "--script",
                      str(tmp_path / "script.json"), "--max-experiments", str(len(script)),
                      env=ray_env(tmp_path, ray_address), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    state = loop_state(repo, "rs")
    named = {e.description: e for e in state.experiments.values()}
    stops = {stop.experiment: stop for stop in state.early_stops.values()}
    # on two workers the first candidate on a new seed runs beside the incumbent's run on it
    (worse, *_) = clearly_worse_stopped(state, [named[u["description"]] for u in UNDER_TEST[:2]])
    assert worse.verdict == Verdict.DISCARD
    assert worse.decision.decision.rule == "early_stop" and stops[worse.id].reached < 1.0
    (stopped,) = [r for r in state.interrupted if r.run_id == stops[worse.id].run_id]
    # the curve came from the node while it ran; the task was cancelled there, or (on a busy
    # cluster, a stop near the end) it finished before the cancel landed: either way it is
    # recorded apart, never a measurement of the candidate
    assert stopped.status in (Status.INTERRUPTED, Status.OK) and stopped.node
    assert stopped.status == Status.OK or stopped.curve.reached < 1.0
    assert stopped.run_id not in {r.run_id for r in state.runs}
    assert all(r.curve is not None and r.curve.reached >= 0.99 for r in state.runs if r.ok)
