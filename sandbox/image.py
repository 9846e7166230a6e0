"""The sandbox image: how it is built, and what a run of it needs mounted.

Three ways to get an image, recorded in its `org.nightshift.mode` label:

- `dockerfile`: `docker build` from `sandbox/Dockerfile` (a CUDA PyTorch base with the
  training dependencies inside). The path for real GPU boxes; needs a registry to pull
  the base image.
- `host`: for machines with no registry (CI, air-gapped boxes). A tiny image made with
  `docker import` from an in-memory tarball: empty directories, `bin -> usr/bin` style
  links and an /etc/passwd with the non-root sandbox user. At run time the run's view
  (sandbox.view: the interpreter and its packages with the held-out units absent, the
  libraries they link, a shell) is bind-mounted read-only at the same paths, so the
  interpreter's RUNPATH and any absolute paths in site-packages keep working. The run sees
  the host's Python and torch and nothing else of the host: not /usr whole, /etc, /root or /home.
- `rootfs`: `docker import` of a root filesystem you prepared (a directory or tarball,
  e.g. from debootstrap plus pip on a machine with mirrors). Self-contained like
  `dockerfile`, but built offline.

CLI: `python -m sandbox.image build [--tag nightshift:latest] [--mode host|rootfs|dockerfile]`.
"""
from __future__ import annotations

import argparse
import enum
import io
import json
import os
import stat
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.view import View, host_view

DEFAULT_TAG = "nightshift:latest"


class ImageMode(str, enum.Enum):
    """How the image was built (its `org.nightshift.mode` label; see the module docstring)."""

    HOST = "host"
    ROOTFS = "rootfs"
    DOCKERFILE = "dockerfile"

    def __str__(self) -> str:
        return self.value


MODES = tuple(mode.value for mode in ImageMode)
LABEL_MODE = "org.nightshift.mode"
LABEL_PREFIXES = "org.nightshift.python-prefixes"   # JSON list, host mode only
LABEL_PYTHON = "org.nightshift.python"              # the interpreter it carries, host mode only
SANDBOX_UID = 1000            # the image's non-root user; runs never use uid 0
SANDBOX_USER = "nightshift"
DOCKERFILE = Path(__file__).with_name("Dockerfile")

# What the host-mode image holds itself, so a run's view (sandbox.view) mounts none of it: the
# merged-/usr links and its own users (the sandbox user, uid 1000, is the image's).
IMAGE_LINKS = ("/bin", "/lib", "/lib64")
IMAGE_FILES = ("/etc/passwd", "/etc/group")


@dataclass(frozen=True)
class Mount:
    """One read-only bind mount a run of the image needs, host path -> container path."""

    source: str
    target: str

    def as_dict(self) -> dict[str, str]:
        return {"source": self.source, "target": self.target, "mode": "ro"}


class ImageError(RuntimeError):
    """The image cannot be built or used as asked. The message says the fix."""


# -- what a run needs ------------------------------------------------------------------------

def image_mode(labels: dict[str, str] | None) -> ImageMode:
    """The image's build mode from its labels; images we did not build (or a label we do not
    know) count as `dockerfile` (self-contained: nothing from the host is mounted)."""
    try:
        return ImageMode((labels or {}).get(LABEL_MODE, ImageMode.DOCKERFILE))
    except ValueError:
        return ImageMode.DOCKERFILE


def runtime_mounts(labels: dict[str, str] | None, python: list[str] | None = None,
                   seen: View | None = None) -> list[Mount]:
    """The host paths a run of an image with these labels must mount read-only.

    Empty for self-contained images. For host mode: the run's view (`seen`, default this
    interpreter's: sandbox.view), nothing else of the host, once the Python prefixes recorded at
    build time are checked to exist and to be readable by the sandbox's non-root user (a
    prefix under a 0700 home directory is fine: a bind mount does not need the host's parents
    to be traversable, only what it mounts).

    The recorded prefixes must be those of `python` (default: this interpreter's), the one
    whose bin/ the run's PATH names: an image built from another virtualenv would mount
    that environment while PATH points at this one, and the run would fall through to the
    system's `python` without its packages. That is refused, saying how to rebuild."""
    if image_mode(labels) != ImageMode.HOST:
        return []
    labels = labels or {}
    prefixes = json.loads(labels.get(LABEL_PREFIXES, "[]"))
    for prefix in prefixes:
        if not os.path.isdir(prefix):
            raise ImageError(
                f"the host-mode image was built for the Python at {prefix}, which is gone; "
                f"rebuild it: python -m sandbox.image build --mode host")
    current = python if python is not None else python_prefixes()
    if prefixes and sorted(prefixes) != sorted(current):
        # Name both environments by their prefixes: a virtualenv's interpreter resolves to its
        # base's, so two environments can share one executable path.
        built = _environment(labels.get(LABEL_PYTHON), prefixes)
        running = _environment(sys.executable if python is None else None, current)
        raise ImageError(
            f"the host-mode image carries the Python of {built}, but this harness runs {running}: "
            f"its runs would not find this environment's packages. Rebuild the image from this "
            f"environment (python -m sandbox.image build --mode host), or use sandbox: local")
    for prefix in prefixes:
        _check_world_readable(Path(prefix))
    return view_mounts(seen if seen is not None else host_view(sys.executable))


def view_mounts(seen: View) -> list[Mount]:
    """A view as bind mounts: each bind, and each symlink on the way the image does not have
    as the file or folder it leads to (a container's root cannot take a link by a mount)."""
    mounts = [Mount(bind.source, bind.target) for bind in seen.binds if bind.target not in IMAGE_FILES]
    for path, _text in seen.links:
        real = os.path.realpath(path)
        if path not in IMAGE_LINKS and os.path.exists(real):
            mounts.append(Mount(real, path))
    return mounts


def _environment(executable: str | None, prefixes: list[str]) -> str:
    """`/venv/bin/python (environment /venv + /usr)`, or the prefixes alone."""
    where = " + ".join(prefixes)
    return f"{executable} (environment {where})" if executable else f"the environment {where}"


def python_prefixes() -> list[str]:
    """This interpreter's prefixes (a virtualenv has two: its own and its base)."""
    found: list[str] = []
    for prefix in (sys.prefix, sys.base_prefix):
        real = os.path.realpath(prefix)
        if real not in found:
            found.append(real)
    return found


def python_executable() -> str:
    """This interpreter's path as the host-mode sandbox sees it (same path)."""
    return os.path.realpath(sys.executable)


def _check_world_readable(prefix: Path) -> None:
    """The sandbox user is not the owner: the prefix, its bin and lib must be o+rx."""
    for path in (prefix, prefix / "bin", prefix / "lib"):
        if path.exists() and (path.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH)) != \
                (stat.S_IROTH | stat.S_IXOTH):
            raise ImageError(
                f"{path} is not readable by other users, so the sandbox's non-root user "
                f"(uid {SANDBOX_UID}) cannot load Python from it; fix: chmod -R o+rX {prefix}")


# -- building -----------------------------------------------------------------------------

def host_rootfs_tar() -> bytes:
    """The host-mode image's whole filesystem: directories, merged-/usr links, users."""
    buf = io.BytesIO()
    now = int(time.time())

    def add(name: str, kind: bytes, mode: int, data: bytes = b"", link: str = "") -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime, info.linkname = kind, mode, now, link
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data) if data else None)

    with tarfile.open(fileobj=buf, mode="w") as tar:
        # /sbin is a real directory, not a link into the mounted /usr: the engine puts its
        # init (docker-init) there before the mounts, and a link would be shadowed.
        for name in ("etc", "usr", "opt", "dev", "proc", "sys", "snapshot", "data", "out",
                     "root", "home", "sbin"):
            add(name, tarfile.DIRTYPE, 0o755)   # /root 0755: prefixes may be mounted under it
        add("tmp", tarfile.DIRTYPE, 0o1777)
        for link in ("bin", "lib", "lib64"):
            add(link, tarfile.SYMTYPE, 0o777, link=f"usr/{link}")
        passwd = (f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                  f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}::/tmp:/usr/sbin/nologin\n")
        add("etc/passwd", tarfile.REGTYPE, 0o644, passwd.encode())
        add("etc/group", tarfile.REGTYPE, 0o644, f"root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_UID}:\n".encode())
    return buf.getvalue()


def _changes(mode: ImageMode | str, extra_labels: dict[str, str] | None = None) -> list[str]:
    labels = {LABEL_MODE: ImageMode(mode).value, **(extra_labels or {})}
    label_args = " ".join(f"{key}={json.dumps(value)}" for key, value in labels.items())
    return [f"USER {SANDBOX_UID}:{SANDBOX_UID}", "WORKDIR /snapshot",
            "ENV LANG=C.UTF-8", f"LABEL {label_args}"]


def build_host_image(client: Any, tag: str = DEFAULT_TAG) -> str:
    """Import the host-mode image offline; returns its id."""
    for prefix in python_prefixes():
        _check_world_readable(Path(prefix))
    labels = {LABEL_PREFIXES: json.dumps(python_prefixes()), LABEL_PYTHON: python_executable()}
    repository, _, version = tag.partition(":")
    client.api.import_image_from_data(host_rootfs_tar(), repository=repository,
                                      tag=version or "latest", changes=_changes(ImageMode.HOST, labels))
    return client.images.get(tag).id


def build_rootfs_image(client: Any, rootfs: Path, tag: str = DEFAULT_TAG) -> str:
    """Import a prepared root filesystem (a directory or a tarball) offline; returns its id.
    The rootfs must hold python with the training dependencies and a user with uid 1000."""
    rootfs = Path(rootfs)
    if not rootfs.exists():
        raise ImageError(f"--rootfs {rootfs} does not exist; make one with debootstrap, "
                         f"then install python and torch into it")
    if rootfs.is_dir():
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(str(rootfs), arcname=".")
        data = buf.getvalue()
    else:
        data = rootfs.read_bytes()
    repository, _, version = tag.partition(":")
    client.api.import_image_from_data(data, repository=repository, tag=version or "latest",
                                      changes=_changes(ImageMode.ROOTFS))
    return client.images.get(tag).id


def build_dockerfile_image(client: Any, tag: str = DEFAULT_TAG, base: str | None = None) -> str:
    """`docker build` from sandbox/Dockerfile (pulls the CUDA PyTorch base); returns its id."""
    import docker

    buildargs = {"BASE": base} if base else None
    try:
        image, log = client.images.build(path=str(DOCKERFILE.parent), dockerfile=DOCKERFILE.name,
                                         tag=tag, buildargs=buildargs, rm=True)
    except docker.errors.BuildError as exc:
        raise ImageError(f"docker build of {DOCKERFILE} failed ({exc.msg}); without a registry "
                         f"for the base image, use: python -m sandbox.image build --mode host") from exc
    for chunk in log:
        if "stream" in chunk:
            sys.stderr.write(chunk["stream"])
    return image.id


def build(mode: ImageMode | str, tag: str = DEFAULT_TAG, *, rootfs: Path | None = None,
          base: str | None = None, client: Any = None) -> str:
    """Build the sandbox image in `mode`; returns the image id."""
    import docker  # only here: importing this module must not need the SDK

    client = client or docker.from_env()
    if mode == ImageMode.HOST:
        return build_host_image(client, tag)
    if mode == ImageMode.ROOTFS:
        if rootfs is None:
            raise ImageError("--mode rootfs needs --rootfs DIR_OR_TARBALL")
        return build_rootfs_image(client, rootfs, tag)
    if mode == ImageMode.DOCKERFILE:
        return build_dockerfile_image(client, tag, base)
    raise ImageError(f"unknown image mode {mode!r}; choose one of {', '.join(MODES)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.image",
                                     description="Build the Nightshift sandbox image.")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image")
    b.add_argument("--tag", default=DEFAULT_TAG)
    b.add_argument("--mode", choices=MODES, default=ImageMode.HOST.value,
                   help="host: offline, mounts the host's Python (CI, no registry); "
                        "dockerfile: docker build from sandbox/Dockerfile (GPU boxes); "
                        "rootfs: import a prepared root filesystem offline")
    b.add_argument("--rootfs", type=Path, help="rootfs directory or tarball (--mode rootfs)")
    b.add_argument("--base", help="base image for --mode dockerfile (build arg BASE)")
    args = parser.parse_args(argv)
    try:
        image_id = build(args.mode, args.tag, rootfs=args.rootfs, base=args.base)
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the engine's own errors: no engine, build failure
        print(f"error: could not build {args.tag} ({type(exc).__name__}: {exc}); is a Docker "
              f"engine running? (.ci/dockerd.sh start)", file=sys.stderr)
        return 1
    print(f"built {args.tag} ({args.mode} mode): {image_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
