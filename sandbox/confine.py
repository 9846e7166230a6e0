"""PID 1 of a local sandbox: confine the filesystem, drop privileges, run, reap, exit.

Run by `sandbox.local.LocalRunner` as a script (standard library only, no package
imports) inside fresh PID + mount (+ network) namespaces made by `unshare`:

    python confine.py [--cgroup-procs FILE]... [--rlimit NAME=N]... [--writable DIR]...
                      [--read-only-root] [--overlay DIR UPPER WORK] [--bind-ro SRC DEST]...
                      [--cover FILE TARGET]... [--hide DIR [--expose PATH]...] [--chdir DIR] [--setpriv PATH] [--cpus 0,1] [--pdeathsig] -- CMD...

It first joins the run's cgroups (so all it starts is counted and limited), pins itself to
the `--cpus` cores (a worker's share, inherited by everything it starts), then confines
the filesystem, then forks the command with the rlimits (RLIMIT_<NAME>, soft = hard = N)
set in the child only, in its own process group. With `--pdeathsig`, it and the command
get SIGKILL when their parent dies, so a killed harness leaves nothing running even where
no PID namespace is available.

With `--hide DIR`, DIR (the harness's results folder: other runs' models and outputs; the
data root: earlier preparations of the held-out bytes) is covered by an empty tmpfs first,
and each `--expose PATH` after it (this run's own folder, its snapshot, its data) is bound
back at its place, so the run sees only its own part of DIR. `--hide` may be given again.

With `--read-only-root`, every mount is remounted read-only except the `--writable`
folders (bind-mounted onto themselves first) and a fresh private tmpfs on /dev/shm, so
the run can write only its out folder, home and tmp; /dev becomes a private one holding the
usual character devices and the accelerators, no disk (`private_dev`). With `--overlay DIR UPPER WORK`, DIR
(the snapshot) is first covered by an overlayfs whose writes land in UPPER, and all its
folders are made writable in that view (tracked files keep their modes); each
`--bind-ro SRC DEST` then mounts SRC read-only at DEST inside it. Each `--cover WIRE TARGET`
binds WIRE over the existing TARGET (a file over a file, a folder over a folder), read-only:
a tripwire over what the run must not read (sandbox.tripwire). `--chdir` enters the
working directory after the mounts, so the command sees the overlay. With `--setpriv`,
the command runs with no capabilities and no_new_privs, so even as root it cannot remount
or undo this.

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
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1
_PROC_KNOBS = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
_FLAG_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}


def _mount(libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None,
           flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    if libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _mountpoints() -> list[tuple[str, int]]:
    """(mount point, flags to keep) for every mount, parents before children."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")  # \040 for spaces
            keep = sum(_FLAG_OPTIONS.get(opt, 0) for opt in fields[5].split(","))
            found.append((point, keep))
    return found


def hide(libc: ctypes.CDLL, folder: str, expose: list[str]) -> None:
    """Cover `folder` with an empty tmpfs, then bind each of `expose` (paths under it) back
    at its place. The exposed folders are opened before the cover, and bound from those
    descriptors, since once covered their paths lead into the empty tmpfs."""
    held = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in expose]
    _mount(libc, "tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for path, fd in held:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
        _mount(libc, f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)


# The devices a run keeps in its private /dev: the character devices every program expects and
# the accelerators. No disks (a raw read of the disk is every file's bytes by another path),
# no memory, no kernel log.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts")
ACCELERATORS = ("nvidia*", "dri", "kfd", "accel*")
DEVICE_LINKS = ("fd", "stdin", "stdout", "stderr")


def private_dev(libc: ctypes.CDLL) -> None:
    """Cover /dev with a tmpfs holding only DEVICES and ACCELERATORS (bound from the real
    ones) and its usual links."""
    names = [name for name in DEVICES if os.path.lexists(f"/dev/{name}")]
    names += sorted({os.path.basename(p) for pattern in ACCELERATORS for p in glob.glob(f"/dev/{pattern}")})
    links = {name: os.readlink(f"/dev/{name}") for name in DEVICE_LINKS if os.path.islink(f"/dev/{name}")}
    hide(libc, "/dev", [f"/dev/{name}" for name in names])
    for name, target in links.items():
        os.symlink(target, f"/dev/{name}")
    os.makedirs("/dev/shm", exist_ok=True)


def make_read_only(writable: list[str], overlay: tuple[str, str, str] | None = None,
                   binds: list[tuple[str, str]] | None = None,
                   covers: list[tuple[str, str]] | None = None,
                   hidden: list[tuple[str, list[str]]] = ()) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing we do leaks to the host
    for folder, expose in hidden:
        hide(libc, folder, expose)
    for folder in writable:
        _mount(libc, folder, folder, None, MS_BIND | MS_REC)
    keep_writable = {os.path.realpath(folder) for folder in writable}
    if overlay:
        lower, upper, work = overlay
        _mount(libc, "overlay", lower, "overlay", 0,
               f"lowerdir={lower},upperdir={upper},workdir={work}")
        for current, dirs, _ in os.walk(lower):   # folders only: a copy-up of metadata
            os.chmod(current, os.lstat(current).st_mode | 0o200)
        keep_writable.add(os.path.realpath(lower))
    for source, dest in binds or []:
        os.makedirs(dest, exist_ok=True)
        _mount(libc, source, dest, None, MS_BIND | MS_REC)   # read-only in the loop below
    for wire, target in covers or []:
        _mount(libc, wire, target, None, MS_BIND)   # a file over a file, a folder over a folder; read-only below
    # /proc is this namespace's own and CUDA fails (error 304) when it is read-only, so
    # only its host-wide knobs become read-only, as Docker does: uid 0 without
    # capabilities may still write /proc/sys files it owns.
    for knob in _PROC_KNOBS:
        if os.path.exists(knob):
            _mount(libc, knob, knob, None, MS_BIND | MS_REC)
    private_dev(libc)
    covered = ["/dev", *(folder.rstrip("/") for folder, _ in hidden)]
    for point, keep in _mountpoints():
        if point in keep_writable or point == "/proc":
            continue
        try:
            _mount(libc, None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
        except OSError as exc:
            if point == "/":
                raise
            if any(point.startswith(folder + "/") for folder in covered):
                continue   # a mount of the real /dev or of a hidden folder: out of sight now
            print(f"nightshift sandbox: warning: {point} stays writable ({exc})", file=sys.stderr)
    # A private /dev/shm (torch's DataLoader needs one) that vanishes with the namespace.
    _mount(libc, "tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (PR_SET_PDEATHSIG), and die now if the
    parent is already gone (it may have died before the call)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(137)


def main(argv: list[str]) -> int:
    writable: list[str] = []
    cgroup_procs: list[str] = []
    rlimits: list[tuple[int, int]] = []
    read_only_root = False
    setpriv = ""
    overlay: tuple[str, str, str] | None = None
    binds: list[tuple[str, str]] = []
    covers: list[tuple[str, str]] = []
    hides: list[tuple[str, list[str]]] = []
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
        elif flag == "--writable":
            writable.append(argv.pop(0))
        elif flag == "--read-only-root":
            read_only_root = True
        elif flag == "--setpriv":
            setpriv = argv.pop(0)
        elif flag == "--overlay":
            overlay = (argv.pop(0), argv.pop(0), argv.pop(0))
        elif flag == "--bind-ro":
            binds.append((argv.pop(0), argv.pop(0)))
        elif flag == "--hide":
            hides.append((argv.pop(0), []))
        elif flag == "--expose":
            if not hides:
                raise SystemExit("confine.py: --expose needs a --hide before it")
            hides[-1][1].append(argv.pop(0))
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
        make_read_only(writable, overlay, binds, covers, hides)
    elif overlay or binds or covers or hides:
        raise SystemExit("confine.py: --overlay, --bind-ro, --cover and --hide need --read-only-root")
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
