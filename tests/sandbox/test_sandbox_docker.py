"""The Docker backend against a real engine: hostile experiments end with the right status,
the harness is unharmed, no container is left behind, and the next run is normal.

Needs a Docker engine (`.ci/dockerd.sh start`); skipped, saying so, when none answers.
The image is the offline host-mode one (`python -m sandbox.image build --mode host`),
built here under a test tag when missing.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests import hostile
from tests.needs import check

from sandbox.protocol import Limits, RunInterrupted, RunSpec, SandboxUnavailable, Status

# The engine's tests share one worker (tests/conftest.py); those that use `client` need one.
pytestmark = pytest.mark.xdist_group("docker")

TEST_TAG = "nightshift:test"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def client():
    from sandbox.docker import connect
    from sandbox.image import build_host_image

    check("docker")   # the engine (tests/needs.py): skipped, or failed where CI requires it
    client = connect(timeout_s=3)
    build_host_image(client, TEST_TAG)   # ~1 s, offline; rebuilt so it matches this Python
    return client


@pytest.fixture(scope="module")
def runner(client):
    from sandbox.docker import DockerRunner

    return DockerRunner(TEST_TAG, client=client)


@pytest.fixture
def make_spec(tmp_path):
    """spec(script, **overrides): a RunSpec running `python run.py` over a fresh snapshot."""
    snapshot, data = tmp_path / "snapshot", tmp_path / "data"
    (snapshot / "train").mkdir(parents=True)
    (snapshot / "train" / "prepare.py").write_text("PROTECTED = True\n")
    data.mkdir()
    (data / "tokens.bin").write_bytes(b"\0" * 64)
    counter = iter(range(1000))

    def spec(script: str, *, budget_s: float = 20, grace_s: float = 5,
             limits: Limits = Limits(memory_mb=512), **kw) -> RunSpec:
        (snapshot / "run.py").write_text(textwrap.dedent(script))
        out = tmp_path / f"run{next(counter)}" / "out"
        out.mkdir(parents=True)
        return RunSpec(command="python run.py", snapshot_dir=snapshot, data_dir=data, out_dir=out,
                       seed=1, budget_s=budget_s, grace_s=grace_s, metric="val_bpb",
                       limits=limits, **kw)
    return spec


@pytest.fixture(autouse=True)
def no_leftovers(request):
    """After every test: none of this process's containers exist, in any state."""
    yield
    if "client" in request.fixturenames:
        client = request.getfixturevalue("client")
        mine = client.containers.list(all=True, filters={"label": f"nightshift.harness-pid={os.getpid()}"})
        assert not mine, f"containers left behind: {[c.name for c in mine]}"


PROTOCOL_VARS = ("NIGHTSHIFT_SEED", "NIGHTSHIFT_BUDGET_S", "NIGHTSHIFT_OUT", "NIGHTSHIFT_DATA",
                 "NIGHTSHIFT_SPLIT")
GOOD = """
    import json, os
    json.dump({"val_bpb": 1.25, "steps": 3}, open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w"))
    print("---"); print("val_bpb: 1.25")
"""


def assert_next_run_is_normal(runner, make_spec=None, hostile_spec=None) -> None:
    result = runner.run(hostile_spec("ok") if hostile_spec else make_spec(GOOD))
    assert result.status is Status.OK, result.reason
    assert result.metric in (1.25, 1.23)


# -- the normal path -------------------------------------------------------------------------

def test_a_good_run_reports_its_metric_image_and_mounts(runner, make_spec):
    lines: list[str] = []
    result = runner.run(make_spec(GOOD), on_output=lines.append)
    assert result.status is Status.OK and result.metric == 1.25 and result.metrics["steps"] == 3
    assert result.backend == "docker" and "val_bpb: 1.25" in lines
    assert result.sandbox["image_id"].startswith("sha256:")
    assert result.sandbox["image_mode"] == "host"
    targets = {m["target"] for m in result.sandbox["mounts"]}    # the run's view, not the host's /usr
    assert sysconfig.get_paths()["stdlib"] in targets and "/usr" not in targets
    assert all(m["mode"] == "ro" for m in result.sandbox["mounts"])
    assert result.log_path.read_text().endswith("val_bpb: 1.25\n")
    out = result.log_path.parent / "out"   # handed back to the harness's uid after the run
    assert (out / "result.json").stat().st_uid == os.getuid() == out.stat().st_uid


def test_a_run_s_duration_is_the_engine_s_start_to_exit(runner, make_spec, monkeypatch):
    """duration_s is the container's lifetime by the engine's clock (StartedAt..FinishedAt),
    not the harness's, which also counts the attach and a memory sample in flight at the exit."""
    import sandbox.docker as docker_backend
    seen: list[float | None] = []
    real = docker_backend.engine_lifetime
    monkeypatch.setattr(docker_backend, "engine_lifetime", lambda state: seen.append(real(state)) or seen[-1])
    result = runner.run(make_spec(GOOD))
    assert seen and seen[0] is not None and result.duration_s == round(seen[0], 3)


@pytest.mark.parametrize("state, seconds", [
    ({"StartedAt": "2026-12-03T17:20:01.123456789Z", "FinishedAt": "2026-12-03T17:20:16.623456789Z"}, 15.5),
    ({"StartedAt": "2026-12-03T17:20:01Z", "FinishedAt": "2026-12-03T18:20:01.5+01:00"}, 0.5),
    ({"StartedAt": "0001-01-01T00:00:00Z", "FinishedAt": "0001-01-01T00:00:00Z"}, None),   # never ran
    ({"StartedAt": "yesterday", "FinishedAt": "today"}, None), ({}, None)])
def test_the_engine_s_times_are_read_to_the_nanosecond_or_not_at_all(state, seconds):
    from sandbox.docker import engine_lifetime
    assert engine_lifetime(state) == (pytest.approx(seconds) if seconds is not None else None)


def test_the_run_sees_only_the_protocol_environment(runner, make_spec, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-must-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    result = runner.run(make_spec("""
        import json, os
        print("---"); print("val_bpb: 1.0")
        json.dump(dict(os.environ), open(os.environ["NIGHTSHIFT_OUT"] + "/env.json", "w"))
    """))
    assert result.status is Status.OK
    env = (result.log_path.parent / "out" / "env.json").read_text()
    assert "secret" not in env and "ANTHROPIC" not in env and "AWS_" not in env
    for name in ("NIGHTSHIFT_SEED", "NIGHTSHIFT_BUDGET_S", "NIGHTSHIFT_OUT", "NIGHTSHIFT_DATA", "NIGHTSHIFT_SPLIT"):
        assert name in env


def test_confinement_non_root_read_only_root_ro_snapshot_and_data_no_network(runner, make_spec):
    result = runner.run(make_spec("""
        import errno, os, socket, sysconfig
        def writable(path):
            try:
                open(path, "a").close(); return "yes"
            except OSError as exc:
                return errno.errorcode[exc.errno]
        def connect():
            try:
                socket.create_connection(("1.1.1.1", 53), timeout=2); return "yes"
            except OSError as exc:
                return type(exc).__name__
        mounts = {line.split()[1]: line.split()[3].split(",")[0] for line in open("/proc/self/mounts")}
        print("---")
        print("uid:", os.getuid())
        for name, path in [("root_fs", "/"), ("usr", "/usr/lib/" + sysconfig.get_config_var("MULTIARCH")),
                           ("snapshot", "/snapshot"),
                           ("data", "/data"), ("out", "/out"), ("tmp", "/tmp")]:
            print(f"{name}_mount:", mounts.get(path))
        print("etc_write:", writable("/etc/evil"))
        print("out_write:", writable(os.environ["NIGHTSHIFT_OUT"] + "/ok"))
        print("tmp_write:", writable("/tmp/ok"))
        print("network:", connect())
        print("interfaces:", ",".join(sorted(os.listdir("/sys/class/net"))))
        print("val_bpb: 1.0")
    """))
    m = result.metrics
    assert result.status is Status.OK, result.reason
    assert m["uid"] != 0
    assert [m[f"{name}_mount"] for name in ("root_fs", "usr", "snapshot", "data")] == ["ro"] * 4
    assert m["out_mount"] == m["tmp_mount"] == "rw"
    assert m["etc_write"] in ("EROFS", "EACCES") and m["out_write"] == m["tmp_write"] == "yes"
    assert m["network"] != "yes" and m["interfaces"] == "lo"
    assert result.sandbox["network"] == "none" and result.sandbox["read_only_root"] is True


# -- hostile experiments (tests/hostile/, shared with the local backend) ---------------------

def hostile_env(name: str, tmp_path: Path, port: int) -> dict[str, str]:
    return {"network": {"HOSTILE_PORT": str(port)},
            "write_outside": {"HOSTILE_OUTSIDE": str(tmp_path / "outside.txt")},
            "flood": {"HOSTILE_MB": "100"}}.get(name, {})


@pytest.fixture
def host_listener():
    """A TCP server on the host's loopback that the sandbox must not reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                pass
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


@pytest.mark.parametrize("name", sorted(hostile.EXPECTED))
def test_hostile_experiment_ends_with_the_right_status(name, runner, hostile_spec, tmp_path, host_listener,
                                                       monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-must-not-leak")
    port, accepted = host_listener
    budget = 2.0 if name == "sleep" else 30.0
    result = runner.run(hostile_spec(name, budget_s=budget, env=hostile_env(name, tmp_path, port)))
    assert result.status == Status(hostile.EXPECTED[name]), (result.reason, result.log_tail)
    assert result.status is Status.OK or result.reason
    out = result.log_path.parent / "out"
    seen = json.loads((out / f"{name}.json").read_text()) if (out / f"{name}.json").exists() else {}
    if name == "forkbomb":
        assert result.metrics["refused"] and result.metrics["forked"] < 64
    if name == "network":
        assert seen["tcp"].startswith("refused") and seen["dns"].startswith("refused") and not accepted
    if name == "write_outside":
        assert not (tmp_path / "outside.txt").exists()
        assert seen["snapshot_new"].startswith("refused") and seen["snapshot_existing"].startswith("refused")
    if name == "env_dump":
        assert "ANTHROPIC_API_KEY" not in seen and set(seen) >= set(PROTOCOL_VARS)
    if name == "flood":
        assert result.sandbox["log_bytes"] > 100 * 2**20 and result.log_path.stat().st_size < 1_100_000
    assert_next_run_is_normal(runner, make_spec=None, hostile_spec=hostile_spec)


def test_a_sigterm_ignoring_child_in_its_own_session_dies_with_the_run(runner, make_spec):
    result = runner.run(make_spec("""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
            start_new_session=True)
        time.sleep(600)
    """, budget_s=1, grace_s=1))
    assert result.status is Status.TIMEOUT   # and the container, with every process in it, is gone


def test_oom_is_recognised_from_the_engine_and_peak_memory_recorded(runner, make_spec):
    result = runner.run(make_spec("""
        import time
        keep = bytearray(150 * 2**20)
        keep[::4096] = b"x" * len(keep[::4096])
        time.sleep(1.5)
        hog = [bytearray(400 * 2**20)]
        hog[0][::4096] = b"x" * len(hog[0][::4096])
    """, limits=Limits(memory_mb=300)))
    assert result.status is Status.OOM and result.sandbox["oom_killed"] is True
    assert result.peak_memory_mb is not None and result.peak_memory_mb >= 150


def test_writing_outside_out_and_into_the_protected_file_fails_inside_only(runner, make_spec):
    spec = make_spec("""
        import os
        for path in ("/snapshot/train/prepare.py", "/data/tokens.bin", "/etc/passwd", "/root/x"):
            try:
                open(path, "a").write("tampered")
                print("wrote", path)
            except OSError:
                pass
        print("---"); print("val_bpb: 1.0")
    """)
    result = runner.run(spec)
    assert result.status is Status.OK and "wrote" not in result.log_path.read_text()
    assert (spec.snapshot_dir / "train" / "prepare.py").read_text() == "PROTECTED = True\n"
    assert (spec.data_dir / "tokens.bin").read_bytes() == b"\0" * 64


# -- leftovers, interrupts, unavailability ---------------------------------------------------

def test_ctrl_c_removes_the_container_and_reraises(runner, make_spec, ctrl_c_raises):
    spec = make_spec("import time; time.sleep(600)", budget_s=60)    # a missed Ctrl-C ends at 60 s
    timer = threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(RunInterrupted) as caught:   # a KeyboardInterrupt carrying its result
        runner.run(spec)
    timer.cancel()
    assert caught.value.result.status is Status.INTERRUPTED
    assert_next_run_is_normal(runner, make_spec)


def test_a_killed_harness_leaves_a_container_that_the_next_runner_removes(client, make_spec):
    from sandbox.docker import DockerRunner

    spec = make_spec("import time; time.sleep(600)", budget_s=600)
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path\n"
            f"from sandbox.docker import DockerRunner; from sandbox.protocol import RunSpec\n"
            f"DockerRunner({TEST_TAG!r}).run(RunSpec(command='sleep 600', snapshot_dir=Path({str(spec.snapshot_dir)!r}),"
            f" data_dir=Path({str(spec.data_dir)!r}), out_dir=Path({str(spec.out_dir)!r}), seed=1, budget_s=600, metric='m'))\n")
    harness = subprocess.Popen([sys.executable, "-c", code])
    try:
        orphan_filter = {"label": f"nightshift.harness-pid={harness.pid}"}
        for _ in range(100):   # until its container runs
            if client.containers.list(filters=orphan_filter):
                break
            threading.Event().wait(0.2)
        assert client.containers.list(filters=orphan_filter), "the harness never started its container"
    finally:
        harness.kill()   # SIGKILL: no cleanup runs
        harness.wait()
    assert client.containers.list(all=True, filters=orphan_filter), "expected an orphan to sweep"
    fresh = DockerRunner(TEST_TAG, client=client)
    assert_next_run_is_normal(fresh, make_spec)   # its first run sweeps the orphan
    assert not client.containers.list(all=True, filters=orphan_filter)


def test_a_missing_image_is_unavailable_with_the_build_command(client, make_spec):
    from sandbox.docker import DockerRunner

    with pytest.raises(SandboxUnavailable, match="python -m sandbox.image build"):
        DockerRunner("nightshift:no-such-tag", client=client).run(make_spec(GOOD))


def test_no_engine_is_unavailable_with_how_to_start_one(monkeypatch, tmp_path):
    from sandbox.docker import connect

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    with pytest.raises(SandboxUnavailable, match="dockerd.sh start"):
        connect(timeout_s=1)


def test_auto_picks_docker_when_the_engine_answers(client):
    from sandbox.select import make_runner

    runner, why = make_runner("auto", image=TEST_TAG)
    assert runner.name == "docker" and why.startswith("docker (engine ")
    with pytest.raises(SandboxUnavailable, match="sandbox.image build"):
        make_runner("docker", image="nightshift:no-such-tag")


def test_host_mode_refuses_a_python_prefix_the_sandbox_user_cannot_read(tmp_path):
    from sandbox.image import LABEL_MODE, LABEL_PREFIXES, ImageError, runtime_mounts

    prefix = tmp_path / "python"
    (prefix / "bin").mkdir(parents=True)
    prefix.chmod(0o700)
    labels = {LABEL_MODE: "host", LABEL_PREFIXES: json.dumps([str(prefix)])}
    with pytest.raises(ImageError, match="chmod -R o\\+rX"):
        runtime_mounts(labels, python=[str(prefix)])
    prefix.chmod(0o755)
    assert runtime_mounts(labels, python=[str(prefix)])   # readable: the run's view is mounted
    assert runtime_mounts({LABEL_MODE: "dockerfile"}) == []


def test_a_host_image_of_another_python_is_refused_and_auto_falls_back_saying_why(client, tmp_path):
    """Issue 14: an image built from one virtualenv, used from another, mounted the old prefix
    while PATH named the new one: the run found the system python without torch."""
    from sandbox.image import LABEL_PREFIXES, LABEL_PYTHON, _changes, host_rootfs_tar
    from sandbox.select import make_runner

    other = tmp_path / "other-venv"
    (other / "bin").mkdir(parents=True)
    tag = "nightshift-test-otherpy:latest"
    labels = {LABEL_PREFIXES: json.dumps([str(other)]), LABEL_PYTHON: f"{other}/bin/python3"}
    client.api.import_image_from_data(host_rootfs_tar(), repository=tag.split(":")[0], tag="latest",
                                      changes=_changes("host", labels))
    try:
        runner, why = make_runner("auto", image=tag)
        assert runner.name == "local"
        assert f"carries the Python of {other}/bin/python3" in why and "Rebuild the image" in why
        with pytest.raises(SandboxUnavailable, match="this harness runs"):
            make_runner("docker", image=tag)
    finally:
        client.images.remove(tag, force=True)


def test_a_container_outlives_a_killed_harness_by_its_own_deadline_at_most(client, make_spec):
    """Issue 14: a SIGKILLed harness's container ran on; now the container carries its own
    deadline (budget + grace + margin) and stops by itself."""
    spec = make_spec("import time; time.sleep(600)", budget_s=1, grace_s=1)
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path\n"
            f"from sandbox.docker import DockerRunner; from sandbox.protocol import RunSpec\n"
            f"runner = DockerRunner({TEST_TAG!r}); runner.container_margin_s = 2\n"
            f"runner.run(RunSpec(command='sleep 600', "
            f"snapshot_dir=Path({str(spec.snapshot_dir)!r}), data_dir=Path({str(spec.data_dir)!r}), "
            f"out_dir=Path({str(spec.out_dir)!r}), seed=1, budget_s=1, grace_s=1, metric='m'))\n")
    # killed before its deadline (2 s) comes: only the container's own (4 s) can end the run
    harness = subprocess.Popen([sys.executable, "-c", code])
    mine = {"label": f"nightshift.harness-pid={harness.pid}"}
    try:
        for _ in range(100):
            if client.containers.list(filters=mine):
                break
            threading.Event().wait(0.1)
        assert client.containers.list(filters=mine), "the harness never started its container"
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        started = time.monotonic()
        while client.containers.list(filters=mine) and time.monotonic() - started < 30:
            threading.Event().wait(0.2)
        assert not client.containers.list(filters=mine), "the container outlived its own deadline"
        [container] = client.containers.list(all=True, filters=mine)
        assert container.attrs["State"]["ExitCode"] == 137       # killed by its `timeout`
    finally:
        for container in client.containers.list(all=True, filters=mine):
            container.remove(force=True)


def test_a_workers_share_reaches_the_container_and_stop_ends_the_run(runner, make_spec):
    # A worker's cores (cpuset) are the container's, and `stop` set from another thread ends
    # the run as INTERRUPTED without raising (the scheduler's cancellation).
    script = ("import json, os, time\n"
              "json.dump({'val_bpb': 1.0, 'cpus': sorted(os.sched_getaffinity(0))},"
              " open(os.path.join(os.environ['NIGHTSHIFT_OUT'], 'result.json'), 'w'))\n"
              "time.sleep(float(os.environ.get('SLEEP', '0')))\n")
    cores = sorted(os.sched_getaffinity(0))[:1]
    done = runner.run(make_spec(script, limits=Limits(memory_mb=256, cpuset=tuple(cores))))
    assert done.status is Status.OK and done.metrics["cpus"] == cores
    stop = threading.Event()
    threading.Timer(2.0, stop.set).start()
    slow = runner.run(make_spec(script, env={"SLEEP": "60"}, budget_s=90), stop=stop)
    assert slow.status is Status.INTERRUPTED and slow.duration_s < 30


def test_a_writable_workdir_is_a_private_copy_with_the_data_mounted_read_only(runner, make_spec, tmp_path):
    """The docker form of sandbox.workdir: writes land in <run dir>/work, the snapshot and
    the user's data folder are untouched, placeholders take the paths the container sees."""
    from sandbox.protocol import DataMount

    users = tmp_path / "user-data"
    users.mkdir()
    (users / "train.bin").write_text("TOKENS")
    spec = make_spec("""
        import os, sys
        os.makedirs("ckpt", exist_ok=True)
        open("ckpt/model.pt", "wb").write(b"w" * 1000)
        print("data:", open("data/corpus/train.bin").read())
        try:
            open("data/corpus/new", "w"); print("data_write: yes")
        except OSError as exc:
            print("data_write: refused")
        print("argv:", " ".join(sys.argv[1:]))
        print("---"); print("val_bpb: 1.0")
    """, writable_workdir=True, mounts=(DataMount("data/corpus", users),), python=sys.executable)
    spec = type(spec)(**{**spec.__dict__, "command": "python run.py --seed={seed} --out={out} --data={data}"})
    snapshot_before = sorted(p.name for p in spec.snapshot_dir.rglob("*"))
    result = runner.run(spec)
    assert result.status is Status.OK, (result.reason, result.log_tail)
    log = result.log_path.read_text()
    assert "data: TOKENS" in log and "data_write: refused" in log and "argv: --seed=1 --out=/out --data=/data" in log
    assert result.written == {"ckpt/model.pt": 1000} and result.sandbox["workdir"] == "copy"
    assert (result.work_dir / "ckpt" / "model.pt").stat().st_uid == os.getuid()
    assert sorted(p.name for p in spec.snapshot_dir.rglob("*")) == snapshot_before
    assert sorted(p.name for p in users.iterdir()) == ["train.bin"]


DOCKER_PEEK = """
import json, os
data, out = os.environ["NIGHTSHIFT_DATA"], os.environ["NIGHTSHIFT_OUT"]
seen = {name: open(os.path.join(data, name), "rb").read().decode() for name in ("train.bin", "val.bin")}
if "NIGHTSHIFT_TRAIN_OUT" in os.environ:
    seen["train_out"] = open(os.path.join(os.environ["NIGHTSHIFT_TRAIN_OUT"], "model.txt")).read()
json.dump({"val_bpb": 1.0, **seen}, open(os.path.join(out, "result.json"), "w"))
"""


def test_a_hidden_split_is_a_tripwire_in_a_container_too(runner, make_spec, tmp_path):
    from sandbox.protocol import HiddenFile

    spec = make_spec(DOCKER_PEEK, hidden=(HiddenFile("val.bin", "val"),))
    (spec.data_dir / "train.bin").write_text("train bytes")
    (spec.data_dir / "val.bin").write_text("held-out bytes")
    result = runner.run(spec)
    seen = json.loads((spec.out_dir / "result.json").read_text())
    assert result.status == Status.OK, result.reason
    assert seen == {"val_bpb": 1.0, "train.bin": "train bytes", "val.bin": ""}
    assert result.hidden_read == ["val"] and result.hidden_enforced == "tripwires"


def test_an_evaluation_step_in_a_container_reads_the_training_outputs(runner, make_spec, tmp_path):
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "model.txt").write_text("the model")
    spec = make_spec(DOCKER_PEEK, train_out_dir=trained)
    (spec.data_dir / "train.bin").write_text("t")
    (spec.data_dir / "val.bin").write_text("v")
    result = runner.run(spec)
    assert result.status == Status.OK, result.reason
    seen = json.loads((spec.out_dir / "result.json").read_text())
    assert seen["train_out"] == "the model" and seen["val.bin"] == "v" and result.hidden_read == []


HELD_OUT_PEEK = """
import glob, json, os, sysconfig
stdlibs = sorted({sysconfig.get_paths()["stdlib"], *glob.glob("/usr/lib/python3*/")})
seen = {p: len(open(p, "rb").read()) for root in stdlibs
        if os.path.exists(p := os.path.join(root, "xmlrpc", "client.py"))}
json.dump({"val_bpb": 1.0, **seen}, open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w"))
"""


def test_the_held_out_sources_are_tripwires_in_a_container_too(runner, make_spec):
    """A host-mode image mounts the run's view (sandbox/view.py): its standard library without
    the files the held-out splits were cut from, empty stand-ins at their names, watched."""
    from sandbox.protocol import HeldOut

    result = runner.run(make_spec(HELD_OUT_PEEK, held_out=HeldOut(units=("xmlrpc",))))
    assert result.status == Status.OK, result.reason
    seen = {k: v for k, v in json.loads((result.log_path.parent / "out" / "result.json").read_text()).items()
            if k.endswith("client.py")}
    assert seen and all(size == 0 for size in seen.values()), seen
    assert result.hidden_read == ["held-out source"]


UNLISTED_PEEK = """
import json, os
seen = {}
for path in json.loads(os.environ["PATHS"]):
    try:
        seen[path] = len(open(path, "rb").read())
    except OSError as error:
        seen[path] = type(error).__name__
seen["/usr/lib"] = sorted(os.listdir("/usr/lib"))
json.dump({"val_bpb": 1.0, "seen": seen}, open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w"))
"""


def test_a_copy_in_a_place_nobody_listed_and_other_pythons_are_not_in_the_container(runner, make_spec, tmp_path):
    """The red team's door in a container: a host-mode image used to mount all of /usr (another
    Python's standard library, an SDK's vendored one). Now only the view is mounted."""
    import sysconfig

    from sandbox import held_out

    vendored = tmp_path / "usr-lib" / "sdk" / "python3.12"
    vendored.mkdir(parents=True)
    (vendored / "mailbox.py").write_bytes((Path(sysconfig.get_paths()["stdlib"]) / "mailbox.py").read_bytes())
    mine = os.path.realpath(sysconfig.get_paths()["stdlib"])
    others = [os.path.join(root, "os.py") for root in held_out.stdlib_roots() if root != mine]
    paths = [str(vendored / "mailbox.py"), *others, os.path.join(mine, "os.py")]
    result = runner.run(make_spec(UNLISTED_PEEK, env={"PATHS": json.dumps(paths)}))
    assert result.status == Status.OK, result.reason + result.log_tail
    seen = json.loads((result.log_path.parent / "out" / "result.json").read_text())["seen"]
    assert seen[str(vendored / "mailbox.py")] == "FileNotFoundError"
    assert all(seen[path] == "FileNotFoundError" for path in others), seen
    assert seen[os.path.join(mine, "os.py")] > 0
    assert not any(name.startswith("python") for name in seen["/usr/lib"]), seen["/usr/lib"]
