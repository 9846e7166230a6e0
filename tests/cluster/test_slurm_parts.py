"""The Slurm backend's parts that need no cluster: every path of a job moved by one function
(a two-step job included), Slurm's states read as run statuses, what each job asks for, the
environment a job gets, program.md's `slurm:` table, and the start's check of the shared
directory (a clear error before anything is written)."""
import dataclasses
from pathlib import Path

import pytest

from agent.program import ProgramError, parse_program
from cluster.protocol import Job, JobOutcome
from cluster.slurm_jobs import Request, job_deadline_s, job_environment
from cluster.slurm_node import probe
from cluster.slurm_queue import JobState, Partition, ending, minutes
from cluster.slurm_settings import SlurmSettings, job_prefix, time_limit_min
from cluster.staging import Relocation, StagingError, paths_in, relocate, run_folder
from sandbox import RunResult, RunSpec, Status
from sandbox.protocol import DataMount
from tests.loop_helpers import cli_env, make_repo, nightshift
from tests.night.test_scheduler import PROGRAM, SLEEPY
from tests.needs import needs


def spec(root: Path, run: str = "r1", step: str = "out") -> RunSpec:
    return RunSpec(command="python t.py", snapshot_dir=root / "snapshots" / "abc",
                   data_dir=root / "data", out_dir=root / "runs" / run / step, seed=3, budget_s=60,
                   metric="val_bpb", grace_s=30,
                   mounts=(DataMount("data/x", root / "repo" / "data" / "x"),))


@dataclasses.dataclass(frozen=True)
class TwoStepJob(Job):
    """A job with a second step, as the grader-apart run has: its own snapshot and data, and
    the first step's out folder as its input."""

    evaluation: RunSpec | None = None


def two_step(root: Path) -> TwoStepJob:
    train = spec(root)
    evaluation = dataclasses.replace(spec(root, step="eval"), snapshot_dir=root / "grader",
                                     data_dir=root / "heldout", mounts=(DataMount("model", train.out_dir),))
    return TwoStepJob(run_id="r1", spec=train, protected=("train/prepare.py",), evaluation=evaluation)


def test_every_path_of_a_two_step_job_moves_and_comes_back(tmp_path):
    job = two_step(tmp_path)
    shared = Path("/shared/area")
    own = run_folder(job)
    assert own == tmp_path / "runs" / "r1"
    table = {own: shared / "runs" / "r1"}
    for i, path in enumerate(p for p in paths_in(job) if not p.is_relative_to(own)):
        table[path] = shared / "inputs" / str(i)
    there = Relocation.of(table)
    moved = relocate(job, there)
    assert all(path.is_relative_to(shared) for path in paths_in(moved))    # nothing left behind
    assert moved.evaluation.out_dir == shared / "runs" / "r1" / "eval"
    # the second step reads the first step's out folder where the node wrote it
    assert moved.evaluation.mounts[0].source == moved.spec.out_dir
    assert moved.protected == job.protected and moved.spec.seed == 3
    assert relocate(moved, there.inverse()) == job


def test_a_path_with_no_place_on_the_node_is_a_harness_error_not_a_silent_miss(tmp_path):
    job = two_step(tmp_path)
    with pytest.raises(StagingError, match="no place"):
        relocate(job, Relocation.of({run_folder(job): Path("/shared/runs/r1")}))
    outside = dataclasses.replace(job, evaluation=dataclasses.replace(job.evaluation, out_dir=tmp_path / "elsewhere"))
    with pytest.raises(StagingError, match="outside the run folder"):
        run_folder(outside)


def test_an_outcome_comes_back_with_the_harness_paths(tmp_path):
    result = RunResult(status=Status.OK, exit_code=0, metric=1.0, metrics={}, duration_s=1.0,
                       peak_memory_mb=None, log_path=Path("/shared/runs/r1/log.txt"), log_tail="",
                       backend="local", started_at="", ended_at="", work_dir=Path("/shared/runs/r1/work"))
    back = relocate(JobOutcome("r1", 0, result), Relocation.of({Path("/shared/runs/r1"): tmp_path / "r1"},
                                                              keep=(Path("/"),)))
    assert back.result.log_path == tmp_path / "r1" / "log.txt"
    assert back.result.work_dir == tmp_path / "r1" / "work"


def test_the_time_limit_covers_every_step_and_the_start_up():
    job = two_step(Path("/x"))
    assert job_deadline_s(job) == 2 * 90
    assert time_limit_min(job_deadline_s(job), SlurmSettings()) == 6      # (180 + 180) / 60
    assert time_limit_min(90, SlurmSettings(time_s=600)) == 10


@pytest.mark.parametrize("state, mine, status, again, words", [
    ("CANCELLED", True, Status.INTERRUPTED, False, "cancelled by the harness"),
    ("CANCELLED", False, Status.INTERRUPTED, True, "outside Nightshift"),
    ("PREEMPTED", False, Status.INTERRUPTED, True, "preempted"),
    ("REQUEUED", False, Status.INTERRUPTED, True, "requeued"),
    ("TIMEOUT", False, Status.TIMEOUT, False, "time limit (7 min)"),
    ("OUT_OF_MEMORY", False, Status.OOM, False, "memory"),
    ("NODE_FAIL", False, Status.CRASH, False, "only this run is lost"),
    ("FAILED", False, Status.CRASH, False, "ended FAILED"),
])
def test_how_a_job_ended_is_read_as_the_run_status(state, mine, status, again, words):
    said = ending(JobState("42", "x", state, "n1"), cancelled_by_us=mine, time_limit_min=7)
    assert (said.status, said.again) == (status, again)
    assert words in said.reason and "42" in said.reason


def test_slurm_time_limits_read_as_minutes():
    assert [minutes(t) for t in ("60", "30:00", "1:00:00", "2-00:00:00", "1-12", "1-12:30", "infinite")] \
        == [60, 30, 60, 2880, 2160, 2190, None]


def partition(**fields) -> dict[str, Partition]:
    base = dict(name="gpu", nodes=2, cpus=16, gpus=8, memory_mb=500_000, default=True, up=True)
    return {"gpu": Partition(**{**base, **fields})}


def test_one_gpu_per_run_where_the_partition_has_gpus_else_a_worker_share_of_the_cpus():
    gpu = Request.plan(SlurmSettings(account="lab", qos="normal"), partition(), 4, None, 8192)
    params = gpu.parameters("nightshift-t-abc-r1", 5)
    extra = params["additional_parameters"]
    assert extra["gres"] == "gpu:1" and extra["no-requeue"] is True and extra["mem"] == "8704M"
    assert params["cpus_per_task"] == 2 and params["partition"] == "gpu"      # 16 CPUs / 8 GPUs
    assert (params["account"], params["qos"], params["time"]) == ("lab", "normal", 5)
    cpu = Request.plan(SlurmSettings(), partition(gpus=0), 4, None, None)
    assert cpu.gpus == 0 and cpu.cpus == 8 and "gres" not in cpu.parameters("n", 5)["additional_parameters"]
    assert Request.plan(SlurmSettings(), partition(gpus=0), 4, 3.0, None).cpus == 3   # limits.cpus
    assert Request.plan(SlurmSettings(), partition(), None, None, None).slots == 16    # auto: the GPUs


def test_the_request_is_refused_when_the_partition_cannot_hold_it():
    from cluster.protocol import ClusterUnavailable

    with pytest.raises(ClusterUnavailable, match="no GPUs"):
        Request.plan(SlurmSettings(gpus=1), partition(gpus=0), 1, None, None)
    with pytest.raises(ClusterUnavailable, match="lower limits.memory"):
        Request.plan(SlurmSettings(), partition(memory_mb=4096), 1, None, 8192)
    with pytest.raises(ClusterUnavailable, match="sinfo shows gpu"):
        Request.plan(SlurmSettings(partition="cpu"), partition(), 1, None, None)


@needs("submitit")
def test_the_job_script_submitit_writes_holds_the_request():
    from submitit.slurm.slurm import _make_sbatch_string

    request = Request.plan(SlurmSettings(setup=("module load cuda/12.4",), sbatch={"constraint": "a100"}),
                           partition(), 2, None, 1024)
    text = _make_sbatch_string(command="python -m x", folder="/tmp/f", **request.parameters("job", 4))
    for line in ("#SBATCH --gres=gpu:1", "#SBATCH --no-requeue", "#SBATCH --time=4",
                 "#SBATCH --partition=gpu", "#SBATCH --constraint=a100", "#SBATCH --mem=1536M",
                 "#SBATCH --cpus-per-task=2", "#SBATCH --job-name=job", "module load cuda/12.4"):
        assert line in text, line
    assert "srun" not in text     # python runs in the batch step, with every CPU it was given


def test_a_job_gets_no_secret_of_the_harness():
    env = job_environment({"PATH": "/bin", "PYTHONPATH": "/src", "ANTHROPIC_API_KEY": "sk-x",
                           "OPENAI_API_KEY": "sk-y", "AWS_SECRET_ACCESS_KEY": "z", "HF_TOKEN": "t",
                           "LC_ALL": "C", "SLURM_CONF": "/etc/slurm.conf"})
    assert env == {"PATH": "/bin", "PYTHONPATH": "/src", "LC_ALL": "C", "SLURM_CONF": "/etc/slurm.conf"}


def test_job_names_carry_the_tag_and_tell_two_checkouts_apart(tmp_path):
    one, two = job_prefix("dec01", tmp_path / "a" / "results" / "dec01"), job_prefix("dec01", tmp_path / "b")
    assert one.startswith("nightshift-dec01-") and one != two


def test_the_probe_says_whether_the_node_sees_the_file(tmp_path):
    token = tmp_path / "probe-x"
    token.write_text("hello")
    assert probe(str(token), "hello")["seen"] is True
    assert probe(str(tmp_path / "nothing"), "hello")["seen"] is False


# ---- program.md's slurm: table ---------------------------------------------------------------

FRONT = "---\ntarget: t.py\nprotected: []\nprepare: null\nresearcher: scripted\ncluster: slurm\n{}---\nprose\n"


@pytest.mark.parametrize("extra, line, words", [
    ("", 6, "'slurm.shared_dir': cluster slurm needs a folder every node sees"),
    ("slurm: {shared_dir: relative/dir}\n", 7, "expected an absolute folder path"),
    ("slurm: {shared_dir: /tmp, time: 1m}\n", 7, "'slurm.time': 1 min is too short for budget + grace"),
    ("slurm: {shared_dir: /tmp, gpus: 2}\n", 7, "'slurm.gpus': expected auto"),
    ("slurm: {shared_dir: /tmp, partition: my gpu}\n", 7, "without spaces"),
    ("slurm: {shared_dir: /tmp, sbatch: {time: 10}}\n", 7, "'slurm.sbatch.time': --time is Nightshift's to set: use slurm.time"),
    ("slurm: {shared_dir: /tmp, sbatch: {export: ALL}}\n", 7, "no secrets reach a node"),
    ("slurm: {shared_dir: /tmp, sbatch: {Mail-Type: END}}\n", 7, "not an sbatch long option"),
    ("slurm:\n  shared_dir: /tmp\n  acount: lab\n", 9, "unknown key 'acount' (did you mean 'account'?)"),
])
def test_a_bad_slurm_table_names_the_file_line_and_field(extra, line, words):
    with pytest.raises(ProgramError) as error:
        parse_program(FRONT.format(extra), "program.md")
    assert f"program.md:{line}:" in str(error.value) and words in str(error.value)


def test_a_typical_cluster_program_reads_into_typed_settings():
    program = parse_program(FRONT.format(
        "slurm:\n  shared_dir: /checkpoint/alice/nightshift\n  partition: gpu\n  account: lab-ml\n"
        "  qos: normal\n  time: 20m\n  gpus: auto\n  setup: [module load cuda/12.4]\n"
        "  sbatch: {constraint: a100, exclusive: true}\n"), "program.md")
    assert program.slurm == SlurmSettings(
        shared_dir="/checkpoint/alice/nightshift", partition="gpu", account="lab-ml", qos="normal",
        time_s=1200.0, gpus=None, setup=("module load cuda/12.4",),
        sbatch={"constraint": "a100", "exclusive": True})
    again = program.with_overrides(workers=4)        # the table survives an override unchanged
    assert again.slurm == program.slurm and again.workers == 4


@pytest.mark.parametrize("shared, words", [
    ("/nonexistent/nightshift-shared", "does not exist"),
    (None, "needs a folder every node sees"),
])
def test_a_missing_shared_directory_is_a_clear_error_at_start_with_nothing_written(tmp_path, shared, words):
    table = f"slurm: {{shared_dir: {shared}}}\n" if shared else ""
    repo = make_repo(tmp_path / "user", {"sleepy.py": SLEEPY,
                                         "program.md": PROGRAM.replace("---\nSleep", f"{table}---\nSleep")})
    done = nightshift(repo, "run", "--tag", "nosh", "--cluster", "slurm", "--max-experiments", "1",
                      env=cli_env(tmp_path / "data"), timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "field 'slurm.shared_dir'" in done.stderr and words in done.stderr
    assert not (repo / "results" / "nosh").exists()


def test_status_shows_queued_and_running_jobs_and_the_time_spent_in_the_queue(tmp_path):
    from rich.console import Console

    from agent.cli.display import print_status
    from agent.record.events import LoopStarted, Role, RunBegan, RunFinished, RunQueued, RunStarted
    from agent.record.ledger import Ledger

    ledger = Ledger(tmp_path / "t")
    ledger.append(LoopStarted(tag="t", base_commit="b" * 40, workers=2, cluster="slurm"))
    run = dict(commit="b" * 40, role=Role.REFERENCE)
    for run_id, seed in (("r1", 0), ("r2", 1)):
        ledger.append(RunStarted(run_id=run_id, seed=seed, **run))
        ledger.append(RunQueued(run_id=run_id, job_id=f"4{seed}"))
    ledger.append(RunBegan(run_id="r2", job_id="41", node="n7", queued_s=95.0))
    ledger.append(RunStarted(run_id="r3", seed=2, **run))
    ledger.append(RunFinished(run_id="r3", seed=2, status=Status.OK, metric=1.0, started=1000.0,
                              ended=1060.0, queued_s=30.0, job_id="42", node="n7", **run))
    ledger.append(RunStarted(run_id="r4", seed=3, **run))
    ledger.append(RunFinished(run_id="r4", seed=3, status=Status.INTERRUPTED, job_state="PREEMPTED",
                              queued_s=10.0, job_id="43", reason="Slurm preempted job 43", **run))
    assert set(ledger.state.dispatched) == {"r1", "r2"}
    console = Console(record=True, width=200)
    print_status(console, ledger.dir, "val_bpb", ledger.state)
    text = console.export_text()
    assert "queued as job 40 since" in text
    assert "on n7 (job 41) after 95s queued" in text
    assert "queue: 2 runs waited 40 s in all before they began (median 20 s, longest 30 s)" in text
    assert "taken back by the cluster (not results; their seeds run again): preempted 1" in text
