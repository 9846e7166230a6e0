"""The `docker` backend: each run in its own locked-down, short-lived container.

What a run gets (see docs/sandbox.md for what this does and does not guarantee):
- network "none", a read-only root filesystem, all capabilities dropped, no-new-privileges,
  a non-root user (the harness's uid, or 1000 when the harness is root);
- the commit snapshot at /snapshot and the data at /data, read-only; one writable /out
  (the spec's out_dir) and a private /tmp (tmpfs); with `spec.writable_workdir`, /snapshot
  is instead a private copy of the snapshot (`sandbox.workdir`), writable, with
  `spec.mounts` read-only inside it;
- the command's placeholders expanded with the paths the container sees (/out, /data);
  `python` is the host's interpreter in a host-mode image (mounted at the same path), the
  image's own otherwise;
- memory (no swap), CPU and pids limits from `RunSpec.limits`, one GPU by device request
  when `limits.gpu` is set;
- only the protocol's variables plus PATH/HOME/locale: nothing of the harness's environment.

The harness enforces the deadline from outside (SIGKILL to the container), and the container
has its own, later one (`timeout` inside it), so a harness killed with kill -9 cannot leave
a run going past budget + grace + CONTAINER_MARGIN_S. It reads OOM from
the engine (`State.OOMKilled`), streams output to a capped log next to out_dir
(`<run dir>/log.txt`, as LocalRunner), samples peak memory from the engine's cgroup
stats, and always removes the container. On Ctrl-C the container is killed and removed
and the KeyboardInterrupt re-raised with the INTERRUPTED RunResult attached as
a `RunInterrupted` carrying it (as LocalRunner does). Containers carry the label `nightshift.run=<id>`
plus the harness's host and pid, so a later runner removes what a killed harness left.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import socket
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from sandbox import held_out, view, workdir
from sandbox.held_out import Cover
from sandbox.image import DEFAULT_TAG, SANDBOX_UID, ImageError, ImageMode, image_mode, python_prefixes, runtime_mounts
from sandbox.tripwire import Laid, open_tripwires
from sandbox.outcome import CappedLog, run_result, utc_now
from sandbox.protocol import (OnOutput, Runner, RunInterrupted, RunResult, RunSpec, SandboxUnavailable,
                             WorkdirMode)

LABEL_RUN = "nightshift.run"
LABEL_HOST = "nightshift.harness-host"
LABEL_PID = "nightshift.harness-pid"
SNAPSHOT, DATA, OUT, TRAIN_OUT = "/snapshot", "/data", "/out", "/train_out"
STATS_POLL_S = 0.5        # how often peak memory is sampled while a run lives
LOG_DRAIN_S = 10.0        # how long to wait for the output stream to end after the exit
CONTAINER_MARGIN_S = 30.0 # the container's own deadline is the run's plus this: the harness
                          # kills first (and reports the timeout); this only catches a dead harness
# The container's main process: `timeout` kills the run's whole process group when its own
# deadline passes, so a container outlives a killed harness by at most the margin. An image
# without `timeout` runs the command directly (the harness's deadline still holds).
_DEADLINE = ('if command -v timeout >/dev/null 2>&1; then exec timeout -s KILL "$1" /bin/sh -c "$0"; '
             'else exec /bin/sh -c "$0"; fi')


def engine_url() -> str:
    """Where the SDK looks for the engine (DOCKER_HOST, else the default socket)."""
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def connect(timeout_s: float = 5.0) -> Any:
    """A Docker client whose engine answered a ping, or SandboxUnavailable saying how to start one."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxUnavailable("the Docker SDK is not installed: pip install 'docker>=7.0'") from exc
    try:
        client = docker.from_env(timeout=int(max(timeout_s, 1)))
        client.ping()
        return client
    except Exception as exc:
        raise SandboxUnavailable(
            f"no Docker engine answers at {engine_url()} ({type(exc).__name__}: {_short(exc)}); "
            f"start one (`sudo systemctl start docker`, or `sudo .ci/dockerd.sh start`), "
            f"or use sandbox: local") from exc


def remove_leftovers(client: Any) -> list[str]:
    """Remove labelled containers no live harness owns: stopped ones, and running ones whose
    harness (same host) is gone. Containers of live harnesses (other runners running side by
    side) are left alone. Returns the names removed."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": LABEL_RUN}):
        labels = container.labels or {}
        alive = container.status in ("running", "created", "restarting") and \
            _harness_alive(labels.get(LABEL_HOST), labels.get(LABEL_PID))
        if not alive:
            try:
                container.remove(force=True)
                removed.append(container.name)
            except Exception:  # already gone (removed by its own harness meanwhile)
                pass
    return removed


class DockerRunner(Runner):
    """Runs each experiment in a fresh container of `image` (built by `python -m sandbox.image`)."""

    name = "docker"

    def __init__(self, image: str = DEFAULT_TAG, *, client: Any = None, tmp_mb: int = 1024,
                 shm_mb: int = 1024, kill_wait_s: float = 10.0,
                 container_margin_s: float = CONTAINER_MARGIN_S):
        self.image = image
        self.tmp_mb = tmp_mb          # /tmp is a tmpfs; what is written there counts as memory
        self.shm_mb = shm_mb          # /dev/shm, for DataLoader workers
        self.kill_wait_s = kill_wait_s
        self.container_margin_s = container_margin_s
        self._client = client
        self._swept = False
        self._layouts: dict[tuple, dict] = {}   # (image id, units) -> its standard library's layout

    # -- setup ---------------------------------------------------------------------------

    def client(self) -> Any:
        if self._client is None:
            self._client = connect()
        return self._client

    def image_info(self) -> Any:
        """The image object, or SandboxUnavailable saying how to build it."""
        import docker

        try:
            return self.client().images.get(self.image)
        except docker.errors.ImageNotFound as exc:
            raise SandboxUnavailable(
                f"the sandbox image {self.image!r} is missing; build it: "
                f"python -m sandbox.image build --tag {self.image} "
                f"(--mode host offline, --mode dockerfile on a GPU box with a registry)") from exc

    def check_image(self) -> list:
        """The image's host mounts, or SandboxUnavailable saying why it cannot run here (it
        is missing, or a host-mode image of another interpreter)."""
        try:
            return runtime_mounts(self.image_info().labels)
        except ImageError as exc:
            raise SandboxUnavailable(str(exc)) from exc

    def describe(self) -> dict[str, Any]:
        try:
            image = self.image_info()
            return {"backend": self.name, "image": self.image, "image_id": image.id,
                    "image_mode": image_mode(image.labels).value,
                    "engine": self.client().version().get("Version")}
        except SandboxUnavailable as exc:
            return {"backend": self.name, "image": self.image, "unavailable": str(exc)}

    # -- one run -------------------------------------------------------------------------

    def run(self, spec: RunSpec, on_output: OnOutput | None = None,
            stop: threading.Event | None = None) -> RunResult:
        client = self.client()
        image = self.image_info()
        if not self._swept:
            remove_leftovers(client)
            self._swept = True
        mode = image_mode(image.labels)
        if mode == ImageMode.HOST and spec.python is None:   # the interpreter the view holds (local.py)
            spec = dataclasses.replace(spec, python=sys.executable)
        seen = view.host_view(spec.python, spec.held_out.units, spec.view_add) if mode == ImageMode.HOST else None
        try:
            host_mounts = runtime_mounts(image.labels, seen=seen)
        except ImageError as exc:
            raise SandboxUnavailable(str(exc)) from exc
        run_label = uuid.uuid4().hex[:12]
        user = self._prepare_out(spec.out_dir)
        run_dir = spec.out_dir.parent
        work = None
        if spec.writable_workdir:
            work = workdir.make_copy(spec.snapshot_dir, run_dir, spec.mounts, link_mounts=False)
            if os.getuid() == 0:
                workdir.hand_over(work, SANDBOX_UID)
        elif spec.mounts:
            raise ValueError("RunSpec.mounts need writable_workdir (harness bug)")
        python = spec.python if mode == ImageMode.HOST else None   # a self-contained image has its own
        # Hidden splits and the held-out bytes' sources: a watched stand-in bound over each
        # (only the mounts are visible in a container, so other runs' folders and other data
        # folders need no hiding here).
        wires, hidden_enforced = open_tripwires(run_dir, spec.data_dir, spec.hidden, None,
                                                self._held_out_covers(spec, image, seen))
        laid = wires.laid if wires else []
        log = CappedLog(run_dir / "log.txt", spec.log_cap_bytes, on_output)
        started_at, t0 = utc_now(), time.monotonic()
        container, reader, timed_out, peak, state, interrupted = None, None, False, None, {}, None
        try:
            own_deadline = str(math.ceil(spec.deadline_s + self.container_margin_s))
            container = client.containers.create(
                image.id, ["/bin/sh", "-c", _DEADLINE,
                           spec.shell_command(out=OUT, data=DATA, python=python, train_out=TRAIN_OUT), own_deadline],
                name=f"nightshift-{run_label}",
                labels={LABEL_RUN: run_label, LABEL_HOST: socket.gethostname(), LABEL_PID: str(os.getpid())},
                user=user, environment=self._env(spec, mode), working_dir=SNAPSHOT,
                mounts=self._mounts(spec, host_mounts, work, laid), **self._host_config(spec))
            stream = client.api.attach(container.id, stdout=True, stderr=True, stream=True, logs=False)
            reader = threading.Thread(target=_pump, args=(stream, log), daemon=True,
                                      name=f"nightshift-log-{run_label}")
            reader.start()
            _start(container)
            t0 = time.monotonic()
            timed_out, peak, interrupted = self._wait(client, container, spec.deadline_s, t0, stop)
            duration = time.monotonic() - t0
            reader.join(1.0 if interrupted else LOG_DRAIN_S)
            container.reload()
            state = container.attrs.get("State", {})
            duration = engine_lifetime(state) or duration
        finally:
            if container is not None:
                _remove(container)
            if reader is not None:
                reader.join(1.0)
            log.close()
            hidden_read = wires.close() if wires else []
            self._restore_out(spec.out_dir)
            if work is not None and os.getuid() == 0:
                workdir.take_back(work)
        written = workdir.finish_copy(spec.snapshot_dir, run_dir, spec.mounts) if work else {}
        result = run_result(
            spec, log, exit_code=state.get("ExitCode"), timed_out=timed_out,
            oom_killed=bool(state.get("OOMKilled")),
            interrupted=interrupted is not None or bool(stop and stop.is_set()), duration_s=duration,
            peak_memory_mb=peak, backend=self.name, started_at=started_at,
            sandbox={
                "image": self.image, "image_id": image.id,
                "image_digests": image.attrs.get("RepoDigests") or [], "image_mode": mode.value,
                "mounts": [m.as_dict() for m in host_mounts], "container": f"nightshift-{run_label}",
                "container_deadline_s": math.ceil(spec.deadline_s + self.container_margin_s),
                "run_label": f"{LABEL_RUN}={run_label}", "user": user,
                "network": "none" if not spec.limits.network else "default",
                "read_only_root": True, "gpu": spec.limits.gpu,
                "oom_killed": bool(state.get("OOMKilled")),
                "peak_memory": "cgroup memory max_usage, sampled every 0.5 s" if peak is not None else None,
                "workdir": (WorkdirMode.COPY if work else WorkdirMode.READ_ONLY).value,
                "python": python or "the image's python (first on its PATH)",
            }, written=written, work_dir=work, hidden_read=hidden_read, hidden_enforced=hidden_enforced)
        if isinstance(interrupted, KeyboardInterrupt):   # as LocalRunner: the loop records it
            raise RunInterrupted(result) from interrupted
        return result

    def _wait(self, client: Any, container: Any, deadline_s: float, t0: float,
              stop: threading.Event | None = None
              ) -> tuple[bool, float | None, KeyboardInterrupt | None]:
        """Block until the container exits, the deadline passes, `stop` is set or the harness
        is interrupted (then SIGKILL it). Returns (timed_out, peak memory in MB or None, the
        interrupt)."""
        peak_bytes = 0
        try:
            while True:
                peak_bytes = max(peak_bytes, _memory_peak(client, container.id))
                remaining = deadline_s - (time.monotonic() - t0)
                if stop is not None and stop.is_set():
                    _kill(container)
                    _wait_exit(container, self.kill_wait_s)
                    return False, _mb(peak_bytes), None
                if remaining <= 0:
                    _kill(container)
                    _wait_exit(container, self.kill_wait_s)
                    return True, _mb(peak_bytes), None
                try:
                    container.wait(timeout=min(remaining, STATS_POLL_S))
                    return False, _mb(peak_bytes), None
                except Exception as exc:   # the SDK raises the transport's timeout errors
                    if not _is_timeout(exc):
                        raise
        except KeyboardInterrupt as exc:
            _kill(container)
            _wait_exit(container, self.kill_wait_s)
            return False, _mb(peak_bytes), exc

    def _prepare_out(self, out_dir: Path) -> str:
        """The user the container runs as, with out_dir made writable for it. Never root:
        a root harness hands the folder to the image's uid for the run."""
        out_dir.mkdir(parents=True, exist_ok=True)
        uid, gid = os.getuid(), os.getgid()
        if uid != 0:
            return f"{uid}:{gid}"
        os.chown(out_dir, SANDBOX_UID, SANDBOX_UID)
        return f"{SANDBOX_UID}:{SANDBOX_UID}"

    @staticmethod
    def _restore_out(out_dir: Path) -> None:
        """Give a root harness back what the run wrote (never following the run's links)."""
        if os.getuid() != 0 or not out_dir.exists():
            return
        for root, dirs, files in os.walk(out_dir, followlinks=False):
            for name in dirs + files:
                try:
                    os.lchown(os.path.join(root, name), 0, 0)
                except OSError:
                    pass
        os.lchown(out_dir, 0, 0)

    @staticmethod
    def _env(spec: RunSpec, mode: ImageMode) -> dict[str, str]:
        env = {**spec.protocol_env(out=OUT, data=DATA, train_out=TRAIN_OUT), "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        if mode == ImageMode.HOST:   # the host's interpreter first, as on the host
            bins = [f"{prefix}/bin" for prefix in python_prefixes()]
            env["PATH"] = ":".join(bins + ["/usr/local/bin", "/usr/bin", "/bin"])
        return env

    def _held_out_covers(self, spec: RunSpec, image: Any, seen: view.View | None) -> list[Cover]:
        """Where the held-out bytes' places are inside the container: in a host-mode image, the
        run's view (sandbox.view: the units absent from its standard library, stand-ins at
        their names); in a self-contained one, the held-out units of the image's own standard
        library, listed once per image by sandbox/held_out.py run inside it."""
        units, paths = list(spec.held_out.units), list(spec.held_out.paths)
        if not units and not paths:
            return []
        if seen is not None:
            return view.held_out_covers(seen, spec.held_out.units, spec.held_out.paths)
        key = (image.id, tuple(units))
        if key not in self._layouts:
            script = Path(held_out.__file__).read_text()
            output = self.client().containers.run(
                image.id, ["python3", "-c", script, json.dumps(units)], remove=True,
                network_mode="none", user=str(SANDBOX_UID), read_only=True, cap_drop=["ALL"])
            self._layouts[key] = json.loads(output)
        return held_out.covers(units, [], self._layouts[key])

    @staticmethod
    def _mounts(spec: RunSpec, host_mounts: list, work: Path | None = None,
                laid: list[Laid] = ()) -> list:
        from docker.types import Mount

        mounts = [Mount(SNAPSHOT, str(work or spec.snapshot_dir), type="bind", read_only=work is None),
                  Mount(DATA, str(spec.data_dir), type="bind", read_only=True),
                  Mount(OUT, str(spec.out_dir), type="bind", read_only=False)]
        mounts += [Mount(f"{SNAPSHOT}/{m.path}", str(Path(m.source).resolve()), type="bind", read_only=True)
                   for m in spec.mounts]
        mounts += [Mount(m.target, m.source, type="bind", read_only=True) for m in host_mounts]
        mounts += [Mount(f"{DATA}/{item.data_path}" if item.data_path is not None else str(item.target),
                         str(Path(item.wire).resolve()), type="bind", read_only=True) for item in laid]
        if spec.train_out_dir is not None:
            mounts.append(Mount(TRAIN_OUT, str(Path(spec.train_out_dir).resolve()), type="bind", read_only=True))
        return mounts

    def _host_config(self, spec: RunSpec) -> dict[str, Any]:
        from docker.types import DeviceRequest, LogConfig, Ulimit

        limits = spec.limits
        config: dict[str, Any] = {
            "read_only": True, "init": True, "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={self.tmp_mb}m,mode=1777"},
            "shm_size": f"{self.shm_mb}m",
            # Output goes through attach to the capped run log; the engine keeps no copy,
            # so a run printing gigabytes cannot fill the engine's disk.
            "log_config": LogConfig(type=LogConfig.types.NONE),
        }
        if not limits.network:
            config["network_mode"] = "none"
        if limits.memory_mb is not None:
            config["mem_limit"] = f"{limits.memory_mb}m"
            config["memswap_limit"] = f"{limits.memory_mb}m"   # no swap: hitting the limit is OOM
        if limits.pids is not None:
            config["pids_limit"] = limits.pids
        if limits.cpus is not None:
            config["nano_cpus"] = int(limits.cpus * 1e9)
        if limits.cpuset:
            config["cpuset_cpus"] = ",".join(str(c) for c in limits.cpuset)
        if limits.open_files is not None:
            config["ulimits"] = [Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files)]
        if limits.gpu is not None:
            config["device_requests"] = [DeviceRequest(device_ids=[str(limits.gpu)], capabilities=[["gpu"]])]
        return config


# -- helpers (module functions: no state) ---------------------------------------------------

def _pump(stream: Any, log: CappedLog) -> None:
    """Copy the container's output into the log until the stream ends."""
    try:
        for chunk in stream:
            log.write(chunk)
    except Exception:  # the stream is cut when the container is removed: the log keeps what came
        pass


def _start(container: Any) -> None:
    """Start the container; an engine that cannot (no GPU runtime, a broken image) is unavailable."""
    import docker

    try:
        container.start()
    except docker.errors.APIError as exc:
        raise SandboxUnavailable(f"the Docker engine could not start the run: {exc.explanation or exc}") from exc


def engine_lifetime(state: dict) -> float | None:
    """Seconds from the container's start to its exit by the engine's own clock (State's
    StartedAt, FinishedAt), or None. The harness's clock also counts the attach, the start call
    and a memory sample in flight at the exit, which differ from run to run by up to a second:
    noise in the over-budget check's paired timings (agent/decide/integrity.py)."""
    try:
        started, finished = (_timestamp(state[key]) for key in ("StartedAt", "FinishedAt"))
    except (KeyError, TypeError, ValueError):
        return None
    return finished - started if finished > started else None


def _timestamp(text: str) -> float:
    """An RFC 3339 time as Docker writes it (nanoseconds, Z) in seconds since the epoch."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    whole = datetime.fromisoformat(match.group(1) + ("+00:00" if match.group(3) == "Z" else match.group(3)))
    return whole.timestamp() + float("0." + (match.group(2) or "0"))


def _memory_peak(client: Any, container_id: str) -> int:
    """Peak memory so far in bytes: cgroup v1 max_usage, else the current usage (v2)."""
    try:
        stats = client.api.stats(container_id, stream=False, one_shot=True)
    except Exception:
        return 0
    memory = stats.get("memory_stats") or {}
    return int(memory.get("max_usage") or memory.get("usage") or 0)


def _mb(value: int) -> float | None:
    return round(value / 2**20, 1) if value else None


def _is_timeout(exc: BaseException) -> bool:
    import requests

    return isinstance(exc, (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError))


def _kill(container: Any) -> None:
    try:
        container.kill()   # SIGKILL to the whole container: every process of the run
    except Exception:
        pass  # it exited meanwhile


def _wait_exit(container: Any, timeout_s: float) -> None:
    try:
        container.wait(timeout=timeout_s)
    except Exception:
        pass


def _remove(container: Any) -> None:
    """Remove the container, retrying briefly; the leftover sweep catches what still fails."""
    for attempt in range(3):
        try:
            container.remove(force=True)
            return
        except Exception as exc:
            if "No such container" in str(exc) or "404" in str(exc):
                return
            time.sleep(0.2 * (attempt + 1))


def _harness_alive(host: str | None, pid: str | None) -> bool:
    """Whether the harness that labelled a container may still be running. Another host's
    harness (a shared engine) is presumed alive: we cannot see its processes."""
    if host != socket.gethostname():
        return host is not None
    if not (pid or "").isdigit():
        return False
    try:
        os.kill(int(pid), 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, another user's
        return True


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text if len(text) <= 160 else text[:157] + "..."
