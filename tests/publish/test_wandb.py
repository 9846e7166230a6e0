"""A night through W&B's real SDK, offline (WANDB_MODE honoured over program.md's mode), read
back from the run files the SDK wrote for a later `wandb sync`; the key never leaves the
harness's environment."""
import glob
import json
import struct
from pathlib import Path

from tests.loop_helpers import cli_env, events, loop_state, make_repo, nightshift
from tests.needs import require
from tests.publish.test_hooks import LR_SCRIPT, tracked_program

pytestmark = require("wandb")

from wandb.proto import wandb_internal_pb2  # noqa: E402

KEY = "0123456789abcdef0123456789abcdef0123beef"      # the shape of a W&B key, fake
SCRIPT = LR_SCRIPT + '''
print("the run sees a W&B key:", "WANDB_API_KEY" in os.environ)
'''
PROGRAM = tracked_program("{wandb: {project: nights, mode: online}}")
BLOCK = 32768     # the run file is a LevelDB-format log of protobuf records after a 7-byte header


def records(path: Path):
    """The `Record`s of a .wandb run file, in order."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, pieces = 7, b""
    while position + 7 <= len(data):
        left = BLOCK - position % BLOCK
        if left < 7:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if kind == 0 and length == 0:
            position += left
            continue
        body = data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces + body if kind == 4 else body)
            pieces = b""
            yield record
        else:
            pieces = body if kind == 2 else pieces + body


def items(updates):
    return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in updates}


def offline_runs(results: Path):
    """id -> {name, group, job_type, config, history rows, summary} of every offline run."""
    runs = {}
    for path in sorted(glob.glob(str(results / "wandb" / "offline-run-*" / "run-*.wandb"))):
        run = {"history": [], "summary": {}}
        for record in records(Path(path)):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.update(id=record.run.run_id, name=record.run.display_name, group=record.run.run_group,
                           job_type=record.run.job_type, config=items(record.run.config.update))
            elif kind == "history":
                run["history"].append(items(record.history.item))
            elif kind == "summary":
                run["summary"].update(items(record.summary.update))
        assert run["id"] not in runs, "one run files per run"
        runs[run["id"]] = run
    return runs


def test_a_night_writes_its_runs_for_wandb_sync_and_no_key_leaves_the_harness(tmp_path):
    repo = make_repo(tmp_path / "user", {"lr.py": SCRIPT, "program.md": PROGRAM})
    env = {**cli_env(tmp_path / "data"), "WANDB_MODE": "offline", "WANDB_API_KEY": KEY}
    done = nightshift(repo, "run", "--tag", "wb", "--max-experiments", "2", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wandb:" not in done.stdout + done.stderr                  # the SDK stays out of the console
    results = repo / "results" / "wb"
    runs = offline_runs(results)
    by_type = {}
    for run in runs.values():
        assert run["group"] == "wb"
        by_type.setdefault(run["job_type"], []).append(run)
    (night,) = by_type["night"]
    state = loop_state(repo, "wb")
    assert night["name"] == "wb" and night["config"]["metric"] == "val_bpb"
    assert [row["experiments_decided"] for row in night["history"]] == [1, 2]
    assert night["summary"]["incumbent"] == state.incumbent and night["summary"]["keeps"] == len(state.kept())
    experiments = {run["name"].split()[0]: run for run in by_type["experiment"]}
    assert set(experiments) == set(state.experiments)
    for experiment in state.experiments.values():
        run = experiments[experiment.id]
        test = experiment.decision.decision
        assert run["config"]["LR"] == experiment.extra["params"]["LR"]
        assert run["summary"]["verdict"] == experiment.verdict.value
        assert run["summary"]["effect"] == test.effect and run["summary"]["seeds"] == len(test.seeds)
        assert [row["val_bpb"] for row in run["history"]] == [r.metric for r in experiment.runs]
    finished = [e for e in events(repo, "wb") if e["event"] == "run_finished"]
    seed_runs = by_type["seed run"]
    assert len(seed_runs) == len(finished)
    for run, event in zip(sorted(seed_runs, key=lambda r: r["id"]), sorted(finished, key=lambda e: e["run_id"])):
        assert run["id"].endswith(event["run_id"]) and run["summary"]["val_bpb"] == event["metric"]
        assert run["config"]["seed"] == event["seed"] and run["config"]["role"] == event["role"]
    # the key reached neither a run, nor a file of the night (the ledger, logs, the SDK's own files)
    logs = [p.read_text() for p in results.glob("runs/*/log.txt")]
    assert logs and all("the run sees a W&B key: False" in log for log in logs)
    for path in [*results.rglob("*"), *(tmp_path / "data").rglob("*")]:
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path



def run_summaries(results: Path) -> dict:
    """id -> its summary, merged over every file written for it: each invocation writes files
    for the ids it touched, and `wandb sync` uploads them together."""
    summaries = {}
    for path in sorted(glob.glob(str(results / "wandb" / "offline-run-*" / "run-*.wandb"))):
        run_id, summary = None, {}
        for record in records(Path(path)):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run_id = record.run.run_id
            elif kind == "summary":
                summary.update(items(record.summary.update))
        if run_id is not None:      # a file a kill cut before its run record: nothing in it
            summaries.setdefault(run_id, {}).update(summary)
    return summaries


def assert_every_run_is_there(repo, tag):
    summaries, state = run_summaries(repo / "results" / tag), loop_state(repo, tag)
    for event in (e for e in events(repo, tag) if e["event"] == "run_finished"):
        (found,) = [s for run_id, s in summaries.items() if run_id.endswith(event["run_id"])]
        assert found.get("val_bpb") == event["metric"] and found.get("status") == event["status"]
    for experiment in state.experiments.values():
        (found,) = [s for run_id, s in summaries.items() if run_id.endswith(f"experiment-{experiment.id}")]
        assert found["verdict"] == experiment.verdict.value
    (night,) = [s for run_id, s in summaries.items() if run_id.endswith("-night")]
    assert night["experiments"] == len(state.experiments) and night["incumbent"] == state.incumbent


def test_a_night_killed_and_resumed_leaves_every_run_in_the_files(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    repo = make_repo(tmp_path / "user", {"lr.py": SCRIPT.replace("import json, math, os, random",
                                                                 "import json, math, os, random, time\ntime.sleep(0.4)"),
                                         "program.md": PROGRAM})
    env = {**cli_env(tmp_path / "data"), "WANDB_MODE": "offline"}
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "wb", "--max-experiments", "3"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cursor = repo / "results" / "wb" / "published" / "wandb.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:            # the first decision was delivered: kill -9 then
        if cursor.exists() and '"decision"' in (repo / "results" / "wb" / "ledger.jsonl").read_text():
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    again = nightshift(repo, "run", "--tag", "wb", "--max-experiments", "2", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "wandb:" not in again.stdout, again.stdout       # nothing refused, nothing stopped
    assert_every_run_is_there(repo, "wb")


def test_export_sends_a_night_that_ran_without_wandb_and_a_second_export_adds_nothing(tmp_path):
    repo = make_repo(tmp_path / "user", {"lr.py": SCRIPT, "program.md": tracked_program("{}")})
    env = {**cli_env(tmp_path / "data"), "WANDB_MODE": "offline"}
    done = nightshift(repo, "run", "--tag", "plain", "--max-experiments", "2", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (repo / "results" / "plain" / "wandb").exists()
    nothing = nightshift(repo, "export", "--tag", "plain", env=env)
    assert nothing.returncode == 1 and "--wandb PROJECT" in nothing.stderr
    exported = nightshift(repo, "export", "--tag", "plain", "--wandb", "nights", env=env)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    total = len(events(repo, "plain"))
    assert f"exported plain: {total} events to W&B project nights" in " ".join(exported.stdout.split())
    assert_every_run_is_there(repo, "plain")
    twice = nightshift(repo, "export", "--tag", "plain", "--wandb", "nights", env=env)
    assert twice.returncode == 0 and "exported plain: 0 events" in twice.stdout, twice.stdout + twice.stderr


def test_a_wandb_that_does_not_answer_never_stops_the_night_and_export_sends_it_later(tmp_path):
    import socket

    with socket.socket() as probe:          # a port nothing listens on: W&B's server is down
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    repo = make_repo(tmp_path / "user", {"lr.py": SCRIPT, "program.md": PROGRAM})     # mode: online
    env = {**cli_env(tmp_path / "data"), "WANDB_BASE_URL": f"http://127.0.0.1:{port}", "WANDB_API_KEY": KEY,
           "WANDB_INIT_TIMEOUT": "3"}
    done = nightshift(repo, "run", "--tag", "down", "--max-experiments", "2", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert out.count("W&B does not answer") == 1, out         # said once, not at every event
    assert "not everything was delivered" in out and loop_state(repo, "down").experiments
    # once W&B answers (here: offline files), export sends the night from where delivery stopped
    exported = nightshift(repo, "export", "--tag", "down", env={**env, "WANDB_MODE": "offline"})
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert_every_run_is_there(repo, "down")
