"""The tripwires' stand-ins: laid in memory, watched, and gone once the run closes them.

Real parts: inotify, a real folder tree, real processes (a dead harness's pid)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import tripwire
from sandbox.held_out import Cover

pytest.importorskip("inotify_simple")


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A scratch folder of the test's own in place of /dev/shm (the same code, any machine)."""
    folder = tmp_path / "shm"
    folder.mkdir()
    monkeypatch.setattr(tripwire, "SCRATCH", folder)
    return folder


def test_the_scratch_is_the_machines_memory():
    assert tripwire.SCRATCH == Path("/dev/shm")


def test_stand_ins_are_watched_in_memory_and_removed_on_close(tmp_path, scratch):
    files = tuple(f"pkg{i}/sub/mod{j}.py" for i in range(20) for j in range(30))
    wires = tripwire.Tripwires(tmp_path, tmp_path, (), [Cover("/nowhere/stdlib/unit", files, is_dir=True)])
    (laid,) = wires.laid
    assert wires.folder.parent == scratch and not (tmp_path / "tripwires").exists()
    assert len([p for p in laid.wire.rglob("*") if p.is_file()]) == len(files)
    some = laid.wire / "pkg7" / "sub" / "mod3.py"
    assert some.stat().st_size == 0 and some.stat().st_mode & 0o777 == 0o444
    assert wires.read() == []
    some.open("rb").close()                      # an open of a stand-in, as a run's would be
    assert wires.close() == ["held-out source"]
    assert not wires.folder.exists()


def test_a_killed_harness_leaves_its_stand_ins_for_the_next_to_sweep(tmp_path, scratch):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = tripwire.SCRATCH / f"{tripwire.PREFIX}{gone.stdout.strip()}-left"
    (stale / "sources").mkdir(parents=True)
    (stale / "sources" / "x.py").write_bytes(b"")
    mine = tripwire.SCRATCH / f"{tripwire.PREFIX}{os.getpid()}-alive"
    mine.mkdir()
    try:
        wires = tripwire.Tripwires(tmp_path, tmp_path, (), [Cover(str(tmp_path / "t.py"))])
        assert not stale.exists(), "a dead harness's stand-ins stay"
        assert mine.exists(), "a live harness's stand-ins were swept"
        wires.close()
    finally:
        for folder in (stale, mine):
            if folder.exists():
                subprocess.run(["rm", "-rf", str(folder)], check=False)


def test_without_memory_scratch_the_stand_ins_go_in_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tripwire, "SCRATCH", Path(tmp_path / "no-such-tmpfs"))
    wires = tripwire.Tripwires(tmp_path, tmp_path, (), [Cover("/nowhere/a", ("b/c.py",), is_dir=True)])
    assert wires.folder == tmp_path / "tripwires"
    wires.close()
    assert (tmp_path / "tripwires" / "sources").is_dir()
