"""RunExecutor: a run's writes to its working layer are its own, except into protected files
or the user's data folder, which make it tampered (also where the sandbox cannot stop them)."""
import os
import subprocess
import sys

import pytest

from agent.record.ledger import Ledger
from agent.run.data import PreparedData
from agent.run.executor import RunExecutor
from agent.run.plan import RunPlan
from agent.workspace.repo import Workspace
from sandbox import Limits, Status
from sandbox.isolation import Isolation
from sandbox.local import LocalRunner
from sandbox.protocol import DataMount

SCRIPT = """import os, sys
what = sys.argv[1]
if what == "data":
    open("data/corpus/extra.bin", "w").write("x")
elif what == "protected":
    os.remove("evaluate.py"); open("evaluate.py", "w").write("def score(): return 0.0\\n")
print("---"); print("score: 1.0")
"""


@pytest.fixture
def executor_for(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", "-C", str(root), *args], check=True)
    (root / "train.py").write_text(SCRIPT)
    (root / "evaluate.py").write_text("def score(): return 1.0\n")
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "base"], check=True)
    users = root / "data" / "corpus"     # git-ignored data of the user's checkout
    users.mkdir(parents=True)
    (users / "train.bin").write_text("TOKENS")
    workspace = Workspace.open(root, "t", root / "results" / "t" / "worktree")

    def make(what: str, runner: LocalRunner) -> RunExecutor:
        plan = RunPlan(command=f"python train.py {what}", metric="score", budget_s=20, grace_s=10,
                       protected=("evaluate.py",), limits=Limits(memory_mb=None), python=sys.executable,
                       writable_workdir=True, mounts=(DataMount("data/corpus", users),))
        return RunExecutor(plan=plan, runner=runner, workspace=workspace, ledger=Ledger(root / "results" / "t"),
                           data=PreparedData(tmp_path, {}), results_dir=root / "results" / "t")
    yield make, workspace, users
    workspace.close()


def test_writing_the_users_data_folder_is_tampering_even_without_namespaces(executor_for):
    make, workspace, users = executor_for
    bare = LocalRunner(kill_grace_s=1.0, isolation=Isolation(is_root=os.geteuid() == 0))
    run = make("data", bare).run(workspace.head(), 0, "reference", None)
    if not (users / "extra.bin").exists():
        pytest.skip("the data folder's permissions refused the write: nothing to detect")
    assert run.status == Status.TAMPERED and "data folder data/corpus" in run.reason


def test_replacing_a_protected_file_in_the_working_layer_is_tampering(executor_for):
    make, workspace, _ = executor_for
    run = make("protected", LocalRunner(kill_grace_s=1.0)).run(workspace.head(), 0, "reference", None)
    assert run.status == Status.TAMPERED and "evaluate.py" in run.reason
    assert workspace.read("evaluate.py") == "def score(): return 1.0\n"   # the commit is untouched


def test_a_data_folder_gets_a_content_hash_once_cached_by_its_stat_digest(tmp_path):
    """The report's data corpus showed '-' for a data: folder (only a stat digest was kept).
    Its content hash is taken once and cached: the same files are not read again, changed
    bytes give another hash."""
    from agent.run.data import content_hash

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.bin").write_bytes(b"\x01" * 1000)
    (folder / "val.bin").write_bytes(b"\x02" * 100)
    cache = tmp_path / "cache"
    first = content_hash(folder, cache)
    assert len(first) == 16 and len(list((cache / "content-hashes").iterdir())) == 1
    (cache / "content-hashes").joinpath(next((cache / "content-hashes").iterdir()).name).write_text(
        '{"content_hash": "from-the-cache"}')
    assert content_hash(folder, cache) == "from-the-cache"          # not read again
    (folder / "val.bin").write_bytes(b"\x03" * 101)                  # new bytes, new stat digest
    assert content_hash(folder, cache) not in (first, "from-the-cache")
