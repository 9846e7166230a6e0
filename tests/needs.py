"""What a test needs beyond the README's install, in one place: each optional SDK, engine,
cluster and browser, how to tell it is here, and how to get it.

The README's `pip install -e '.[dev]'` then `python -m pytest` passes on a machine with nothing
else installed or started: a test that needs more says so, and skips with one line naming what
is missing and the fix. Two forms, one check per kind:

    @needs("docker")                  # a test, a class, or `pytestmark = needs("ray")`;
    pytest.param("openai", marks=needs("openai"))   # checked when the test starts
    require("openai")                 # at the top of a module whose imports need the kind

Where NIGHTSHIFT_REQUIRE_<KIND>=1 (or NIGHTSHIFT_REQUIRE_ALL=1, as `.ci/run` sets) a missing
kind fails the test instead, so nothing CI is meant to cover silently stops being tested.
Add a kind here, nowhere else.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable

import pytest

EVERYTHING = "bash .ci/run installs and starts all of it"


def _modules(*names: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        absent = [name for name in names if importlib.util.find_spec(name) is None]
        return f"no module named {', '.join(absent)}" if absent else None
    return missing


def _commands(*names: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        absent = [name for name in names if shutil.which(name) is None]
        return f"{', '.join(absent)} not on PATH" if absent else None
    return missing


def _all(*checks: Callable[[], str | None]) -> Callable[[], str | None]:
    def missing() -> str | None:
        return next((why for why in (check() for check in checks) if why), None)
    return missing


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return None if found else "chromium not on PATH"


def _docker_engine() -> str | None:
    from sandbox.docker import connect
    from sandbox.protocol import SandboxUnavailable

    try:
        connect(timeout_s=3)
    except SandboxUnavailable as exc:
        return str(exc)
    return None


AGENT_CLIS = ("claude", "codex")
AGENT_CLIS_INSTALL = "npm install --prefix ~/.cache/nightshift/agent-clis @anthropic-ai/claude-code @openai/codex"


def agent_clis_dir() -> Path:
    """Where the real coding-agent CLIs are installed (node_modules/.bin/claude and codex):
    NIGHTSHIFT_AGENT_CLIS, else ~/.cache/nightshift/agent-clis."""
    given = os.environ.get("NIGHTSHIFT_AGENT_CLIS")
    return Path(given).expanduser() if given else Path.home() / ".cache" / "nightshift" / "agent-clis"


def agent_cli(name: str) -> Path:
    return agent_clis_dir() / "node_modules" / ".bin" / name


def _agent_clis() -> str | None:
    if shutil.which("node") is None:
        return "node not on PATH"
    absent = [name for name in AGENT_CLIS if not os.access(agent_cli(name), os.X_OK)]
    return f"{', '.join(absent)} not installed in {agent_clis_dir()}" if absent else None


def _slurm_cluster() -> str | None:
    if os.environ.get("SLURM_CONF"):        # a running cluster was handed over (CI starts one)
        return None
    absent = _commands("slurmctld", "slurmd", "munged")()
    if absent:
        return absent
    return None if os.getuid() == 0 else "starting a local Slurm cluster needs root"


@dataclass(frozen=True)
class Need:
    """One kind of optional dependency: `missing()` is None when it is usable here, else why
    not; `fix` is how to get it."""
    kind: str
    missing: Callable[[], str | None]
    fix: str

    @property
    def required_by(self) -> str:
        return f"NIGHTSHIFT_REQUIRE_{self.kind.upper()}"

    def required(self) -> bool:
        return "1" in (os.environ.get(self.required_by), os.environ.get("NIGHTSHIFT_REQUIRE_ALL"))


NEEDS = {need.kind: need for need in (
    Need("openai", _modules("openai"), "pip install -e '.[openai]'"),
    Need("bedrock", _modules("botocore"), "pip install -e '.[bedrock]'"),
    Need("submitit", _modules("submitit"), "pip install -e '.[slurm]'"),
    Need("hf", _modules("transformers", "accelerate"), "pip install -e '.[hf]'"),
    Need("makemore", _modules("tensorboard"), "pip install -e '.[makemore]'"),
    Need("mcp", _modules("mcp"), "pip install -e '.[mcp]'"),
    Need("mlflow", _modules("mlflow"), "pip install -e '.[mlflow]' (the tests start a local server)"),
    Need("wandb", _modules("wandb"), "pip install -e '.[wandb]' (the tests run it offline)"),
    Need("docs", _modules("mkdocs", "material", "mkdocstrings", "mkdocs_gen_files"),
         "pip install -e '.[docs]'"),
    Need("ray", _modules("ray"), "pip install -e '.[ray]' (a local two-node cluster is then started)"),
    Need("slurm", _all(_modules("submitit"), _slurm_cluster),
         "pip install -e '.[slurm]' and, as root, apt-get install slurm-wlm munge"),
    Need("docker", _docker_engine, "apt-get install docker.io, then sudo bash .ci/dockerd.sh start"),
    Need("chromium", _chromium, "apt-get install chromium"),
    Need("agent_clis", _agent_clis, f"{AGENT_CLIS_INSTALL} (or set NIGHTSHIFT_AGENT_CLIS to a folder holding them)"),
    Need("browser", _all(_chromium, _commands("chromedriver"), _modules("selenium")),
         "apt-get install chromium chromium-driver"),
)}


@cache
def why_missing(kind: str) -> str | None:
    """Asked once per test process: an engine that answered once is taken to stay up."""
    return NEEDS[kind].missing()


def needs(kind: str) -> pytest.MarkDecorator:
    """The mark of a test that needs `kind`; tests/conftest.py checks it when the test starts."""
    if kind not in NEEDS:
        raise KeyError(f"unknown need {kind!r}: add it to NEEDS in tests/needs.py ({', '.join(NEEDS)})")
    return pytest.mark.needs(kind)


def check(kind: str, *, module_level: bool = False) -> None:
    """Skip (or, where required, fail) when `kind` is missing here."""
    why = why_missing(kind)
    if why is None:
        return
    need = NEEDS[kind]
    line = f"needs {kind}: {why}. Fix: {need.fix} ({EVERYTHING})"
    if need.required():
        pytest.fail(f"{need.required_by} is set but this test {line}", pytrace=False)
    pytest.skip(line, allow_module_level=module_level)


def require(kind: str) -> pytest.MarkDecorator:
    """At the top of a module whose own imports need `kind`: skips the whole module when it is
    missing, before those imports run; returns the mark for `pytestmark`."""
    mark = needs(kind)
    check(kind, module_level=True)
    return mark
