"""Shared fixtures. Sandbox: `hostile_spec` builds a RunSpec around a script of tests/hostile/."""
from __future__ import annotations

import itertools
import os
import shutil
import signal
import stat
import sys
from pathlib import Path

import pytest

from sandbox.protocol import Limits, RunSpec  # noqa: E402
from tests.needs import check


def _make_read_only(folder: Path) -> None:
    """What the harness does to a snapshot: no write bits anywhere."""
    for path in [*folder.rglob("*"), folder]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


@pytest.fixture
def ctrl_c_raises():
    """A SIGINT to this process raises KeyboardInterrupt, as Ctrl-C does in a terminal. A suite
    started in the background by a shell without job control (`cmd &` in a script, nohup)
    inherits SIGINT ignored, and Python then never raises it; the CLI sets its own handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def hostile_spec(tmp_path):
    """hostile_spec(name, **overrides) -> RunSpec running hostile script `name` as
    `python train.py` over its own read-only snapshot, with an empty out folder at
    `<tmp>/run-N/out`. Defaults: budget 30 s (a loaded machine is slow; tests of timeouts
    pass a small one), grace 1 s, 256 MB, 64 pids."""
    from tests import hostile

    counter = itertools.count()
    data = tmp_path / "data"
    data.mkdir()
    (data / "tokens.bin").write_bytes(b"\0" * 64)

    def make(name: str, *, budget_s: float = 30.0, grace_s: float = 1.0,
             limits: Limits = Limits(memory_mb=256, pids=64), env: dict[str, str] | None = None,
             log_cap_bytes: int = 1_000_000) -> RunSpec:
        n = next(counter)
        snapshot = tmp_path / f"snapshot-{n}"
        snapshot.mkdir()
        shutil.copy(hostile.script(name), snapshot / "train.py")
        _make_read_only(snapshot)
        out = tmp_path / f"run-{n}" / "out"
        out.mkdir(parents=True)
        return RunSpec(command=f"{sys.executable} train.py", snapshot_dir=snapshot, data_dir=data,
                       out_dir=out, seed=n, budget_s=budget_s, grace_s=grace_s, metric="val_bpb",
                       limits=limits, env=env or {}, log_cap_bytes=log_cap_bytes)

    yield make
    for path in tmp_path.rglob("*"):  # let pytest clean up the read-only snapshots
        if path.is_dir() and not path.is_symlink():
            os.chmod(path, 0o755)


@pytest.hookimpl(tryfirst=True)   # before xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(items):
    """Under pytest-xdist (`-n 2`, pyproject.toml) the tests of one real cluster run on one
    worker, one after another: they share its nodes, and a test that counts what ran at once
    on them must not see another test's jobs. So do the Docker tests: a runner starting
    removes the stopped containers of harnesses that are gone, which a test of a killed
    harness's container is still reading."""
    for item in items:
        kinds = {mark.args[0] for mark in item.iter_markers("needs")}
        for engine in ("ray", "slurm", "docker"):
            if engine in kinds:
                item.add_marker(pytest.mark.xdist_group(engine))
                break


@pytest.hookimpl(tryfirst=True)   # before fixtures start a cluster the test cannot use
def pytest_runtest_setup(item):
    """A test marked `needs(kind)` (tests/needs.py) skips, saying what is missing and the fix,
    or fails where CI requires the kind."""
    for mark in item.iter_markers("needs"):
        check(mark.args[0])


def pytest_runtest_logreport(report):
    _log_skip(report)


def pytest_collectreport(report):
    _log_skip(report)


def _log_skip(report) -> None:
    """With NIGHTSHIFT_SKIPPED_LOG=PATH, the id of every test (or module) that skipped, one a
    line: `.ci/run` reruns exactly those on the full machine after the README's bare run."""
    path = os.environ.get("NIGHTSHIFT_SKIPPED_LOG")
    if os.environ.get("PYTEST_XDIST_WORKER"):   # the controller logs what its workers report
        return
    if path and report.skipped and not hasattr(report, "wasxfail"):
        with open(path, "a", encoding="utf-8") as log:
            log.write(report.nodeid + "\n")
