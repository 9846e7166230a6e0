"""agent/run/grading.py: the secret the evaluator draws its windows from is the harness's, kept
where resume finds it and no run can read it, and handed to the evaluation step alone: real
runs through the local sandbox, each step reporting what its environment held."""
import json
import stat
import subprocess
import sys

import pytest

from agent.record.ledger import Ledger
from agent.run import grading
from agent.run.data import PreparedData
from agent.run.executor import RunExecutor
from agent.run.plan import RunPlan
from agent.workspace.repo import Workspace
from sandbox import Limits
from sandbox.local import LocalRunner

# Each step writes the metric and what it saw of the secret, and tries to read the tag's folder.
STEP = """import json, os, sys
secret = os.environ.get("NIGHTSHIFT_EVAL_SECRET", "")
try:
    on_disk = open(sys.argv[1]).read()
except OSError:
    on_disk = ""
json.dump({"score": 1.0, "secret_length": len(secret), "secret_on_disk": len(on_disk),
           "seed": os.environ["NIGHTSHIFT_SEED"]}, open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w"))
"""


def test_the_secret_is_drawn_once_per_folder_kept_private_and_read_again(tmp_path):
    secret = grading.evaluation_secret(tmp_path / "results" / "tag")
    path = tmp_path / "results" / "tag" / grading.SECRET_FILE
    assert len(secret) == 64 and int(secret, 16) >= 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert grading.evaluation_secret(tmp_path / "results" / "tag") == secret            # resume: the same windows
    assert grading.evaluation_secret(tmp_path / "results" / "other") != secret          # another tag: its own
    path.write_text("half")                                                              # killed mid-write
    assert grading.evaluation_secret(tmp_path / "results" / "tag") not in (secret, "half")


@pytest.fixture(params=["night", "replay"])
def executor(tmp_path, request):
    root = tmp_path / "repo"
    root.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", "-C", str(root), *args], check=True)
    (root / "train.py").write_text(STEP)
    (root / "evaluate.py").write_text(STEP)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "base"], check=True)
    night = root / "results" / "t"
    workspace = Workspace.open(root, "t", night / "worktree")
    # a replay's runs live deeper (results/t/replays/<id>/) and must not read the night's secret either
    results = night if request.param == "night" else night / "replays" / "r1"
    on_disk = night / grading.SECRET_FILE
    grading.evaluation_secret(night)
    plan = RunPlan(command=f"python train.py {on_disk}", metric="score", budget_s=20, grace_s=10,
                   protected=("evaluate.py",), limits=Limits(memory_mb=None), python=sys.executable,
                   writable_workdir=True, evaluate=f"python evaluate.py {on_disk}")
    yield RunExecutor(plan=plan, runner=LocalRunner(kill_grace_s=1.0), workspace=workspace,
                      ledger=Ledger(results), data=PreparedData(tmp_path, {}), results_dir=results,
                      private_root=root / "results"), workspace
    workspace.close()


def test_only_the_evaluation_step_gets_the_secret(executor):
    executor, workspace = executor
    job = executor.prepare(workspace.head(), 5, "reference", None)
    secret = (executor.results_dir / grading.SECRET_FILE).read_text()
    assert grading.SECRET_VARIABLE not in job.spec.env and grading.SECRET_VARIABLE not in job.spec.protocol_env()
    assert job.evaluation.protocol_env()[grading.SECRET_VARIABLE] == secret


def test_a_real_training_step_sees_no_secret_and_the_evaluation_step_does(executor):
    """Through the sandbox: the training step's environment lacks the secret and the results
    folder holding it is hidden from it; the evaluation step gets it; the ledger never
    holds it."""
    executor, workspace = executor
    run = executor.run(workspace.head(), 5, "reference", None)
    secret = (executor.results_dir / grading.SECRET_FILE).read_text()
    training = json.loads(next((executor.runs_dir / run.run_id).glob("out/result.json")).read_text())
    evaluation = json.loads(next((executor.runs_dir / run.run_id).glob("eval/out/result.json")).read_text())
    assert training["secret_length"] == 0 and evaluation["secret_length"] == 64, (training, evaluation)
    provenance = json.loads((executor.runs_dir / run.run_id / "provenance.json").read_text())
    if provenance["sandbox"].get("other_runs_hidden"):   # where the sandbox has a mount namespace
        assert training["secret_on_disk"] == 0           # results/ is hidden from the run
    assert secret not in executor.ledger.path.read_text()
    assert secret not in (executor.runs_dir / run.run_id / "provenance.json").read_text()
