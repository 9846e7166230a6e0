"""Choosing a sandbox backend by name: `local`, `docker`, or `auto`.

`auto` takes Docker when an engine answers and the image is there and usable from this
interpreter, else the local backend, and says why in one line, so the choice can be printed
and recorded.
"""
from __future__ import annotations

from sandbox.image import DEFAULT_TAG
from sandbox.protocol import Runner, SandboxUnavailable

BACKENDS = ("auto", "local", "docker")


def make_runner(name: str, *, image: str = DEFAULT_TAG) -> tuple[Runner, str]:
    """The runner for `name` and a one-line reason for the choice.

    `docker` raises SandboxUnavailable (saying how to start an engine or build the image)
    when it cannot run; `auto` falls back to `local` in that case and says why."""
    if name == "local":
        return _local(), "local (asked for)"
    if name == "docker":
        runner, version = _docker(image)
        return runner, f"docker (engine {version} answered at {_url()}, image {image})"
    if name == "auto":
        try:
            runner, version = _docker(image)
        except SandboxUnavailable as exc:
            return _local(), f"local (docker unavailable: {exc})"
        return runner, f"docker (engine {version} answered at {_url()}, image {image})"
    raise ValueError(f"unknown sandbox {name!r}; choose one of {', '.join(BACKENDS)} "
                     f"(the `sandbox:` field of program.md or --sandbox)")


def _docker(image: str) -> tuple[Runner, str]:
    from sandbox.docker import DockerRunner, connect

    client = connect(timeout_s=3)
    runner = DockerRunner(image, client=client)
    runner.check_image()   # missing, or built for another interpreter: SandboxUnavailable, why
    return runner, str(client.version().get("Version", "?"))


def _local() -> Runner:
    from sandbox.local import LocalRunner   # written alongside; imported only when chosen

    return LocalRunner()


def _url() -> str:
    from sandbox.docker import engine_url

    return engine_url()
