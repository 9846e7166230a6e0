"""PID 1 of a local sandbox: confine the filesystem, drop privileges, run, reap, exit.

Run by `sandbox.local.LocalRunner` as a script (standard library only, no package
imports) inside fresh PID + mount (+ network) namespaces made by `unshare`:

    python confine.py [--cgroup-procs FILE]... [--rlimit NAME=N]...
                      [--read-only-root --root DIR [--bind SRC DEST]... [--bind-rw SRC DEST]...
                       [--link PATH TEXT]... [--overlay DIR UPPER WORK] [--bind-ro SRC DEST]...
                       [--cover FILE TARGET]...] [--chdir DIR] [--setpriv PATH] [--cpus 0,1]
                      [--pdeathsig] -- CMD...

It first joins the run's cgroups (so all it starts is counted and limited), pins itself to
the `--cpus` cores (a worker's share, inherited by everything it starts), then confines
the filesystem, then forks the command with the rlimits (RLIMIT_<NAME>, soft = hard = N)
set in the child only, in its own process group. With `--pdeathsig`, it and the command
get SIGKILL when their parent dies, so a killed harness leaves nothing running even where
no PID namespace is available.

With `--read-only-root --root DIR`, the run gets a new root filesystem built in DIR (a fresh
tmpfs) from an allow-list, and nothing else of the host: each `--bind SRC DEST` mounts host
path SRC read-only at DEST, each `--bind-rw SRC DEST` writable (the run's out, home and tmp),
each `--link PATH TEXT` is a symlink as the host has it (`/lib -> usr/lib`), each `--empty DIR`
an empty folder over what a bind before it brought (in the order given); then a private
/proc, a read-only /sys, a private /dev holding the usual character devices and the
accelerators and no disk (`private_dev`), a private /tmp and /dev/shm; the new root itself is
read-only. With `--overlay DIR UPPER WORK`, DIR (the snapshot) is covered by an overlayfs whose
writes land in UPPER, all its folders writable in that view (tracked files keep their modes);
each `--bind-ro SRC DEST` then mounts SRC read-only at DEST inside it. Each `--cover WIRE
TARGET` binds WIRE over TARGET (a file over a file, a folder over a folder), read-only: a
tripwire over what the run must not read (sandbox.tripwire). The process then moves into the
new root (the switch_root way: the root mount moved over /, then chroot), so no path leads
back to the host's. `--chdir` enters the working directory after that. With `--setpriv`,
the command runs with no capabilities and no_new_privs, so even as root it cannot mount,
chroot or undo this.

Without a PID namespace (a machine without unshare) it still sets limits and reaps, and
forwards signals to the command's process group only.

As PID 1 it must stay alive while the command runs: it forwards SIGTERM/SIGINT/SIGHUP to
every process of the namespace (kill(-1)), reaps orphans, and exits with the command's
status (128+N when killed by signal N). When it exits the kernel kills whatever is left
in the namespace, so nothing the command started (setsid or not) survives it.
"""
from __future__ import annotations

import ctypes
import glob
import os
import resource
import signal
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
# statvfs's flags of a mount, and the mount flags a read-only remount of a bind must keep (in a
# user namespace the kernel refuses to drop them).
_KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
               (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (4096, MS_RELATIME))
PR_SET_PDEATHSIG = 1
_PROC_KNOBS = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")


def _mount(libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None,
           flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    if libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _kept_flags(path: str) -> int:
    found = os.statvfs(path).f_flag
    return sum(flag for st, flag in _KEPT_FLAGS if found & st)


def _mount_point(source: str, target: str) -> None:
    """An empty folder or file at `target` to mount `source` on (parents made as needed)."""
    if os.path.lexists(target):
        return
    if os.path.isdir(source):
        os.makedirs(target)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()


def bind(libc: ctypes.CDLL, source: str, target: str, writable: bool = False) -> None:
    """Mount host path `source` at `target`, read-only unless `writable` (not recursive: what
    is mounted below `source` on the host stays out of sight)."""
    _mount_point(source, target)
    _mount(libc, source, target, None, MS_BIND)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | _kept_flags(source)
    _mount(libc, None, target, None, flags | (0 if writable else MS_RDONLY))


# The devices a run keeps in its private /dev: the character devices every program expects and
# the accelerators. No disks (a raw read of the disk is every file's bytes by another path),
# no memory, no kernel log.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts")
ACCELERATORS = ("nvidia*", "dri", "kfd", "accel*")
DEVICE_LINKS = ("fd", "stdin", "stdout", "stderr")


def private_dev(libc: ctypes.CDLL, dev: str) -> None:
    """At `dev`, a tmpfs holding only DEVICES and ACCELERATORS (bound from the host's /dev),
    their usual links and a private /dev/shm (torch's DataLoader needs one)."""
    names = [name for name in DEVICES if os.path.lexists(f"/dev/{name}")]
    names += sorted({os.path.basename(p) for pattern in ACCELERATORS for p in glob.glob(f"/dev/{pattern}")})
    os.makedirs(dev, exist_ok=True)
    _mount(libc, "tmpfs", dev, "tmpfs", MS_NOSUID, "mode=0755")
    for name in names:
        source = f"/dev/{name}"
        _mount_point(source, f"{dev}/{name}")
        _mount(libc, source, f"{dev}/{name}", None, MS_BIND | MS_REC)
    for name in DEVICE_LINKS:
        if os.path.islink(f"/dev/{name}"):
            os.symlink(os.readlink(f"/dev/{name}"), f"{dev}/{name}")
    os.makedirs(f"{dev}/shm")
    _mount(libc, "tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")


def make_root(root: str, binds: list[tuple[str, str, bool]], links: list[tuple[str, str]] = (),
              overlay: tuple[str, str, str] | None = None, inside: list[tuple[str, str]] = (),
              covers: list[tuple[str, str]] = ()) -> None:
    """Build the run's root in `root` from the allow-list and move into it (module docstring)."""
    libc = ctypes.CDLL(None, use_errno=True)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing we do leaks to the host
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    os.makedirs(root + "/tmp")   # first: a run's own folders may lie under the host's /tmp
    _mount(libc, "tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for path, text in links:
        place = root + path
        os.makedirs(os.path.dirname(place), exist_ok=True)
        if not os.path.lexists(place):
            os.symlink(text, place)
    for source, target, writable in binds:
        if source:
            bind(libc, source, root + target, writable)
        else:   # an empty folder over what a bind above brought (the results folder in a data folder)
            os.makedirs(root + target, exist_ok=True)
            _mount(libc, "tmpfs", root + target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    if overlay:
        lower, upper, work = overlay
        os.makedirs(root + lower, exist_ok=True)
        _mount(libc, "overlay", root + lower, "overlay", 0,
               f"lowerdir={lower},upperdir={upper},workdir={work}")
        for current, dirs, _ in os.walk(root + lower):   # folders only: a copy-up of metadata
            os.chmod(current, os.lstat(current).st_mode | 0o200)
    for source, dest in inside:
        bind(libc, source, root + dest)
    for wire, target in covers:
        bind(libc, wire, root + target)
    # /proc is this namespace's own and CUDA fails (error 304) when it is read-only, so only
    # its host-wide knobs become read-only, as Docker does.
    os.makedirs(root + "/proc", exist_ok=True)
    _mount(libc, "proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for knob in _PROC_KNOBS:
        if os.path.exists(root + knob):
            _mount(libc, root + knob, root + knob, None, MS_BIND | MS_REC)
            _mount(libc, None, root + knob, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _kept_flags(root + knob))
    bind(libc, "/sys", root + "/sys")
    private_dev(libc, root + "/dev")
    _mount(libc, None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(root)
    _mount(libc, root, "/", None, MS_MOVE)
    os.chroot(".")
    os.chdir("/")


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (PR_SET_PDEATHSIG), and die now if the
    parent is already gone (it may have died before the call)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(137)


def main(argv: list[str]) -> int:
    root = ""
    binds: list[tuple[str, str, bool]] = []
    links: list[tuple[str, str]] = []
    cgroup_procs: list[str] = []
    rlimits: list[tuple[int, int]] = []
    read_only_root = False
    setpriv = ""
    overlay: tuple[str, str, str] | None = None
    inside: list[tuple[str, str]] = []
    covers: list[tuple[str, str]] = []
    chdir = ""
    cpus: set[int] = set()
    pdeathsig = False
    while argv and argv[0] != "--":
        flag = argv.pop(0)
        if flag == "--cgroup-procs":
            cgroup_procs.append(argv.pop(0))
        elif flag == "--rlimit":
            name, value = argv.pop(0).split("=")
            rlimits.append((getattr(resource, f"RLIMIT_{name}"), int(value)))
        elif flag == "--root":
            root = argv.pop(0)
        elif flag in ("--bind", "--bind-rw"):
            binds.append((argv.pop(0), argv.pop(0), flag == "--bind-rw"))
        elif flag == "--empty":
            binds.append(("", argv.pop(0), False))
        elif flag == "--link":
            links.append((argv.pop(0), argv.pop(0)))
        elif flag == "--read-only-root":
            read_only_root = True
        elif flag == "--setpriv":
            setpriv = argv.pop(0)
        elif flag == "--overlay":
            overlay = (argv.pop(0), argv.pop(0), argv.pop(0))
        elif flag == "--bind-ro":
            inside.append((argv.pop(0), argv.pop(0)))
        elif flag == "--cover":
            covers.append((argv.pop(0), argv.pop(0)))
        elif flag == "--chdir":
            chdir = argv.pop(0)
        elif flag == "--cpus":
            cpus = {int(c) for c in argv.pop(0).split(",")}
        elif flag == "--pdeathsig":
            pdeathsig = True
        else:
            raise SystemExit(f"confine.py: unknown flag {flag!r}")
    command = argv[1:]
    parent = os.getppid()
    if pdeathsig:
        _die_with_parent(parent)
    if cpus:
        os.sched_setaffinity(0, cpus)
    for procs in cgroup_procs:
        with open(procs, "w") as fh:
            fh.write(str(os.getpid()))
    if read_only_root:
        if not root:
            raise SystemExit("confine.py: --read-only-root needs --root DIR (where the new root is built)")
        make_root(root, binds, links, overlay, inside, covers)
    elif overlay or binds or inside or covers or root:
        raise SystemExit("confine.py: --root, --bind, --overlay, --bind-ro and --cover need --read-only-root")
    if chdir:
        os.chdir(chdir)
    if setpriv:
        command = [setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
                   "--no-new-privs", "--", *command]

    child = 0
    is_init = os.getpid() == 1  # kill(-1) outside a PID namespace would hit the whole machine

    def forward(signum: int, _frame: object) -> None:
        try:
            if is_init:
                os.kill(-1, signum)  # every other process in this namespace
            elif child:
                os.killpg(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # before fork: no gap
        signal.signal(sig, forward)
    child = os.fork()
    if child == 0:
        os.setpgid(0, 0)
        if pdeathsig:
            _die_with_parent(os.getppid())
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        try:
            for which, value in rlimits:
                hard = resource.getrlimit(which)[1]
                if hard != resource.RLIM_INFINITY and not is_init:  # cannot raise it unprivileged
                    value = min(value, hard)
                resource.setrlimit(which, (value, value))
            os.execvp(command[0], command)
        except (OSError, ValueError) as exc:
            print(f"nightshift sandbox: cannot run {command[0]}: {exc}", file=sys.stderr)
            os._exit(127)

    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if pid == child:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
