"""What a run sees of the host: an allow-list built from what it needs, and nothing else.

A run's filesystem is a fresh root that holds only these, each bound read-only at its own path
(the run's own folders writable), so a copy of the held-out text that nobody listed (another
Python's standard library, one vendored inside an SDK, a cache) is simply not there:

- the run's part (added by the backend): its working directory, its data, its out, home and
  tmp folders, and for an evaluation step the training step's out folder;
- the interpreter: its executable, its standard library with the held-out units absent (a
  copy made of hard links, `stdlib_without`), its compiled modules, the site-packages folders
  on its path, its virtual environment, and the shared libraries all of them link (`ldd`);
- the system: the loader's multiarch library folders, a shell and `env`, setpriv (the local
  sandbox drops capabilities with it), and the few files of /etc a process reads;
- the C toolchain where the machine has one (torch.compile builds C++ on the CPU);
- what program.md's `view: {add: [...]}` names.

/proc, /sys, a private /dev and /tmp are the backend's. What is in the view is checked for
the held-out text before a night starts (agent/preflight/held_out_scan.py): the allow-list
keeps out what nobody listed, the scan proves what was listed holds none of it.

Everything here is computed on the host from facts of the machine, cached per process, and
never run with a candidate's input.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox import held_out

# Files of /etc a process reads: users and groups (getpwuid), the loader's cache (where each
# library lies), name service and time zone settings. Nothing else of /etc.
ETC_FILES = ("/etc/ld.so.cache", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
             "/etc/localtime", "/etc/hosts")
# Commands a run's shell line may use without naming them: the shell itself, env (shebangs),
# setpriv (the local sandbox execs the command through it) and the common file and process tools
# of a training script's shell line. None holds text; program.md's view.add names any other.
TOOLS = ("sh", "bash", "env", "setpriv", "cat", "ls", "mkdir", "rm", "cp", "mv", "touch", "tee",
         "head", "tail", "date", "sleep", "nproc", "uname", "timeout", "true", "false")
# The C toolchain torch.compile's CPU backend calls (and the headers and libraries it reads).
TOOLCHAIN = ("cc", "c++", "gcc", "g++", "as", "ld")
TOOLCHAIN_TREES = ("/usr/lib/gcc", "/usr/libexec/gcc", "/usr/include")
SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class Bind:
    """A host path (file or folder, real) the run sees read-only at `target` (its own path,
    or where a stand-in copy goes, as the standard library without the held-out units)."""

    source: str
    target: str
    why: str


@dataclass(frozen=True)
class View:
    """The host's part of what a run sees: binds, parents before children, and the host's
    symlinks on the way to them (`/lib -> usr/lib`) as (path, link text)."""

    binds: tuple[Bind, ...]
    links: tuple[tuple[str, str], ...]

    def sources(self) -> list[str]:
        return [bind.source for bind in self.binds]

    def describe(self) -> list[tuple[str, str, int]]:
        """(target, why, bytes) for each bind: what `nightshift check` prints."""
        return [(bind.target, bind.why, _size(bind.source)) for bind in self.binds]


class ViewError(RuntimeError):
    """The view cannot be built here (the message says why and the fix)."""


def host_view(python: str, held_out_units: tuple[str, ...] = (), add: tuple[str, ...] = ()) -> View:
    """The view of a run whose `python` is this interpreter (see the module docstring)."""
    return _host_view(os.path.abspath(python), tuple(sorted(held_out_units)), tuple(add))


@functools.cache
def _host_view(python: str, units: tuple[str, ...], add: tuple[str, ...]) -> View:
    facts = interpreter(python)
    builder = _Builder()
    builder.add(python, "the interpreter")
    builder.add(facts["executable"], "the interpreter")
    stdlib = facts["stdlib"]
    builder.bind(str(stdlib_without(stdlib, units)), stdlib,
                 "its standard library" + (f" without {', '.join(units)}" if units else ""))
    for folder in facts["path"]:
        if folder != stdlib and os.path.isdir(folder):
            builder.add(folder, "on its import path")
    for prefix in {facts["prefix"], facts["base_prefix"]}:
        builder.add(os.path.join(prefix, "bin"), "its environment's commands")
    if facts["prefix"] != facts["base_prefix"]:
        builder.add(os.path.join(facts["prefix"], "pyvenv.cfg"), "its virtual environment")
    builder.add("/bin/sh", "the shell that runs the command")   # and merged /usr's /bin link
    for tool in TOOLS:
        found = shutil.which(tool, path=SEARCH_PATH)
        if found:
            builder.add(found, "a command every run may use")
    for path in ETC_FILES:
        if os.path.lexists(path):
            builder.add(path, "what a process reads of /etc")
    for folder in multiarch_library_dirs():
        builder.add(folder, "the system's shared libraries")
    compiler = [found for tool in TOOLCHAIN if (found := shutil.which(tool, path=SEARCH_PATH))]
    if compiler:
        for found in compiler:
            builder.add(found, "the C toolchain (torch.compile)")
        for tree in TOOLCHAIN_TREES + (facts["include"],):
            if os.path.isdir(tree):
                builder.add(tree, "the C toolchain (torch.compile)")
    for path in add:
        if not os.path.exists(path):
            raise ViewError(f"view.add names {path}, which does not exist on this machine: "
                            f"fix the path in program.md, or remove it")
        builder.add(path, "program.md's view.add")
    for library in linked_libraries(builder.elf_files()):
        builder.add(library, "a shared library the above link")
    return builder.view()


class _Builder:
    """Collects binds: each path's symlinks on the way are recorded as links, its real path
    bound once (a path under a folder already bound needs no bind of its own)."""

    def __init__(self) -> None:
        self._binds: dict[str, Bind] = {}
        self._links: dict[str, str] = {}

    def add(self, path: str, why: str) -> None:
        real = self._follow(os.path.abspath(path))
        if real is not None:
            self.bind(real, real, why)

    def bind(self, source: str, target: str, why: str) -> None:
        if target not in self._binds:
            self._binds[target] = Bind(source, target, why)

    def _follow(self, path: str, depth: int = 0) -> str | None:
        """The real path of `path`, recording each symlink met on the way (None: missing)."""
        if depth > 40:
            return None
        parts = Path(path).parts
        current = "/"
        for index, part in enumerate(parts[1:], start=1):
            candidate = os.path.join(current, part)
            if os.path.islink(candidate):
                text = os.readlink(candidate)
                self._links[candidate] = text
                rest = os.path.join(*parts[index + 1:]) if index + 1 < len(parts) else ""
                joined = os.path.normpath(os.path.join(os.path.dirname(candidate), text, rest))
                return self._follow(joined, depth + 1)
            current = candidate
        return current if os.path.exists(current) else None

    def elf_files(self) -> list[str]:
        """Every ELF file (executable or shared object) under what is bound so far."""
        found = []
        for bind in self._binds.values():
            if os.path.isfile(bind.source):
                if _is_elf(bind.source):
                    found.append(bind.source)
                continue
            if bind.why.startswith("the system") or bind.why.startswith("the C toolchain"):
                continue   # the libraries themselves: the loader resolves within them
            for folder, _dirs, names in os.walk(bind.source):
                for name in names:
                    if ".so" in name or name.startswith("python"):
                        path = os.path.join(folder, name)
                        if os.path.isfile(path) and not os.path.islink(path) and _is_elf(path):
                            found.append(path)
        return found

    def view(self) -> View:
        binds = sorted(self._binds.values(), key=lambda b: (b.target.count("/"), b.target))
        kept: list[Bind] = []
        for bind in binds:   # a path inside a folder already bound from the same place is there
            if any(bind.target.startswith(k.target.rstrip("/") + "/") and k.source == k.target
                   and bind.source == bind.target for k in kept):
                continue
            kept.append(bind)
        links = tuple(sorted((path, text) for path, text in self._links.items()
                             if not any(path.startswith(k.target.rstrip("/") + "/") for k in kept)))
        return View(tuple(kept), links)


def held_out_covers(seen: View | None, units: tuple[str, ...], paths: tuple[str, ...]) -> list[held_out.Cover]:
    """Tripwires for the held-out sources a view holds: the units' places in its interpreter's
    standard library (empty there: `stdlib_without`), and the copies found at preparation
    that lie in what it binds. Nothing else of the host is in the view to cover."""
    if seen is None or not (units or paths):
        return []
    stdlib = next((b.target for b in seen.binds if b.why.startswith("its standard library")), None)
    layout = held_out.listing(list(units), [stdlib]) if stdlib and units else {}

    def inside(path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == b.source or real.startswith(b.source.rstrip("/") + "/") for b in seen.binds)

    return held_out.covers(list(units), [p for p in paths if inside(p)], layout)


# ---- the interpreter ---------------------------------------------------------------------------

_FACTS = """
import json, site, sys, sysconfig
paths = sysconfig.get_paths()
print(json.dumps({"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
                  "stdlib": paths["stdlib"], "include": paths["include"], "path": [p for p in sys.path if p],
                  "usersite": site.getusersitepackages() if site.ENABLE_USER_SITE else None}))
"""


@functools.cache
def interpreter(python: str) -> dict:
    """Where `python` keeps its standard library, packages and environment (asked of it, with
    no user site and no environment variables, as a run starts it)."""
    try:
        done = subprocess.run([python, "-I", "-c", _FACTS], capture_output=True, text=True, timeout=60)
        facts = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as error:
        raise ViewError(f"cannot ask {python} where its libraries are ({error}); is it a Python "
                        f"interpreter?") from None
    real = lambda p: os.path.realpath(p) if p else p   # noqa: E731
    usersite = real(facts.get("usersite"))
    return {"executable": real(facts["executable"]), "prefix": real(facts["prefix"]),
            "base_prefix": real(facts["base_prefix"]), "stdlib": real(facts["stdlib"]),
            "include": real(facts["include"]),
            "path": [real(p) for p in facts["path"] if os.path.isabs(p) and real(p) != usersite]}


# ---- the standard library without the held-out units ------------------------------------------

def cache_root() -> Path:
    """Where the views' standard-library copies live (NIGHTSHIFT_VIEW_CACHE, else ~/.cache)."""
    return Path(os.environ.get("NIGHTSHIFT_VIEW_CACHE")
                or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nightshift" / "views")


def stdlib_without(stdlib: str, units: tuple[str, ...]) -> str:
    """A copy of `stdlib` made of hard links (a plain copy across file systems) holding every
    file but the held-out units and their bytecode caches, each of which is an empty stand-in
    (where the tripwire's watched file is laid); its site-packages an empty folder (bound
    from the real one). Made once per standard library and set of units, then reused; with
    no units, the standard library itself."""
    if not units:
        return stdlib
    stat = os.stat(stdlib)
    key = hashlib.sha256(json.dumps([stdlib, sorted(units), stat.st_mtime_ns, sys.version]).encode()).hexdigest()[:16]
    dest = cache_root() / f"stdlib-{key}"
    if (dest / ".nightshift-complete").exists():
        return str(dest)
    absent = set()
    for unit, _files in held_out.listing(list(units), [stdlib]).get(stdlib, {}).items():
        absent.add(unit)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".stdlib-{key}-", dir=dest.parent))
    link = os.link
    for folder, dirs, names in os.walk(stdlib):
        rel = os.path.relpath(folder, stdlib)
        here = staging if rel == "." else staging / rel
        here.mkdir(exist_ok=True)
        for name in list(dirs):
            unit = os.path.normpath(os.path.join(rel, name))
            if unit in absent or unit in ("site-packages", "dist-packages"):
                dirs.remove(name)
                (here / name).mkdir()        # an empty stand-in (site-packages: bound over it)
            elif os.path.islink(os.path.join(folder, name)):
                dirs.remove(name)
                os.symlink(os.readlink(os.path.join(folder, name)), here / name)
        for name in names:
            source, target = os.path.join(folder, name), here / name
            if os.path.normpath(os.path.join(rel, name)) in absent:
                target.touch(mode=0o444)
            elif os.path.islink(source):
                os.symlink(os.readlink(source), target)
            else:
                try:
                    link(source, target)
                except OSError:               # another file system, or links refused: copy
                    link = lambda s, t: shutil.copy2(s, t)   # noqa: E731
                    link(source, target)
    (staging / ".nightshift-complete").write_text(stdlib)
    for folder, _dirs, _names in os.walk(staging):
        os.chmod(folder, 0o755)
    try:
        os.rename(staging, dest)
    except OSError:                           # made meanwhile by another harness
        shutil.rmtree(staging, ignore_errors=True)
    _sweep_old_copies(dest)
    return str(dest)


def _sweep_old_copies(keep: Path, older_than_s: float = 86_400) -> None:
    """Copies of a standard library that has since changed, unused for a day: removed."""
    for other in keep.parent.glob("stdlib-*"):
        try:
            if other != keep and time.time() - other.stat().st_mtime > older_than_s:
                shutil.rmtree(other, ignore_errors=True)
        except OSError:
            pass


# ---- shared libraries ---------------------------------------------------------------------------

def multiarch_library_dirs() -> list[str]:
    """The loader's multiarch folders (`/usr/lib/x86_64-linux-gnu`): shared libraries, where
    glibc, libstdc++ and the GPU driver's libraries lie. Not /usr/lib itself, which holds other
    Pythons and vendored SDKs."""
    found = []
    for conf in ["/etc/ld.so.conf", *sorted(glob.glob("/etc/ld.so.conf.d/*.conf"))]:
        try:
            lines = Path(conf).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line.startswith("/") and "-linux-" in os.path.basename(line.rstrip("/")) and os.path.isdir(line):
                real = os.path.realpath(line)
                if real not in found:
                    found.append(real)
    return found


def linked_libraries(elf_files: list[str]) -> list[str]:
    """The shared libraries (and the loader) that `elf_files` link, as `ldd` resolves them;
    asked once per file version (kept in the view cache: every command of every night asks for
    the same files, and ldd takes a second or two for a torch environment)."""
    found: set[str] = set()
    _load_ldd_cache()
    missing = [path for path in elf_files if _file_key(path) not in _LDD]
    for start in range(0, len(missing), 200):
        batch = missing[start:start + 200]
        try:
            done = subprocess.run(["ldd", *batch], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            for path in batch:
                _LDD[_file_key(path)] = ()
            continue
        _parse_ldd(batch, done.stdout)
    if missing:
        _save_ldd_cache()
    for path in elf_files:
        found.update(_LDD.get(_file_key(path), ()))
    return sorted(found)


_LDD: dict[tuple, tuple[str, ...]] = {}


def _ldd_cache_file() -> Path:
    return cache_root() / "ldd.json"


def _load_ldd_cache() -> None:
    if _LDD:
        return
    try:
        for path, size, mtime, libraries in json.loads(_ldd_cache_file().read_text()):
            _LDD[(path, size, mtime)] = tuple(libraries)
    except (OSError, ValueError, TypeError):
        pass


def _save_ldd_cache() -> None:
    """Written whole to a temporary file and renamed: harnesses side by side never see half."""
    rows = [[*key, list(libraries)] for key, libraries in _LDD.items() if len(key) == 3]
    try:
        cache_root().mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_root(), prefix=".ldd-")
        with os.fdopen(fd, "w") as fh:
            json.dump(rows, fh)
        os.replace(tmp, _ldd_cache_file())
    except OSError:
        pass


def _parse_ldd(batch: list[str], output: str) -> None:
    """ldd prints `path:` before each file's lines when given several files."""
    current = batch[0] if len(batch) == 1 else None
    libraries: dict[str, list[str]] = {path: [] for path in batch}
    for line in output.splitlines():
        if not line.startswith("\t") and line.endswith(":") and line[:-1] in libraries:
            current = line[:-1]
            continue
        if current is None:
            continue
        words = line.split()
        if "=>" in words:
            after = words[words.index("=>") + 1:]
            if after and after[0].startswith("/"):
                libraries[current].append(after[0])
        elif words and words[0].startswith("/"):
            libraries[current].append(words[0])   # the loader itself
    for path, found in libraries.items():
        _LDD[_file_key(path)] = tuple(found)


def _file_key(path: str) -> tuple:
    try:
        stat = os.stat(path)
    except OSError:
        return (path,)
    return (path, stat.st_size, stat.st_mtime_ns)


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for folder, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total
