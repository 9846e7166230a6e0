"""What this machine lets the local sandbox do, found by trying it, and per-run cgroups.

`detect()` probes once (a few tiny subprocesses, ~0.1-0.3 s) and returns `Isolation`:
which namespaces `unshare` can create, whether the filesystem can be made read-only
around a run, whether capabilities can be dropped, and which cgroup controllers we may
use. `LocalRunner` builds its command line from these facts and records them in every
RunResult, so a ledger says how strongly each run was confined.

`RunCgroup` is one run's cgroup (v1 or v2: pids + memory): limits, the list of
processes for the final sweep, peak memory, whether the OOM killer struck, and removal.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CONFINE_SCRIPT = Path(__file__).with_name("confine.py")
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Isolation:
    """Facts about confinement on this machine. Paths are None when unavailable."""

    is_root: bool
    unshare: str | None = None
    pid_namespace: bool = False       # everything the run starts dies with it
    network_namespace: bool = False   # only a down loopback: no network at all
    read_only_root: bool = False      # writes only to out/, home/, tmp/ (mount namespace)
    overlay: bool = False             # a private overlayfs can make the working dir writable
    setpriv: str | None = None        # capabilities dropped, no_new_privs
    cgroup_version: int | None = None
    cgroup_dirs: dict[str, str] = field(default_factory=dict)  # controller -> our parent dir
    notes: tuple[str, ...] = ()

    def unshare_argv(self, network: bool) -> list[str]:
        """The namespace wrapper for one run ([] when no PID namespace is possible)."""
        if not (self.unshare and self.pid_namespace):
            return []
        argv = [self.unshare, "--fork", "--kill-child", "--pid", "--mount-proc"]
        if not self.is_root:
            argv.append("--map-root-user")
        if self.network_namespace and not network:
            argv.append("--net")
        return argv

    def facts(self) -> dict[str, Any]:
        data = asdict(self)
        data["notes"] = list(self.notes)
        data["pids_limit"] = "pids" in self.cgroup_dirs or not self.is_root
        data["memory_limit"] = "cgroup" if "memory" in self.cgroup_dirs else "rlimit_data"
        return data


def detect() -> Isolation:
    """Probe this machine. Never raises: what fails is recorded as unavailable."""
    is_root = os.geteuid() == 0
    notes: list[str] = []
    unshare = shutil.which("unshare") or next(
        (p for p in ("/usr/bin/unshare", "/bin/unshare") if os.access(p, os.X_OK)), None)
    if unshare is None:
        notes.append("no unshare binary (util-linux): no namespaces, no network isolation")
    user = [] if is_root else ["--map-root-user"]
    pid_ns = bool(unshare) and _works([unshare, "--fork", "--kill-child", "--pid", "--mount-proc", *user, "/bin/true"])
    net_ns = bool(unshare) and _works([unshare, *user, "--net", "/bin/true"])
    if unshare and not pid_ns:
        notes.append("unshare --pid failed: process tree tracked by group, cgroup and env marker")
    if unshare and not net_ns:
        notes.append("unshare --net failed: runs have the machine's network")
    setpriv = shutil.which("setpriv")
    read_only = pid_ns and _read_only_root_works(unshare, user, setpriv)
    if pid_ns and not read_only:
        notes.append("read-only root failed: only the snapshot's permissions protect files")
    overlay = read_only and _overlay_works(unshare, user, setpriv)
    if read_only and not overlay:
        notes.append("overlayfs failed: a writable working dir is a copy of the snapshot")
    if setpriv is None:
        notes.append("no setpriv binary: runs keep the harness's capabilities")
    version, dirs = _cgroup_dirs()
    if is_root and "pids" not in dirs:
        notes.append("as root RLIMIT_NPROC is ignored and no pids cgroup: no process limit")
    return Isolation(is_root=is_root, unshare=unshare, pid_namespace=pid_ns,
                     network_namespace=net_ns, read_only_root=read_only, overlay=overlay,
                     setpriv=setpriv,
                     cgroup_version=version if dirs else None, cgroup_dirs=dirs,
                     notes=tuple(notes))


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _own_root(tmp: str) -> list[str]:
    """confine.py's arguments for a root of its own in `tmp` holding this interpreter's view."""
    from sandbox.view import ViewError, host_view

    try:
        seen = host_view(sys.executable)
    except ViewError:
        return []
    args = ["--read-only-root", "--root", os.path.join(tmp, "root")]
    for path, text in seen.links:
        args += ["--link", path, text]
    for bind in seen.binds:
        args += ["--bind", bind.source, bind.target]
    os.mkdir(os.path.join(tmp, "root"))
    return args


def _read_only_root_works(unshare: str | None, user: list[str], setpriv: str | None) -> bool:
    """Run confine.py for real: in a root of its own, the writable folder must be writable,
    its parent not, and a file of the host outside the view must not be there."""
    if unshare is None:
        return False
    with tempfile.TemporaryDirectory(prefix="nightshift-probe-") as tmp:
        inside, unseen = Path(tmp, "out"), Path(tmp, "unseen")
        inside.mkdir()
        unseen.write_text("")
        priv = ["--setpriv", setpriv] if setpriv else []
        own = _own_root(tmp)
        check = f': > "{inside}/ok" && ! (: > /etc/escaped) 2>/dev/null && ! [ -e "{unseen}" ]'
        argv = [unshare, "--fork", "--kill-child", "--pid", "--mount-proc", *user, "--mount",
                sys.executable, "-I", str(CONFINE_SCRIPT), *own, "--bind-rw", str(inside), str(inside),
                *priv, "--", "/bin/sh", "-c", check]
        return bool(own) and _works(argv) and Path(inside, "ok").exists()


def _overlay_works(unshare: str | None, user: list[str], setpriv: str | None) -> bool:
    """An overlay over a read-only folder takes a new file in its upper layer only."""
    if unshare is None:
        return False
    with tempfile.TemporaryDirectory(prefix="nightshift-probe-") as tmp:
        lower, upper, work = (Path(tmp, name) for name in ("lower", "upper", "work"))
        for folder in (lower, upper, work):
            folder.mkdir()
        lower.chmod(0o555)
        priv = ["--setpriv", setpriv] if setpriv else []
        argv = [unshare, "--fork", "--kill-child", "--pid", "--mount-proc", *user, "--mount",
                sys.executable, "-I", str(CONFINE_SCRIPT), *_own_root(tmp),
                "--overlay", str(lower), str(upper), str(work), "--chdir", str(lower), *priv,
                "--", "/bin/sh", "-c", ": > ok"]
        try:
            return _works(argv) and Path(upper, "ok").exists() and not Path(lower, "ok").exists()
        finally:
            lower.chmod(0o755)
            for current, dirs, _ in os.walk(work):
                for name in dirs:
                    os.chmod(os.path.join(current, name), 0o700)


def _own_cgroup(controller: str) -> tuple[int, str] | None:
    """(version, our path) in the hierarchy holding `controller`."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return 1, path
    for line in lines:
        if line.startswith("0::"):
            return 2, line[3:]
    return None


def _cgroup_dirs() -> tuple[int | None, dict[str, str]]:
    """Parent folders where we may create per-run cgroups, by controller (probed)."""
    dirs: dict[str, str] = {}
    version = None
    for controller in ("pids", "memory"):
        found = _own_cgroup(controller)
        if found is None:
            continue
        version, own = found
        parent = (CGROUP_ROOT / controller if version == 1 else CGROUP_ROOT) / own.lstrip("/")
        probe = parent / f"nightshift-probe-{uuid.uuid4().hex[:8]}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            limit_file = "pids.max" if controller == "pids" else (
                "memory.limit_in_bytes" if version == 1 else "memory.max")
            if (probe / limit_file).exists():
                dirs[controller] = str(parent)
        finally:
            _rmdir(probe)
    return version, dirs


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
        return True
    except OSError:
        return False


class RunCgroup:
    """The cgroup(s) of one run, named after its run id. Created with limits, joined by
    the sandbox's init before it starts the command, swept and removed afterwards."""

    def __init__(self, isolation: Isolation, run_id: str, memory_mb: int | None, pids: int | None):
        self.version = isolation.cgroup_version
        self.dirs: dict[str, Path] = {}
        for controller, parent in isolation.cgroup_dirs.items():
            folder = Path(parent) / f"nightshift-{run_id}"
            folder.mkdir()
            self.dirs[controller] = folder
        if pids is not None and "pids" in self.dirs:
            (self.dirs["pids"] / "pids.max").write_text(str(pids))
        if memory_mb is not None and "memory" in self.dirs:
            mem = self.dirs["memory"]
            limit = str(memory_mb << 20)
            if self.version == 1:
                (mem / "memory.limit_in_bytes").write_text(limit)
                if (mem / "memory.memsw.limit_in_bytes").exists():  # or it swaps instead
                    _write_quietly(mem / "memory.memsw.limit_in_bytes", limit)
            else:
                (mem / "memory.max").write_text(limit)
                _write_quietly(mem / "memory.swap.max", "0")

    @property
    def procs_files(self) -> list[str]:
        """cgroup.procs files the init writes its pid to (v2: one unified folder)."""
        return sorted({str(folder / "cgroup.procs") for folder in self.dirs.values()})

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs_files:
            try:
                found.update(int(p) for p in Path(path).read_text().split())
            except (OSError, ValueError):
                pass
        return found

    def oom_killed(self) -> bool:
        mem = self.dirs.get("memory")
        if mem is None:
            return False
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        counts = _key_values(mem / name)
        return counts.get("oom_kill", 0) > 0

    def peak_memory_mb(self) -> float | None:
        mem = self.dirs.get("memory")
        if mem is None:
            return None
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((mem / name).read_text()) / (1 << 20)
        except (OSError, ValueError):
            return None

    def remove(self) -> bool:
        """Remove the folders (call after every process is gone). True when all went."""
        return all([_rmdir(folder) for folder in self.dirs.values()])


def _key_values(path: Path) -> dict[str, int]:
    try:
        pairs = (line.split() for line in path.read_text().splitlines())
        return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}
    except OSError:
        return {}


def _write_quietly(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError:
        pass
