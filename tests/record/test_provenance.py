"""Every run leaves a provenance.json that says what ran, where, and how to rebuild it."""
import hashlib
import json
import os
import platform
import socket
import subprocess
from pathlib import Path

import numpy
import pytest
import torch

from agent.record.ledger import Ledger
from agent.run.data import PreparedData
from agent.record.events import Role
from agent.record.provenance import (Provenance, compare_environments, environment, fingerprint,
                                     read_provenance)
from agent.run.executor import RunExecutor
from agent.run.plan import RunPlan
from agent.workspace.repo import Workspace
from sandbox import Limits
from sandbox.local import LocalRunner

SCRIPT = """import json, os
LR = {lr}
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as f:
    json.dump({{"score": LR * 100 + int(os.environ["NIGHTSHIFT_SEED"])}}, f)
"""


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One real run of a candidate commit, through RunExecutor and the local sandbox."""
    root = tmp_path_factory.mktemp("prov") / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@t"); git(root, "config", "user.name", "t")
    (root / "train.py").write_text(SCRIPT.format(lr=0.01))
    (root / "prepare.py").write_text("# the fixed evaluation\n")
    git(root, "add", "."); git(root, "commit", "-qm", "base")
    data = root.parent / "data"
    data.mkdir()
    workspace = Workspace.open(root, "prov", root / "results" / "prov" / "worktree")
    commit = workspace.commit_candidate("train.py", SCRIPT.format(lr=0.02), "LR up\n")
    ledger = Ledger(root / "results" / "prov")
    plan = RunPlan(command="python train.py", metric="score", budget_s=3.0, grace_s=30.0,
                   protected=("prepare.py",), limits=Limits(memory_mb=None), target="train.py",
                   extra_env={"PYTHONHASHSEED": "0"})
    executor = RunExecutor(plan=plan, runner=LocalRunner(), workspace=workspace, ledger=ledger,
                           data=PreparedData(data, {"corpus_hash": "abc123", "split_rule": "r"}),
                           results_dir=root / "results" / "prov")
    event = executor.run(commit, 7, "candidate", "e0001")
    workspace.close()
    run_dir = root / "results" / "prov" / "runs" / event.run_id
    return {"root": root, "commit": commit, "event": event, "run_dir": run_dir,
            "record": read_provenance(run_dir)}


def test_provenance_sits_next_to_the_result_and_names_the_run(recorded):
    record, event = recorded["record"], recorded["event"]
    assert event.status == "ok" and event.metric == pytest.approx(9.0)
    assert (recorded["run_dir"] / "out" / "result.json").exists()
    assert record.commit == recorded["commit"]
    assert record.parent == git(recorded["root"], "rev-parse", "main")
    assert (record.seed, record.role, record.experiment) == (7, "candidate", "e0001")
    assert (record.budget_s, record.grace_s, record.split) == (3.0, 30.0, "val")
    assert record.command == "python train.py"
    assert record.sandbox["backend"] == "local"
    assert record.data_meta["corpus_hash"] == "abc123"
    assert record.determinism["seed"] == 7
    assert record.determinism["run_env"] == {"PYTHONHASHSEED": "0"}
    assert record.started_at <= record.ended_at


def test_digests_are_of_the_files_at_the_commit(recorded):
    record = recorded["record"]
    target = SCRIPT.format(lr=0.02).encode()
    assert record.target_digest == {"train.py": hashlib.sha256(target).hexdigest()}
    assert record.protected_digests == {
        "prepare.py": hashlib.sha256(b"# the fixed evaluation\n").hexdigest()}


def test_environment_matches_the_running_interpreter(recorded):
    env = recorded["record"].environment
    assert env["python"] == platform.python_version()
    assert env["torch"] == torch.__version__
    assert env["numpy"] == numpy.__version__
    assert env["cuda"] == torch.version.cuda
    assert env["gpu_count"] == torch.cuda.device_count()
    assert env["cpu_count"] == os.cpu_count()
    assert env["hostname"] == socket.gethostname()
    assert env["nightshift"]
    # the ledger carries the fingerprint and where the full record is
    assert recorded["event"].env_fingerprint == recorded["record"].env_fingerprint == fingerprint(env)
    assert recorded["event"].provenance == f"runs/{recorded['event'].run_id}/provenance.json"


def test_the_diff_applied_to_the_parent_gives_the_commit(recorded, tmp_path):
    record, root = recorded["record"], recorded["root"]
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    git(clone, "checkout", "-q", record.parent)
    patch = tmp_path / "change.diff"
    patch.write_text(record.diff)
    git(clone, "apply", "--index", str(patch))
    assert git(clone, "write-tree") == git(root, "rev-parse", f"{record.commit}^{{tree}}")


def test_the_record_reads_back_what_was_written_and_old_records_too(recorded):
    written = json.loads((recorded["run_dir"] / "provenance.json").read_text())
    assert json.loads(json.dumps(Provenance.from_dict(written).to_dict(), default=str)) == written
    assert recorded["record"].role == Role.CANDIDATE
    old = Provenance.from_dict({"run_id": "r1", "commit": "c" * 40, "diff": "+x", "environment": {"python": "3.11"},
                                "data_meta": None, "a_key_from_a_newer_harness": 1})
    assert (old.diff, old.environment, old.data_meta, old.seed, old.role) == ("+x", {"python": "3.11"}, {}, None, None)


def test_comparing_environments_lists_material_and_informational_changes(recorded):
    original = recorded["record"].to_dict()
    assert compare_environments(original, original) == []
    assert compare_environments(recorded["record"], original) == []   # the record or its JSON
    changed = json.loads(json.dumps(original))
    changed["environment"].update(torch="9.9", hostname="elsewhere", gpus=["NVIDIA H100, 550.1"])
    changed["data_meta"]["corpus_hash"] = changed["data_hash"] = "other"   # data_hash: what the runs saw
    found = {d.field: d for d in compare_environments(original, changed)}
    assert set(found) == {"torch", "gpus", "hostname", "data_hash"}
    assert found["torch"].material and found["data_hash"].material and not found["hostname"].material
    assert [d.field for d in compare_environments(original, changed)][-1] == "hostname"  # material first
    old = {k: v for k, v in original.items() if k != "data_hash"}        # a record from before data_hash
    older = json.loads(json.dumps(old))
    older["data_meta"]["corpus_hash"] = "other"
    assert "data_hash" in {d.field for d in compare_environments(old, older)}
    # the fingerprint ignores the host name but not the versions
    renamed = dict(original["environment"], hostname="x")
    assert fingerprint(renamed) == fingerprint(original["environment"])
    assert fingerprint(changed["environment"]) != fingerprint(original["environment"])


def test_environment_is_measured_once_per_process():
    assert environment() is environment()
