"""A night in a real MLflow tracking server (started here on 127.0.0.1 with a SQLite store),
read back through the real MlflowClient: as it runs, across a kill -9 and a resume, and with
the server stopped mid-night and `nightshift export` completing it afterwards."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter

import pytest

from tests.loop_helpers import cli_env, events, loop_state, make_repo, nightshift
from tests.needs import require
from tests.publish.test_hooks import LR_SCRIPT, tracked_program

pytestmark = require("mlflow")

from mlflow.tracking import MlflowClient  # noqa: E402

SLOW_LR_SCRIPT = LR_SCRIPT.replace("import json, math, os, random", "import json, math, os, random, time\n"
                                   "time.sleep(0.4)   # long enough to be killed mid-night")
PROGRAM = tracked_program("{mlflow: {uri: URI, experiment: nights}}")


class Server:
    """`mlflow server` on a free loopback port over one SQLite file; stopped by its own PID."""

    def __init__(self, folder, port=None):
        self.folder, self.port = folder, port or _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self):
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1", "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
             "--artifacts-destination", str(self.folder / "artifacts")],
            stdout=open(self.folder / "server.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})   # no job runners: a tracker only
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (self.folder / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        pytest.fail("the MLflow server did not start: " + (self.folder / "server.log").read_text()[-3000:])

    def stop(self, hard=False):
        """Ends the server; `hard`: at once (SIGKILL to all its processes), as a machine dies."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL if hard else signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(30)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    running = Server(tmp_path / "mlflow").start()
    yield running
    running.stop()


def night_runs(uri, tag):
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("nights")
    if experiment is None:                       # nothing logged yet
        return client, {}, []
    runs = client.search_runs([experiment.experiment_id], f"tags.`nightshift.tag` = '{tag}'", max_results=1000)
    return client, {r.data.tags["nightshift.key"]: r for r in runs}, [r.data.tags["nightshift.key"] for r in runs]


def assert_mirrors_the_ledger(uri, repo, tag):
    """Every run and experiment of the ledger is in MLflow once, with its numbers and place."""
    client, by_key, keys = night_runs(uri, tag)
    assert [k for k, n in Counter(keys).items() if n > 1] == []                 # nothing twice
    state = loop_state(repo, tag)
    night = by_key["night"]
    assert night.info.status == "FINISHED" and night.data.metrics["experiments"] == len(state.experiments)
    assert night.data.tags["nightshift.incumbent"] == state.incumbent
    assert night.data.params["metric"] == "val_bpb"
    finished = [e for e in events(repo, tag) if e["event"] == "run_finished"]
    for run in finished:
        mirrored = by_key[f"run/{run['run_id']}"]
        assert mirrored.data.tags["nightshift.status"] == run["status"]
        if run["status"] == "ok":
            assert mirrored.data.metrics["val_bpb"] == pytest.approx(run["metric"])
        parent = mirrored.data.tags["mlflow.parentRunId"]
        expected = f"experiment/{run['experiment']}" if run["experiment"] else None
        if expected:
            assert parent == by_key[expected].info.run_id
    assert len([k for k in keys if k.startswith("run/")]) == len(finished)
    for experiment in state.experiments.values():
        mirrored = by_key[f"experiment/{experiment.id}"]
        assert mirrored.data.tags["mlflow.parentRunId"] == night.info.run_id
        if experiment.decided:
            assert mirrored.data.tags["nightshift.verdict"] == experiment.verdict.value
            assert mirrored.info.status == "FINISHED"
        if experiment.verdict is not None and experiment.verdict.value == "keep":
            test = experiment.decision.decision
            assert mirrored.data.metrics["effect"] == pytest.approx(test.effect)
            assert mirrored.data.metrics["p_value"] == pytest.approx(test.p_value)
            assert mirrored.data.params["LR"] == str(experiment.extra["params"]["LR"])
            diff = client.download_artifacts(mirrored.info.run_id, "diff.patch", str(repo.parent))
            assert "-LR = " in open(diff).read()
    return client, by_key


def test_a_night_logs_to_mlflow_as_it_runs_and_goes_on_with_the_same_runs_after_a_kill(tmp_path, server):
    repo = make_repo(tmp_path / "user", {"lr.py": SLOW_LR_SCRIPT,
                                         "program.md": PROGRAM.replace("URI", server.uri)})
    env = cli_env(tmp_path / "data")
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "ml", "--max-experiments", "3"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:            # MLflow holds the first decision: the night logs live
        _, by_key, _ = night_runs(server.uri, "ml")
        if by_key.get("experiment/e0001") and "nightshift.verdict" in by_key["experiment/e0001"].data.tags:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("MLflow never showed the first decision")
    proc.send_signal(signal.SIGKILL)                                          # kill -9, mid-night
    proc.communicate(timeout=60)
    again = nightshift(repo, "run", "--tag", "ml", "--max-experiments", "2", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "View run" not in again.stdout                                     # MLflow's prints stay out
    client, by_key = assert_mirrors_the_ledger(server.uri, repo, "ml")
    night = by_key["night"]
    assert "report.html" in [a.path for a in client.list_artifacts(night.info.run_id)]
    assert len(loop_state(repo, "ml").kept()) >= 2


def test_a_stopped_server_never_stops_the_night_and_export_completes_it(tmp_path, server):
    repo = make_repo(tmp_path / "user", {"lr.py": SLOW_LR_SCRIPT,
                                         "program.md": PROGRAM.replace("URI", server.uri)})
    env = cli_env(tmp_path / "data")
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "down", "--max-experiments", "3"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        _, by_key, _ = night_runs(server.uri, "down")
        if "experiment/e0001" in by_key:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.3)
    server.stop(hard=True)                                                    # the tracker dies
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err                                    # the night did not
    text = " ".join(out.split())                                             # the console wraps lines
    assert text.count("does not answer") == 1, out                           # said once
    assert f"mlflow: the MLflow server at {server.uri} does not answer (" in text
    assert "its events wait for it, nothing is lost; the night goes on" in text
    state = loop_state(repo, "down")
    assert len(state.experiments) == 3 and all(e.decided for e in state.experiments.values())

    restarted = Server(server.folder, server.port).start()                   # the same store, back
    try:
        exported = nightshift(repo, "export", "--tag", "down", env=env)
        assert exported.returncode == 0, exported.stdout + exported.stderr
        assert "exported down" in exported.stdout
        assert_mirrors_the_ledger(restarted.uri, repo, "down")
        twice = nightshift(repo, "export", "--tag", "down", env=env)
        assert "(0 runs made" in twice.stdout                                # nothing twice
    finally:
        restarted.stop()
