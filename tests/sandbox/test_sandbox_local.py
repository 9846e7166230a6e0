"""LocalRunner against the hostile scripts of tests/hostile/: every misbehaviour ends with
the right status, nothing the run started survives it, the harness is unharmed (secrets,
memory, files) and the next run is normal. Real subprocesses, real namespaces when the
machine allows them; isolation-dependent checks skip with the missing fact as reason."""
from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests import hostile
import pytest

from sandbox.isolation import Isolation
from sandbox.local import MARKER, LocalRunner, _marked_pids
from sandbox.protocol import HeldOut, HiddenFile, Limits, RunInterrupted, RunResult, RunSpec, Status


@pytest.fixture(scope="module")
def runner() -> LocalRunner:
    return LocalRunner(kill_grace_s=1.0)


@pytest.fixture(scope="module")
def bare_runner() -> LocalRunner:
    """No namespaces, no cgroups: only the process group and the env-marker sweep."""
    return LocalRunner(kill_grace_s=1.0, isolation=Isolation(is_root=os.geteuid() == 0))


def assert_clean(result: RunResult) -> None:
    """No process carrying this run's marker is alive, and the scratch folders are gone."""
    marker = f"{MARKER}={result.sandbox['run_id']}".encode()
    assert _marked_pids(marker) == set(), "processes of the run survived it"
    run_dir = result.log_path.parent
    assert not (run_dir / "home").exists() and not (run_dir / "tmp").exists()


def assert_next_run_is_normal(runner: LocalRunner, hostile_spec) -> None:
    result = runner.run(hostile_spec("ok"))
    assert (result.status, result.metric) == (Status.OK, 1.23), result.log_tail
    assert_clean(result)


def out_json(result: RunResult, name: str) -> dict:
    return json.loads((result.log_path.parent / "out" / f"{name}.json").read_text())


# -- statuses ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["crash", "sleep", "no_metric", "nan_metric", "summary_only",
                                  "bad_utf8", "escape", "memory_hog"])
def test_hostile_script_ends_with_expected_status(runner, hostile_spec, name):
    budget = 2.0 if name == "sleep" else 30.0
    result = runner.run(hostile_spec(name, budget_s=budget))
    assert result.status == Status(hostile.EXPECTED[name]), (result.reason, result.log_tail)
    assert result.status == Status.OK or result.reason
    assert_clean(result)
    assert_next_run_is_normal(runner, hostile_spec)


def test_ok_run_fills_every_field(runner, hostile_spec):
    result = runner.run(hostile_spec("ok"))
    assert result.status == Status.OK and result.exit_code == 0
    assert result.metrics == {"val_bpb": 1.23, "steps": 10}
    assert result.backend == "local" and result.started_at <= result.ended_at
    assert result.duration_s > 0 and result.peak_memory_mb and result.peak_memory_mb > 1
    assert result.log_path.name == "log.txt" and "val_bpb: 1.23" in result.log_tail
    assert result.log_path.read_text().endswith("steps: 10\n")
    json.dumps(result.to_dict())  # the ledger can store it


def test_crash_reason_names_exit_code_and_error(runner, hostile_spec):
    result = runner.run(hostile_spec("crash"))
    assert result.exit_code == 1
    assert "exit code 1" in result.reason and "ValueError: boom" in result.reason


def test_a_crash_in_the_standard_library_names_the_scripts_line(runner, tmp_path):
    # The traceback ends in json's decoder; the reason names the repository's own frame, by
    # its path in the snapshot although the run ran in a writable copy of it.
    snapshot = tmp_path / "snapshot"
    (snapshot / "model").mkdir(parents=True)
    (snapshot / "model" / "net.py").write_text("import json\n\ndef forward(text):\n    return json.loads(text)\n")
    (snapshot / "train.py").write_text("from model.net import forward\nforward('{')\n")
    out = tmp_path / "run" / "out"
    out.mkdir(parents=True)
    result = runner.run(RunSpec(command=f"{sys.executable} train.py", snapshot_dir=snapshot, data_dir=tmp_path,
                                out_dir=out, seed=0, budget_s=30, metric="val_bpb", writable_workdir=True))
    assert result.status == Status.CRASH and "JSONDecodeError" in result.reason, result.log_tail
    assert result.reason.endswith("(model/net.py line 4, in forward)"), result.reason


def test_timeout_kills_a_process_that_ignores_sigterm(runner, hostile_spec):
    result = runner.run(hostile_spec("sleep", budget_s=1, grace_s=0.5))
    assert result.status == Status.TIMEOUT and "sleeping past the budget" in result.log_tail
    assert_clean(result)


def test_memory_limit_ends_in_oom_with_reason(runner, hostile_spec):
    result = runner.run(hostile_spec("memory_hog", limits=Limits(memory_mb=200)))
    assert result.status == Status.OOM, result.log_tail
    assert "no memory limit hit" not in result.log_tail
    assert result.sandbox["memory_limit"] in ("cgroup", "rlimit_data")


def test_summary_only_metric_is_parsed(runner, hostile_spec):
    result = runner.run(hostile_spec("summary_only"))
    assert result.metric == pytest.approx(1.111) and result.metrics["training_seconds"] == 2.0


# -- escaping the process tree ---------------------------------------------------------------

def test_setsid_grandchild_ignoring_sigterm_is_killed(runner, hostile_spec):
    result = runner.run(hostile_spec("escape"))
    assert result.status == Status.OK and out_json(result, "escape")["pid"] > 0
    assert_clean(result)


def test_setsid_grandchild_is_killed_without_namespaces(bare_runner, hostile_spec):
    result = bare_runner.run(hostile_spec("escape"))
    assert result.status == Status.OK and result.sandbox["pid_namespace"] is False
    assert result.sandbox["stray_processes_killed"] >= 1  # found by the marker sweep
    assert_clean(result)


def test_timeout_without_namespaces_kills_the_tree(bare_runner, hostile_spec):
    result = bare_runner.run(hostile_spec("sleep", budget_s=1, grace_s=0.5))
    assert result.status == Status.TIMEOUT
    assert_clean(result)


def test_fork_bomb_is_refused_and_swept(runner, hostile_spec):
    result = runner.run(hostile_spec("forkbomb", limits=Limits(pids=64)))
    assert_clean(result)
    assert_next_run_is_normal(runner, hostile_spec)
    if result.sandbox["pids_limit"] == "ignored_as_root":
        pytest.skip("as root without a pids cgroup no process limit applies "
                    f"(the script stopped itself at {result.metrics.get('forked')})")
    assert result.status == Status.OK, result.log_tail
    assert result.metrics["forked"] < 64 and result.metrics["refused"]


# -- network and files -------------------------------------------------------------------

@pytest.fixture
def listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def test_network_is_unreachable(runner, hostile_spec, listening_port):
    if not runner.isolation.network_namespace:
        pytest.skip("this machine cannot create a network namespace (unshare --net failed)")
    result = runner.run(hostile_spec("network", env={"HOSTILE_PORT": str(listening_port)}))
    seen = out_json(result, "network")
    assert result.sandbox["network_isolated"] is True
    assert seen["tcp"].startswith("refused") and seen["dns"].startswith("refused"), seen


def test_network_allowed_when_limits_say_so(runner, hostile_spec, listening_port):
    """The control for the test above: the same script does connect when allowed."""
    result = runner.run(hostile_spec("network", env={"HOSTILE_PORT": str(listening_port)},
                                     limits=Limits(network=True)))
    assert out_json(result, "network")["tcp"] == "connected"
    assert result.sandbox["network_isolated"] is False


def test_writes_outside_out_dir_are_refused(runner, hostile_spec, tmp_path):
    if not runner.isolation.read_only_root:
        pytest.skip("no mount namespace here: as root only the snapshot's permissions protect files")
    outside = tmp_path / "outside.txt"
    spec = hostile_spec("write_outside", env={"HOSTILE_OUTSIDE": str(outside)})
    before = (spec.snapshot_dir / "train.py").read_bytes()
    result = runner.run(spec)
    seen = out_json(result, "write_outside")
    # the root and the snapshot are read-only; /tmp is the run's own (a tmpfs gone with it)
    assert all(seen[key].startswith("refused") for key in ("snapshot_new", "snapshot_existing", "root")), seen
    assert not outside.exists() and not os.path.exists("/tmp/nightshift-hostile-was-here")
    assert not os.path.exists("/etc/nightshift-hostile-was-here")
    assert (spec.snapshot_dir / "train.py").read_bytes() == before
    assert not (spec.snapshot_dir / "planted.py").exists()


def test_environment_is_scrubbed(runner, hostile_spec, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    spec = hostile_spec("env_dump", limits=Limits(gpu=None))
    result = runner.run(spec)
    env = out_json(result, "env_dump")
    assert "sk-ant-secret" not in json.dumps(env) and "also-secret" not in json.dumps(env)
    assert set(env) - set(spec.protocol_env()) <= {
        "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
        "CUDA_VISIBLE_DEVICES", MARKER, "PWD", "SHLVL", "_", "LC_CTYPE"}  # the last four: sh's own
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["NIGHTSHIFT_SEED"] == str(spec.seed)
    assert env["HOME"].startswith(str(spec.out_dir.parent))


# -- output --------------------------------------------------------------------------------

@pytest.mark.parametrize("megabytes", [50, 100])
def test_flood_is_capped_and_harness_memory_stays_small(runner, hostile_spec, megabytes):
    lines: list[int] = [0]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    spec = hostile_spec("flood", env={"HOSTILE_MB": str(megabytes)}, budget_s=120)
    result = runner.run(spec, on_output=lambda line: lines.__setitem__(0, lines[0] + 1))
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert result.status == Status.OK, result.reason
    assert result.log_path.stat().st_size <= spec.log_cap_bytes + 100
    assert "bytes elided ..." in result.log_path.read_text()
    assert result.sandbox["log_bytes"] > megabytes << 20
    assert lines[0] == megabytes * 1024 + 2
    assert grew_mb < 40, f"the harness grew by {grew_mb:.0f} MB"


def test_invalid_utf8_reaches_callback_and_log_leniently(runner, hostile_spec):
    lines: list[str] = []
    result = runner.run(hostile_spec("bad_utf8"), on_output=lines.append)
    assert result.status == Status.OK
    assert lines[0] == "caf\ufffd \ufffd\ufffd\ufffd( broken" and "\ufffd" in result.log_tail


# -- interruption ----------------------------------------------------------------------------

def test_keyboard_interrupt_kills_tree_and_reraises_with_result(runner, hostile_spec, ctrl_c_raises):
    timers: list[threading.Timer] = []

    def interrupt_once_running(line: str) -> None:  # a real SIGINT, as Ctrl-C would send
        if "sleeping" in line and not timers:
            timers.append(threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)))
            timers[0].start()

    with pytest.raises(RunInterrupted) as caught:   # a KeyboardInterrupt carrying its result
        runner.run(hostile_spec("sleep", budget_s=60), on_output=interrupt_once_running)
    result = caught.value.result
    assert result.status == Status.INTERRUPTED and "sleeping" in result.log_path.read_text()
    assert_clean(result)
    assert_next_run_is_normal(runner, hostile_spec)


def test_a_run_dies_with_its_harness_even_when_the_harness_is_killed(tmp_path, hostile_spec):
    # kill -9 of the process that runs the sandbox: the whole tree goes with it (parent-death
    # signal through the namespace), instead of outliving its deadline.
    spec = hostile_spec("sleep", budget_s=300)
    marker = tmp_path / "marker.txt"
    harness = tmp_path / "harness.py"
    harness.write_text(
        "import pathlib, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "import pickle\n"
        "from sandbox.local import LocalRunner\n"
        f"spec = pickle.loads(pathlib.Path({str(tmp_path / 'spec.pkl')!r}).read_bytes())\n"
        f"pathlib.Path({str(marker)!r}).write_text('started')\n"
        "LocalRunner().run(spec)\n")
    import pickle
    (tmp_path / "spec.pkl").write_bytes(pickle.dumps(spec))
    proc = subprocess.Popen([sys.executable, str(harness)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (spec.out_dir.parent / "log.txt").exists():
        time.sleep(0.1)
    time.sleep(1.5)                                    # the sleeper is running
    assert _processes_of(spec.snapshot_dir), "the run never started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _processes_of(spec.snapshot_dir):
        time.sleep(0.2)
    assert _processes_of(spec.snapshot_dir) == []


def _processes_of(snapshot) -> list[int]:
    """Processes whose working directory is the run's snapshot."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/cwd") == str(snapshot):
                    found.append(int(name))
            except OSError:
                pass
    return found


PEEK = """
import json, os
data, out = os.environ["NIGHTSHIFT_DATA"], os.environ["NIGHTSHIFT_OUT"]
seen = {}
for name in ("train.bin", "val.bin"):
    with open(os.path.join(data, name), "rb") as fh:
        seen[name] = fh.read().decode()
runs = os.path.dirname(os.path.dirname(out))
seen["runs"] = sorted(os.listdir(runs))
seen["train_out"] = open(os.path.join(os.environ["NIGHTSHIFT_TRAIN_OUT"], "model.txt")).read() \\
    if "NIGHTSHIFT_TRAIN_OUT" in os.environ else None
json.dump({"val_bpb": 1.0, **seen}, open(os.path.join(out, "result.json"), "w"))
"""


GOOD_SCRIPT = """
import json, os
json.dump({"val_bpb": 1.0}, open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w"))
"""


def hidden_data_spec(tmp_path, script: str, **kw) -> RunSpec:
    """A run of `script` whose data folder holds a train and a (hidden) val split, whose out
    folder sits in a results tree beside another run that left a model."""
    snapshot, data = tmp_path / "snapshot", tmp_path / "data"
    for folder in (snapshot, data, tmp_path / "results/t/runs/other/out"):
        folder.mkdir(parents=True, exist_ok=True)
    (snapshot / "train.py").write_text(script)
    (data / "train.bin").write_text("train bytes")
    (data / "val.bin").write_text("held-out bytes")
    (tmp_path / "results/t/runs/other/out/model.txt").write_text("another run's model")
    out = tmp_path / "results/t/runs/me/out"
    out.mkdir(parents=True, exist_ok=True)
    return RunSpec(command=f"{sys.executable} train.py", snapshot_dir=snapshot, data_dir=data, out_dir=out,
                   seed=0, budget_s=30, metric="val_bpb", hidden=(HiddenFile("val.bin", "val"),),
                   private_root=tmp_path / "results", writable_workdir=True, **kw)


def test_a_hidden_split_is_empty_to_the_run_and_reading_it_is_seen(runner, tmp_path):
    if not (runner.isolation.read_only_root and runner.isolation.unshare_argv(False)):
        pytest.skip("no mount namespace here: hidden splits are not enforced (recorded as such)")
    result = runner.run(hidden_data_spec(tmp_path, PEEK))
    seen = out_json(result, "result")
    assert result.status == Status.OK and seen["train.bin"] == "train bytes"
    assert seen["val.bin"] == "" and result.hidden_read == ["val"] and result.hidden_enforced == "tripwires"
    assert seen["runs"] == ["me"]                           # other runs' models are out of sight
    assert (tmp_path / "data" / "val.bin").read_text() == "held-out bytes"   # the real one, untouched


def test_a_run_that_leaves_the_hidden_split_alone_trips_nothing(runner, tmp_path):
    result = runner.run(hidden_data_spec(tmp_path, GOOD_SCRIPT))
    assert result.status == Status.OK and result.hidden_read == []


def test_an_evaluation_step_reads_the_training_outputs(runner, tmp_path):
    train_out = tmp_path / "results/t/runs/me/out"
    train_out.mkdir(parents=True)
    (train_out / "model.txt").write_text("trained")
    spec = hidden_data_spec(tmp_path, PEEK, train_out_dir=train_out)
    spec = dataclasses.replace(spec, out_dir=tmp_path / "results/t/runs/me/eval/out")
    spec.out_dir.mkdir(parents=True)
    result = runner.run(spec)
    assert result.status == Status.OK, result.reason
    assert out_json(result, "result")["train_out"] == "trained"


SOURCE_PEEK = """
import glob, json, os, sysconfig
out = os.environ["NIGHTSHIFT_OUT"]
stdlibs = sorted({sysconfig.get_paths()["stdlib"], *glob.glob("/usr/lib/python3*/")})
seen = {}
for root in stdlibs:
    path = os.path.join(root, "xmlrpc", "client.py")
    if os.path.exists(path):
        seen[path] = len(open(path, "rb").read())
seen["beside the data"] = sorted(os.listdir(os.path.dirname(os.environ["NIGHTSHIFT_DATA"])))
json.dump({"val_bpb": 1.0, **seen}, open(os.path.join(out, "result.json"), "w"))
"""


def held_out_spec(tmp_path, script: str) -> RunSpec:
    """A run whose data's held-out bytes were cut from xmlrpc, and whose data folder has an
    earlier preparation beside it."""
    spec = hidden_data_spec(tmp_path / "run", script)
    data = tmp_path / "data-root" / "now"
    shutil.copytree(spec.data_dir, data)
    (tmp_path / "data-root" / "earlier").mkdir()
    (tmp_path / "data-root" / "earlier" / "train.bin").write_text("held-out bytes, as an older split had them")
    return dataclasses.replace(spec, data_dir=data, held_out=HeldOut(units=("xmlrpc",), siblings=True))


def test_the_held_out_sources_are_empty_in_every_python_installation_and_reading_them_is_seen(runner, tmp_path):
    """The default corpus is the standard library: the files val and test were cut from are
    covered in each Python installation the run can see, and so are the data's neighbours."""
    if not (runner.isolation.read_only_root and runner.isolation.unshare_argv(False)):
        pytest.skip("no mount namespace here: hiding is not enforced (recorded as such)")
    result = runner.run(held_out_spec(tmp_path, SOURCE_PEEK))
    seen = out_json(result, "result")
    assert result.status == Status.OK, result.reason
    sources = {path: size for path, size in seen.items() if path.endswith("client.py")}
    assert sources and all(size == 0 for size in sources.values()), sources   # every copy empty
    assert seen["beside the data"] == ["now"]                 # the earlier preparation is out of sight
    assert result.hidden_read == ["held-out source"]


def test_a_run_that_leaves_the_held_out_sources_alone_trips_nothing(runner, tmp_path):
    result = runner.run(held_out_spec(tmp_path, GOOD_SCRIPT))
    assert result.status == Status.OK and result.hidden_read == []


DEVICES_PEEK = """
import json, os, stat
out = os.environ["NIGHTSHIFT_OUT"]
blocks = [name for name in os.listdir("/dev") if stat.S_ISBLK(os.stat(os.path.join("/dev", name)).st_mode)]
open("/dev/null", "w").write("fine")
json.dump({"val_bpb": 1.0, "dev": sorted(os.listdir("/dev")), "blocks": blocks,
           "random": len(open("/dev/urandom", "rb").read(4))}, open(os.path.join(out, "result.json"), "w"))
"""


def test_the_run_sees_a_private_dev_without_disks(runner, tmp_path):
    """A raw read of a disk is every file's bytes by another path: the run's /dev holds the
    usual character devices (and accelerators), no block device."""
    if not (runner.isolation.read_only_root and runner.isolation.unshare_argv(False)):
        pytest.skip("no mount namespace here")
    result = runner.run(hidden_data_spec(tmp_path, DEVICES_PEEK))
    seen = out_json(result, "result")
    assert result.status == Status.OK, result.reason
    assert seen["blocks"] == [] and seen["random"] == 4
    assert {"null", "zero", "urandom", "shm", "pts"} <= set(seen["dev"])
    assert not [name for name in seen["dev"] if name.startswith(("loop", "vd", "sd", "nvme", "mem", "kmsg"))]


def test_without_namespaces_hiding_is_recorded_as_not_enforced(bare_runner, tmp_path):
    result = bare_runner.run(hidden_data_spec(tmp_path, GOOD_SCRIPT))
    assert result.hidden_enforced.startswith("not enforced")
