"""The local backend: run the training command as a confined child process tree.

Layout of one run (`run_dir` = `spec.out_dir.parent`, owned by the harness):

    <run_dir>/out/      spec.out_dir: the only folder the run may keep (result.json)
    <run_dir>/log.txt   the run's stdout+stderr, capped to spec.log_cap_bytes (head + tail)
    <run_dir>/home/     $HOME during the run  } writable scratch, deleted when the run ends
    <run_dir>/tmp/      $TMPDIR during the run }
    <run_dir>/work/     with spec.writable_workdir: what the run wrote in its working dir
                        (an overlayfs upper layer, or a copy of the snapshot without one;
                        see sandbox.workdir)

Confinement, as strong as this machine allows (see `sandbox.isolation.detect`):
- PID namespace (`unshare --pid --fork --kill-child`) with `confine.py` as its init, so
  everything the command starts, setsid or not, dies with it; without one, the process
  group, the run's cgroup and an env marker (NIGHTSHIFT_RUN_ID) are swept instead. The
  sweep (cgroup + marker scan of /proc) runs after every run regardless.
- network namespace with only a down loopback, unless `limits.network`;
- mount namespace with a root of its own that holds only the run's view (sandbox.view: the
  snapshot, the data, the interpreter with the held-out units absent, the libraries it links,
  a shell), read-only but for out/, home/, tmp/ (and the working dir's private overlay, with
  spec.writable_workdir); spec.mounts bound read-only; private /dev, /tmp and /dev/shm;
  spec.hidden files of the data folder and the held-out units' places in the standard library
  covered by watched empty tripwires (sandbox.tripwire);
- all capabilities dropped and no_new_privs (setpriv), so root cannot undo the above;
- cgroup pids + memory limits (an OOM kill is reported as OOM); without a memory cgroup,
  RLIMIT_DATA (torch on CPU works under it; RLIMIT_AS would break CUDA's reservations);
  RLIMIT_NPROC only without a pids cgroup (it counts all the user's processes, and is
  ignored for root); RLIMIT_CORE=0; RLIMIT_NOFILE.
- scrubbed environment: PATH (spec.python's folder first), HOME, TMPDIR, locale, Python
  flags, CUDA_VISIBLE_DEVICES, the run marker and `spec.protocol_env()`; nothing else from
  the harness's environment. The command is `spec.shell_command(python=spec.python)`.
"""
from __future__ import annotations

import dataclasses
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from sandbox import view, workdir
from sandbox.isolation import CONFINE_SCRIPT, Isolation, RunCgroup, detect
from sandbox.outcome import CappedLog, run_result, utc_now
from sandbox.protocol import (OnOutput, Runner, RunInterrupted, RunResult, RunSpec, SandboxUnavailable,
                             WorkdirMode)
from sandbox.tripwire import open_tripwires

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
MARKER = "NIGHTSHIFT_RUN_ID"
READ_CHUNK = 64 * 1024


class LocalRunner(Runner):
    """Runs experiments as local processes. See the module docstring for what it confines.

    `kill_grace_s`: seconds between SIGTERM and SIGKILL once `spec.deadline_s` has passed.
    `isolation`: the machine's facts; probed on first use when not given (tests may pass
    a weaker one to exercise fallbacks). On KeyboardInterrupt the tree is killed, the log
    closed, and a `RunInterrupted` raised carrying the INTERRUPTED RunResult, so the loop can
    record it.
    """

    name = "local"

    def __init__(self, *, kill_grace_s: float = 5.0, isolation: Isolation | None = None) -> None:
        self.kill_grace_s = kill_grace_s
        self._isolation = isolation

    @property
    def isolation(self) -> Isolation:
        if self._isolation is None:
            self._isolation = detect()
        return self._isolation

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, **self.isolation.facts()}

    def run(self, spec: RunSpec, on_output: OnOutput | None = None,
            stop: threading.Event | None = None) -> RunResult:
        if not spec.snapshot_dir.is_dir():
            raise ValueError(f"snapshot_dir {spec.snapshot_dir} is not a folder (harness bug)")
        iso = self.isolation
        run_id = uuid.uuid4().hex
        run_dir = spec.out_dir.parent
        home, tmp = run_dir / "home", run_dir / "tmp"
        for folder in (spec.out_dir, home, tmp):
            folder.mkdir(parents=True, exist_ok=True)
        mode = self.workdir_mode(spec)
        cwd = spec.snapshot_dir
        if mode == WorkdirMode.COPY:
            cwd = workdir.make_copy(spec.snapshot_dir, run_dir, spec.mounts,
                                    link_mounts=not (iso.read_only_root and iso.unshare_argv(False)))
        layers = workdir.overlay_layers(run_dir) if mode == WorkdirMode.OVERLAY else None
        log = CappedLog(run_dir / "log.txt", spec.log_cap_bytes, on_output)
        cgroup, memory_by = self._make_cgroup(iso, run_id, spec)
        writable = (spec.out_dir, home, tmp) + ((cwd,) if mode == WorkdirMode.COPY else ())
        confined = iso.read_only_root and bool(iso.unshare_argv(False))
        if confined and spec.python is None:
            # PATH's `python` may be a shim whose tool lies outside the view (pyenv's): the
            # run's python is then the harness's interpreter, the one its view holds
            spec = dataclasses.replace(spec, python=sys.executable)
        seen = view.host_view(spec.python, spec.held_out.units, spec.view_add) if confined else None
        wires, hidden_enforced = open_tripwires(
            run_dir, spec.data_dir, spec.hidden, None if confined else "no mount namespace here",
            view.held_out_covers(seen, spec.held_out.units, spec.held_out.paths))
        covers = [(laid.wire, laid.target) for laid in wires.laid] if wires else []
        argv = self._argv(iso, spec, cgroup, memory_by, writable, cwd, layers, covers, seen)
        env = scrubbed_env(spec, home, tmp, run_id)
        started_at, t0 = utc_now(), time.monotonic()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        except OSError as exc:
            log.close()
            if wires:
                wires.close()
            if cgroup:
                cgroup.remove()
            raise SandboxUnavailable(f"cannot start {argv[0]}: {exc}; install util-linux "
                                     "or pass LocalRunner(isolation=...) without namespaces") from exc
        watch = _Watch(proc, log, run_id, cgroup, self.kill_grace_s)
        interrupted: BaseException | None = None
        try:
            watch.follow(spec.deadline_s, stop)
        except KeyboardInterrupt as exc:
            interrupted = exc
        finally:
            strays = watch.finish()   # kills and reaps everything, closes the log
        hidden_read = wires.close() if wires else []
        duration = (watch.ended or time.monotonic()) - t0
        oom = cgroup.oom_killed() if cgroup else False
        peaks = [p for p in (watch.peak_rss_mb, cgroup.peak_memory_mb() if cgroup else None) if p]
        if cgroup and not cgroup.remove():
            strays += 1  # something still held it; reported rather than hidden
        for folder in (home, tmp, run_dir / "root"):
            shutil.rmtree(folder, ignore_errors=True)
        written = {}
        if mode == WorkdirMode.OVERLAY:
            written = workdir.finish_overlay(run_dir)
        elif mode == WorkdirMode.COPY:
            written = workdir.finish_copy(spec.snapshot_dir, run_dir, spec.mounts)
        result = run_result(
            spec, log, exit_code=watch.exit_code, timed_out=watch.timed_out, oom_killed=oom,
            interrupted=interrupted is not None or watch.stopped, duration_s=duration,
            peak_memory_mb=round(max(peaks), 1) if peaks else None, backend=self.name, started_at=started_at,
            sandbox={**_run_facts(iso, spec, memory_by, cgroup), "run_id": run_id, "workdir": mode.value,
                     "stray_processes_killed": strays},
            written=written, work_dir=workdir.work_dir(run_dir) if mode != WorkdirMode.READ_ONLY else None,
            hidden_read=hidden_read, hidden_enforced=hidden_enforced)
        if interrupted is not None:
            raise RunInterrupted(result) from interrupted
        return result

    def workdir_mode(self, spec: RunSpec) -> WorkdirMode:
        """How this run's working directory is made: read-only (the snapshot itself), a
        private overlay (when the namespaces allow one) or a private copy."""
        if not spec.writable_workdir:
            if spec.mounts:
                raise ValueError("RunSpec.mounts need writable_workdir (harness bug)")
            return WorkdirMode.READ_ONLY
        iso = self.isolation
        if iso.overlay and iso.read_only_root and iso.unshare_argv(False):
            return WorkdirMode.OVERLAY
        return WorkdirMode.COPY

    @staticmethod
    def _make_cgroup(iso: Isolation, run_id: str, spec: RunSpec) -> tuple[RunCgroup | None, str | None]:
        cgroup = None
        if iso.cgroup_dirs:
            try:
                cgroup = RunCgroup(iso, run_id, spec.limits.memory_mb, spec.limits.pids)
            except OSError:
                cgroup = None  # probed fine but failed now (cgroup fs full, permissions): rlimits only
        if spec.limits.memory_mb is None:
            return cgroup, None
        return cgroup, "cgroup" if cgroup and "memory" in cgroup.dirs else "rlimit_data"

    @staticmethod
    def _argv(iso: Isolation, spec: RunSpec, cgroup: RunCgroup | None, memory_by: str | None,
              writable: tuple[Path, ...], cwd: Path, layers: tuple[Path, Path] | None = None,
              covers: list[tuple[Path, Path]] = (), seen: view.View | None = None) -> list[str]:
        limits = spec.limits
        rlimits = ["CORE=0"]
        if limits.open_files is not None:
            rlimits.append(f"NOFILE={limits.open_files}")
        if memory_by == "rlimit_data":
            rlimits.append(f"DATA={limits.memory_mb << 20}")
        if limits.pids is not None and not (cgroup and "pids" in cgroup.dirs):
            rlimits.append(f"NPROC={limits.pids}")
        argv = iso.unshare_argv(limits.network)
        confine = [sys.executable, "-I", "-S", str(CONFINE_SCRIPT)]  # -S: no site, faster start
        for procs in cgroup.procs_files if cgroup else []:
            confine += ["--cgroup-procs", procs]
        for item in rlimits:
            confine += ["--rlimit", item]
        if argv and iso.read_only_root and seen is not None:
            argv.append("--mount")
            where = Path(cwd).resolve()
            root = spec.out_dir.parent / "root"   # where the run's own root is built (a tmpfs)
            root.mkdir(exist_ok=True)
            confine += ["--read-only-root", "--root", str(root.resolve())]
            for path, text in seen.links:
                confine += ["--link", path, text]
            own = {Path(p).resolve() for p in writable}
            reads = [spec.data_dir, spec.train_out_dir] + ([] if layers or where in own else [where])
            mounts = [["--bind", bind.source, bind.target] for bind in seen.binds]
            mounts += [["--bind", folder, folder] for folder in
                       dict.fromkeys(str(Path(p).resolve()) for p in reads if p is not None)]
            mounts += [["--bind-rw", str(p), str(p)] for p in own]
            mounts += _results_out_of_sight(spec, mounts)
            for mount in sorted(mounts, key=lambda m: Path(m[-1]).parts.__len__()):   # parents first
                confine += mount
            if layers is not None:
                confine += ["--overlay", str(where), *(str(p.resolve()) for p in layers)]
            for mount in spec.mounts:
                confine += ["--bind-ro", str(Path(mount.source).resolve()), str(where / mount.path)]
            for wire, target in covers:
                confine += ["--cover", str(Path(wire).resolve()), str(Path(target).resolve())]
            confine += ["--chdir", str(where)]
        if argv and iso.setpriv:
            confine += ["--setpriv", iso.setpriv]
            # The run dies with the harness: SIGKILL to unshare when its parent dies, and
            # --kill-child passes it to the namespace's init, which takes the namespace down.
            argv = [iso.setpriv, "--pdeathsig", "KILL", "--", *argv]
        if limits.cpuset:
            confine += ["--cpus", ",".join(str(c) for c in limits.cpuset)]
        confine.append("--pdeathsig")   # without namespaces, confine and the command die with us
        return argv + confine + ["--", "/bin/sh", "-c", spec.shell_command(python=spec.python)]


def _results_out_of_sight(spec: RunSpec, mounts: list[list[str]]) -> list[list[str]]:
    """An empty folder over the harness's results folder where a folder the run reads holds it
    (a data folder around the repository): other runs' models and the tag's evaluation secret
    stay out of sight, and the run's own folders in it are bound after, on top."""
    if spec.private_root is None:
        return []
    results = Path(spec.private_root).resolve()
    around = [m for m in mounts if m[0] == "--bind" and results.is_relative_to(Path(m[1])) and Path(m[1]) != results]
    return [["--empty", str(results)]] if around else []


def scrubbed_env(spec: RunSpec, home: Path, tmp: Path, run_id: str) -> dict[str, str]:
    """The whole environment of a run: nothing is inherited but PATH (for finding python)."""
    gpu = spec.limits.gpu
    path = os.environ.get("PATH", DEFAULT_PATH)
    if spec.python:   # the interpreter's own tools (pip, torchrun, accelerate) come first
        path = f"{os.path.dirname(spec.python)}:{path}"
    return {
        "PATH": path,
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "CUDA_VISIBLE_DEVICES": "" if gpu is None else str(gpu),
        **spec.protocol_env(),
        MARKER: run_id,   # last, so spec.env cannot hide a run from the sweep
    }


def _run_facts(iso: Isolation, spec: RunSpec, memory_by: str | None,
               cgroup: RunCgroup | None) -> dict[str, Any]:
    sandboxed = bool(iso.unshare_argv(spec.limits.network))
    return {
        "pid_namespace": sandboxed,
        "network_isolated": sandboxed and iso.network_namespace and not spec.limits.network,
        "read_only_root": sandboxed and iso.read_only_root,
        "capabilities_dropped": sandboxed and bool(iso.setpriv),
        "cgroup": sorted(cgroup.dirs) if cgroup else [],
        "memory_limit": memory_by,
        "pids_limit": ("cgroup" if cgroup and "pids" in cgroup.dirs else
                       "ignored_as_root" if iso.is_root else "rlimit_nproc") if spec.limits.pids else None,
        "other_runs_hidden": (sandboxed and iso.read_only_root) if spec.private_root else None,
        "view": "allow-list (sandbox.view)" if sandboxed and iso.read_only_root else "the whole machine",
    }


class _Watch:
    """Follows one process tree: copies output to the log, enforces the deadline, reaps."""

    def __init__(self, proc: subprocess.Popen, log: CappedLog, run_id: str,
                 cgroup: RunCgroup | None, kill_grace_s: float) -> None:
        self.proc, self.log, self.cgroup, self.kill_grace_s = proc, log, cgroup, kill_grace_s
        self.marker = f"{MARKER}={run_id}".encode()
        self.fd = proc.stdout.fileno() if proc.stdout else -1
        self.eof = False
        self.exit_code: int | None = None
        self.peak_rss_mb: float | None = None
        self.ended: float | None = None
        self.timed_out = False
        self.stopped = False             # killed because the harness asked (`stop` was set)
        self.strays = 0

    def follow(self, deadline_s: float, stop: threading.Event | None = None) -> None:
        start = time.monotonic()
        kill_at = None
        while self.exit_code is None or not self.eof:
            now = time.monotonic()
            if self.exit_code is None and not self.timed_out and now - start > deadline_s:
                self.timed_out = True
                self._signal_all(signal.SIGTERM)
                kill_at = now + self.kill_grace_s
            if stop is not None and stop.is_set() and not self.stopped and self.exit_code is None:
                self.stopped = True          # not wanted any more: no grace, the result is void
                self._signal_all(signal.SIGKILL)
                kill_at = now + 1.0
            if kill_at is not None and now >= kill_at:
                self._signal_all(signal.SIGKILL)
                kill_at = now + 1.0   # again each second: a fork bomb may still be spawning
            self._read(0.1)
            self._reap()
            if self.exit_code is not None and not self.eof:
                self.strays += self._signal_all(signal.SIGKILL)  # the parent is gone: the rest too
                self._drain(2.0)
                return

    def finish(self) -> int:
        """Kill whatever is left, reap, drain and close the log. Returns how many processes
        were still alive after the command itself had ended (or been killed)."""
        strays = self.strays
        for _ in range(50):
            found = self._signal_all(signal.SIGKILL)
            if self.exit_code is None:
                self._reap(block=True)
            if not found:
                break
            strays += found
            time.sleep(0.02)
        self._drain(2.0)
        if self.proc.stdout:
            self.proc.stdout.close()
        self.log.close()
        return strays

    def _signal_all(self, sig: int) -> int:
        """Signal the process group, the cgroup and every process carrying the run marker.
        Returns how many processes (other than our direct child) were found."""
        targets = set(self.cgroup.pids()) if self.cgroup else set()
        targets |= _marked_pids(self.marker)
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in targets:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        targets.discard(self.proc.pid)
        return len(targets)

    def _read(self, timeout: float) -> None:
        if self.eof:  # output closed: the exit follows within moments, poll it closely
            time.sleep(min(timeout, 0.01))
            return
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            data = os.read(self.fd, READ_CHUNK)
            if data:
                self.log.write(data)
            else:
                self.eof = True

    def _drain(self, limit_s: float) -> None:
        end = time.monotonic() + limit_s
        while not self.eof and time.monotonic() < end:
            self._read(0.05)

    def _reap(self, block: bool = False) -> None:
        if self.exit_code is not None:
            return
        pid, status, usage = os.wait4(self.proc.pid, 0 if block else os.WNOHANG)
        if pid == 0:
            return
        self.ended = time.monotonic()
        self.exit_code = os.waitstatus_to_exitcode(status)
        self.proc.returncode = self.exit_code  # so Popen never waits on a reused pid
        self.peak_rss_mb = usage.ru_maxrss / 1024  # KiB on Linux, whole waited-for tree


def _marked_pids(marker: bytes) -> set[int]:
    """Processes whose initial environment carries this run's marker."""
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if marker in fh.read():
                    found.add(int(name))
        except OSError:
            pass
    return found
