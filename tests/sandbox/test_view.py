"""What a run sees of the host is an allow-list (sandbox/view.py), in the local sandbox: a copy of
the held-out text in a place nobody listed is not there, nor is another Python, while the run's
own folders, its interpreter and its libraries are.

Real parts: the local sandbox's namespaces and mounts, a real interpreter, real processes. The
same in a container: tests/sandbox/test_sandbox_docker.py."""
from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from sandbox import held_out, view
from sandbox.local import LocalRunner
from sandbox.protocol import HeldOut, RunSpec, Status

UNITS = ("mailbox.py", "wsgiref")
PROBE = textwrap.dedent("""
    import json, os, sys
    seen = {}
    for path in json.loads(os.environ["PATHS"]):
        try:
            with open(path, "rb") as fh:
                seen[path] = len(fh.read())
        except OSError as error:
            seen[path] = type(error).__name__
    seen["/"] = sorted(os.listdir("/"))
    seen["/usr/lib"] = sorted(os.listdir("/usr/lib")) if os.path.isdir("/usr/lib") else None
    import json as again, email.parser   # the interpreter's own standard library works
    with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "seen.json"), "w") as out:
        json.dump(seen, out)
    with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
        json.dump({"val_bpb": 1.0}, out)
""")


@pytest.fixture(scope="module")
def runner():
    runner = LocalRunner()
    if not runner.isolation.read_only_root:
        pytest.skip(f"no mount namespace here: the view is not enforced ({runner.isolation.notes})")
    return runner


@pytest.fixture
def probe(tmp_path, runner):
    """probe(paths, **spec) -> (RunResult, what the run saw of each path)."""
    snapshot, data = tmp_path / "snapshot", tmp_path / "data"
    snapshot.mkdir()
    data.mkdir()
    (snapshot / "train.py").write_text(PROBE)
    (data / "train.bin").write_bytes(b"train")

    def run(paths: list[str], **overrides):
        out = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}" / "out"
        out.mkdir(parents=True)
        spec = RunSpec(command="python train.py", snapshot_dir=snapshot, data_dir=data, out_dir=out,
                       seed=0, budget_s=60, metric="val_bpb", python=sys.executable,
                       env={"PATHS": json.dumps(paths)}, **overrides)
        result = runner.run(spec)
        assert result.status == Status.OK, result.reason + result.log_tail
        return result, json.loads((out / "seen.json").read_text())
    return run


def test_a_copy_of_the_held_out_text_in_a_place_nobody_listed_is_not_in_the_run(tmp_path, probe):
    """The red team's door: another Python's or an SDK's copy of the held-out modules. Here a
    copy made by the test in a folder no cover names; it is readable on the host."""
    vendored = tmp_path / "sdk" / "platform" / "bundledpython" / "lib" / "python3.12"
    vendored.mkdir(parents=True)
    source = Path(sysconfig.get_paths()["stdlib"]) / "mailbox.py"
    shutil.copy(source, vendored / "mailbox.py")
    (vendored / "mailbox.py").chmod(0o644)
    result, seen = probe([str(vendored / "mailbox.py"), str(tmp_path / "snapshot" / "train.py"),
                          str(tmp_path / "data" / "train.bin")])
    assert seen[str(vendored / "mailbox.py")] == "FileNotFoundError"
    assert seen[str(tmp_path / "snapshot" / "train.py")] == len(PROBE)     # its own snapshot
    assert seen[str(tmp_path / "data" / "train.bin")] == 5                 # and its data
    assert result.sandbox["view"].startswith("allow-list")


def test_no_other_python_and_nothing_of_the_host_but_the_view(probe):
    mine = os.path.realpath(sysconfig.get_paths()["stdlib"])
    others = [root for root in held_out.stdlib_roots() if root != mine]
    secrets = ["/etc/shadow", "/root/.bash_history", str(Path(__file__).resolve())]
    _, seen = probe([os.path.join(root, "os.py") for root in others] + secrets)
    assert all(seen[os.path.join(root, "os.py")] == "FileNotFoundError" for root in others), seen
    assert all(seen[path] in ("FileNotFoundError", "PermissionError") for path in secrets), seen
    assert not any(name.startswith("python") for name in seen["/usr/lib"] or []), seen["/usr/lib"]
    assert set(seen["/"]) <= {"bin", "dev", "etc", "lib", "lib64", "proc", "root", "sys", "tmp", "usr",
                              "home", "opt", "work", "sbin", "var", "srv", "mnt"}, seen["/"]


def test_the_held_out_units_are_absent_from_the_interpreters_own_library(probe):
    """Not laid over: the view's standard library is a copy without them (hard links), and
    at their names stand empty watched files, so an open is seen."""
    stdlib = sysconfig.get_paths()["stdlib"]
    result, seen = probe([os.path.join(stdlib, "mailbox.py"), os.path.join(stdlib, "wsgiref", "util.py"),
                          os.path.join(stdlib, "os.py")], held_out=HeldOut(units=UNITS))
    assert seen[os.path.join(stdlib, "mailbox.py")] == 0
    assert seen[os.path.join(stdlib, "wsgiref", "util.py")] == 0
    assert seen[os.path.join(stdlib, "os.py")] > 0
    assert result.hidden_read == ["held-out source"] and result.hidden_enforced == "tripwires"


def test_a_path_program_md_adds_is_visible_and_read_only(tmp_path, probe):
    tool = tmp_path / "tools" / "lexicon.txt"
    tool.parent.mkdir()
    tool.write_text("words")
    _, seen = probe([str(tool)], view_add=(str(tool.parent),))
    assert seen[str(tool)] == 5


def test_the_standard_library_copy_holds_hard_links_and_no_held_out_bytes():
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    copy = Path(view.stdlib_without(stdlib, UNITS))
    assert (copy / "mailbox.py").stat().st_size == 0 and not any((copy / "wsgiref").iterdir())
    assert os.path.samefile(copy / "os.py", Path(stdlib) / "os.py") or \
        (copy / "os.py").read_bytes() == (Path(stdlib) / "os.py").read_bytes()
    caches = list((copy / "__pycache__").glob("mailbox.*.pyc"))
    assert all(cache.stat().st_size == 0 for cache in caches)
    assert (copy / "site-packages").is_dir() and not any((copy / "site-packages").iterdir())
    assert view.stdlib_without(stdlib, UNITS) == str(copy)          # made once, then reused
    assert not stat.S_IMODE(copy.stat().st_mode) & 0o022


def test_the_view_names_why_each_path_is_there():
    seen = view.host_view(sys.executable, UNITS)
    why = {bind.target: bind.why for bind in seen.binds}
    assert why[os.path.realpath(sysconfig.get_paths()["stdlib"])].startswith("its standard library without")
    assert any(w == "on its import path" for w in why.values())
    assert "/usr" not in why and "/usr/lib" not in why and "/" not in why
    assert all(os.path.isabs(b.source) for b in seen.binds)
