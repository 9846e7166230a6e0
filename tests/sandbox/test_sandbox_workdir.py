"""A writable working directory over the read-only snapshot, and data mounted inside it.

Scripts written for a checkout write next to themselves and read `data/...` from the
repository. With `writable_workdir` their writes land in `<run dir>/work` (an overlay in
the local sandbox's mount namespace, a copy elsewhere), the snapshot stays byte-identical,
and a mount is read-only where the machine allows it. Real subprocesses, real namespaces;
the Docker backend's copy is tested in test_sandbox_docker.py.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from sandbox.isolation import Isolation
from sandbox.local import LocalRunner
from sandbox.protocol import DataMount, Limits, RunSpec, Status

SCRIPT = """import os, sys
os.makedirs("ckpt", exist_ok=True)
open("ckpt/model.pt", "wb").write(b"w" * 300_000)
open("notes.txt", "w").write("hi")
print("data:", open("data/corpus/train.bin").read())
for name, path in (("data_write", "data/corpus/new.bin"), ("tracked_write", "train.py")):
    try:
        open(path, "a").write("x")
        print(name + ": yes")
    except OSError as exc:
        print(name + ": refused", exc.errno)
os.remove("old.txt")
print("argv:", " ".join(sys.argv[1:]))
print("---")
print("val_bpb: 1.5")
"""


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def layout(tmp_path):
    """A read-only snapshot with data/corpus/ tracked (as nanoGPT tracks its prepare.py),
    and the user's folder holding the git-ignored train.bin."""
    snapshot = tmp_path / "snapshot"
    (snapshot / "data" / "corpus").mkdir(parents=True)
    (snapshot / "train.py").write_text(SCRIPT)
    (snapshot / "old.txt").write_text("tracked")
    (snapshot / "config").mkdir()
    (snapshot / "config" / "base.py").write_text("lr = 1e-3\n")
    (snapshot / "data" / "corpus" / "prepare.py").write_text("# tracked\n")
    for path in [*snapshot.rglob("*")]:
        if path.is_file():
            path.chmod(0o444)
    for path in sorted(snapshot.rglob("*"), reverse=True) + [snapshot]:
        if path.is_dir():
            path.chmod(0o555)
    users = tmp_path / "user-data"
    users.mkdir()
    (users / "train.bin").write_text("TOKENS")
    yield snapshot, users
    for path in [snapshot, *snapshot.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)


def run(runner: LocalRunner, snapshot: Path, users: Path, tmp_path: Path, name: str):
    out = tmp_path / name / "out"
    out.mkdir(parents=True)
    spec = RunSpec(command="python train.py --seed={seed} --out_dir={out}", snapshot_dir=snapshot,
                   data_dir=tmp_path, out_dir=out, seed=4, budget_s=30, grace_s=5, metric="val_bpb",
                   limits=Limits(memory_mb=512), writable_workdir=True, python=sys.executable,
                   mounts=(DataMount("data/corpus", users),))
    return runner.run(spec)


def test_overlay_takes_the_writes_and_mounts_the_data_read_only(layout, tmp_path):
    runner = LocalRunner(kill_grace_s=1.0)
    if not runner.isolation.overlay:
        pytest.skip(f"no overlayfs in a mount namespace here: {runner.isolation.notes}")
    snapshot, users = layout
    before, data_before = tree_digest(snapshot), tree_digest(users)
    result = run(runner, snapshot, users, tmp_path, "overlay")
    assert result.status == Status.OK, (result.reason, result.log_tail)
    assert result.sandbox["workdir"] == "overlay"
    log = result.log_path.read_text()
    assert "data: TOKENS" in log and "data_write: refused" in log and "tracked_write: refused" in log
    assert f"--seed=4 --out_dir={tmp_path / 'overlay' / 'out'}" in log
    assert result.written == {"ckpt/model.pt": 300_000, "notes.txt": 2, "old.txt": None}
    work = result.work_dir
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*")) == ["ckpt", "ckpt/model.pt", "notes.txt"]
    assert tree_digest(snapshot) == before and tree_digest(users) == data_before
    assert not (tmp_path / "overlay" / ".overlay-work").exists()


def test_without_namespaces_the_working_dir_is_a_copy(layout, tmp_path):
    """The documented fallback: a copy of the snapshot, the data a symlink (protected only by
    its own permissions, so only what the script wrote is compared, not whether it could)."""
    runner = LocalRunner(kill_grace_s=1.0, isolation=Isolation(is_root=os.geteuid() == 0))
    snapshot, users = layout
    before = tree_digest(snapshot)
    result = run(runner, snapshot, users, tmp_path, "copy")
    assert result.status == Status.OK, (result.reason, result.log_tail)
    assert result.sandbox["workdir"] == "copy"
    assert "data: TOKENS" in result.log_path.read_text()
    written = dict(result.written)
    assert {k: written.pop(k) for k in ("ckpt/model.pt", "notes.txt", "old.txt")} == {
        "ckpt/model.pt": 300_000, "notes.txt": 2, "old.txt": None}
    assert set(written) <= {"train.py"}    # root may append to its copy of a tracked file
    assert not (result.work_dir / "data").exists()   # the link is gone, the data was never copied
    assert tree_digest(snapshot) == before


def test_read_only_workdir_is_still_the_default(layout, tmp_path):
    snapshot, users = layout
    out = tmp_path / "ro" / "out"
    out.mkdir(parents=True)
    spec = RunSpec(command=f"{sys.executable} -c \"open('x', 'w')\"", snapshot_dir=snapshot,
                   data_dir=tmp_path, out_dir=out, seed=0, budget_s=10, metric="val_bpb")
    result = LocalRunner().run(spec)
    assert result.status == Status.CRASH and result.written == {} and result.work_dir is None
