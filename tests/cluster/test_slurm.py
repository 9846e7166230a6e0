"""The Slurm backend on a real cluster (munged, slurmctld, two slurmd on loopback): runs land as
real jobs and come back, two workers keep two jobs running, a job cancelled or preempted is
not a result and its seed runs again, a node that fails fails only its run, Ctrl-C leaves
nothing queued, a kill -9 with jobs queued and running resumes with nothing lost, duplicated
or left in squeue, a candidate that writes a protected file is tampered on a node as here, and
every daemon listens on 127.0.0.1 only. The runs are sleep-paced: seconds each."""
import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from agent.decide.sequential import SequentialRule
from agent.record.events import Role, Verdict
from cluster.slurm_settings import job_prefix
from sandbox import Status
from tests.loop_helpers import cli_env, events, git_out, loop_state, make_repo, nightshift
from tests.cluster.graded import GRADE, GRADED_PROGRAM, GRADED_SCRIPT, PREPARE
from tests.night.test_scheduler import PROGRAM, SLEEPY, assert_no_run_twice, finished_runs, most_at_once
from tests.needs import needs

pytestmark = needs("slurm")


def slurm_repo(tmp_path: Path, delay: str, baseline: int = 2, graded: bool = False, **slurm: str) -> Path:
    """A sleep-paced repository on the Slurm cluster; `graded`: scored by a protected evaluator
    in its own step on the node, over data whose val and test splits training must not see."""
    shared = tmp_path / "shared"
    shared.mkdir()
    cpus = slurm.pop("cpus", None)
    table = ", ".join(f"{k}: {v}" for k, v in {"shared_dir": str(shared), **slurm}.items())
    limits = f"limits: {{memory: 1g, cpus: {cpus}}}\n" if cpus else "limits: {memory: 1g}\n"
    program = (GRADED_PROGRAM if graded else PROGRAM).replace(
        "---\nSleep", f"cluster: slurm\nslurm: {{{table}}}\n{limits}---\nSleep")
    program = program.replace("baseline: 4", f"baseline: {baseline}").replace(
        "protected: [", "protected: [judge.py, ").replace(", ]", "]")
    files = {"sleepy.py": (GRADED_SCRIPT if graded else SLEEPY).replace("DELAY = 0.5", f"DELAY = {delay}"),
             "judge.py": "# the evaluation a candidate must not touch\n", "program.md": program}
    if graded:
        files.update({"prep.py": PREPARE, "grade.py": GRADE})
    return make_repo(tmp_path / "user", files)


def squeue() -> dict[str, tuple[str, str]]:
    """job id -> (name, state) of every job Slurm still knows."""
    out = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i|%j|%T"], capture_output=True,
                         text=True, check=True).stdout
    return {i: (n, s) for i, n, s in (line.split("|") for line in out.splitlines() if line)}


def active_jobs_of(repo: Path, tag: str) -> list[str]:
    prefix = job_prefix(tag, repo / "results" / tag)
    return [f"{i} {n} {s}" for i, (n, s) in squeue().items()
            if n.startswith(prefix) and s in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING")]


def ledger_lines(repo: Path, tag: str) -> list[dict]:
    path = repo / "results" / tag / "ledger.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait_for(what: str, check, proc: subprocess.Popen | None = None, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the harness exited ({proc.returncode}) before {what}")
        time.sleep(0.2)
    if proc is not None:
        proc.kill()
    pytest.fail(f"{what} did not happen within {timeout:.0f} s")


def harness(repo: Path, tag: str, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", tag, *args], cwd=repo,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def script_job(root: Path, run_id: str, script: str, budget_s: float = 60):
    """A Job running `script` as train.py (the snapshot made once under `root`)."""
    from cluster.protocol import Job
    from sandbox.protocol import Limits, RunSpec

    snapshot = root / "snapshot"
    if not snapshot.exists():
        snapshot.mkdir()
        (snapshot / "train.py").write_text(script)
        (root / "data").mkdir()
    out = root / "runs" / run_id / "out"
    out.mkdir(parents=True)
    return Job(run_id=run_id, spec=RunSpec(command=f"{sys.executable} train.py", snapshot_dir=snapshot,
                                           data_dir=root / "data", out_dir=out, seed=0,
                                           budget_s=budget_s, grace_s=10, metric="val_bpb",
                                           limits=Limits(memory_mb=256)))


def slurm_workers(root: Path, tag: str, done, news: list, **settings):
    from cluster.select import make_workers
    from cluster.slurm_settings import SlurmSettings
    from sandbox.local import LocalRunner

    (root / "shared").mkdir(exist_ok=True)
    return make_workers("slurm", runner=LocalRunner(), sandbox="local", image="",
                        workers=settings.pop("workers", 1), on_done=done.put,
                        slurm=SlurmSettings(shared_dir=str(root / "shared"), **settings),
                        job_prefix=job_prefix(tag, root), memory_mb=256, on_dispatched=news.append)


def test_every_slurm_daemon_listens_on_loopback_only(slurm_conf):
    listeners = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    ours = [line for line in listeners.splitlines() if re.search(r'"(slurmctld|slurmd)"', line)]
    assert ours, "no slurmctld or slurmd listener found"
    for line in ours:
        assert line.split()[3].startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")), line


def test_a_night_runs_as_real_jobs_two_at_a_time_and_everything_comes_back(tmp_path, slurm_conf):
    repo = slurm_repo(tmp_path, delay="1.0", graded=True)
    done = nightshift(repo, "run", "--tag", "sl", "--workers", "2", "--max-experiments", "2",
                      env=cli_env(tmp_path / "data"), timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "sees" in done.stdout and "probe job" in done.stdout      # the start's probe ran
    state = loop_state(repo, "sl")
    runs = finished_runs(state)
    assert runs and all(r.ok for r in runs), [r.reason for r in runs if not r.ok]
    for run in runs:
        assert run.node in {"n1", "n2"} and run.job_id and run.queued_s is not None
        folder = repo / "results" / "sl" / "runs" / run.run_id
        trained = json.loads((folder / "out" / "result.json").read_text())   # back from the node
        assert run.measured_by == "evaluator" and run.metric == trained["model"] + 0.001
        assert trained["train"] == "train bytes" and trained["val_size"] == 0   # val hidden from training
        assert trained["source_size"] is None           # and its source: outside the run's view
        assert "val_bpb:" in (folder / "eval" / "log.txt").read_text()          # the evaluation's, back too
        assert (folder / "log.txt").exists() and (folder / "slurm.log").exists()
        provenance = json.loads((folder / "provenance.json").read_text())
        assert provenance["worker"]["job_id"] == run.job_id and provenance["worker"]["node"] == run.node
    assert len({r.job_id for r in runs}) == len(runs)                  # one job per run
    assert most_at_once(runs) >= 2                                     # --workers 2: two at once
    held, most = set(), 0                     # ...and never more than two queued or running
    for event in ledger_lines(repo, "sl"):
        if event["event"] == "run_queued":
            held.add(event["run_id"])
        elif event["event"] == "run_finished":
            held.discard(event["run_id"])
        most = max(most, len(held))
    assert most == 2
    assert {r.node for r in runs} == {"n1", "n2"}
    lines = ledger_lines(repo, "sl")
    for run in runs:            # queued, then began, then finished, under one job id
        kinds = [(e["event"], e.get("job_id")) for e in lines if e.get("run_id") == run.run_id
                 and e["event"] != "run_unpaired"]     # early stopping's note: no progress lines
        assert kinds == [("run_started", None), ("run_queued", run.job_id), ("run_began", run.job_id),
                         ("run_finished", run.job_id)], kinds
    started = next(e for e in events(repo, "sl") if e["event"] == "loop_started")
    assert started["cluster"] == "slurm" and started["workers"] == 2 and started["cluster_facts"]["partition"] == "debug"
    jobs = squeue()    # (a run the loop stopped needing as it finished may be CANCELLED)
    assert all(jobs[r.job_id][1] in ("COMPLETED", "CANCELLED") for r in runs if r.job_id in jobs)
    assert active_jobs_of(repo, "sl") == []
    area = tmp_path / "shared" / "nightshift" / job_prefix("sl", repo / "results" / "sl")
    assert list((area / "runs").iterdir()) == [] and list((area / "submitit").iterdir()) == []
    shown = nightshift(repo, "status", "--tag", "sl", env=cli_env(tmp_path / "data"), timeout=60)
    assert re.search(r"queue: \d+ runs waited .* before they began", shown.stdout), shown.stdout
    assert "before they began" in (repo / "results" / "sl" / "report.html").read_text()   # the report
    assert git_out(repo, "rev-parse", "nightshift/sl") == state.incumbent


def node_back(node: str) -> None:
    """Return a node marked down to service (ReturnToService=2 may have done it already)."""
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
    wait_for(f"{node} back in service", lambda: "idle" in subprocess.run(
        ["sinfo", "-h", "-N", "-n", node, "-o", "%t"], capture_output=True, text=True).stdout, timeout=60)


def test_a_job_cancelled_or_preempted_is_not_a_result_and_a_node_failure_fails_only_its_run(
        tmp_path, slurm_conf):
    # one worker on partition `preempt`, whose jobs a job of `debug` requeues; each run takes a node
    repo = slurm_repo(tmp_path, delay="6.0", partition="preempt")
    env = cli_env(tmp_path / "data")
    proc = harness(repo, "pre", env, "--workers", "1")

    def began(skip: set[str]):
        return next((e for e in ledger_lines(repo, "pre") if e["event"] == "run_began"
                     and e["run_id"] not in skip), None)

    def finished(run_id: str):
        return next((e for e in ledger_lines(repo, "pre") if e["event"] == "run_finished"
                     and e["run_id"] == run_id), None)

    first = wait_for("a job began", lambda: began(set()), proc)
    time.sleep(1.0)
    subprocess.run(["scancel", first["job_id"]], check=True)               # someone else's scancel
    cancelled = wait_for("the cancelled run was recorded", lambda: finished(first["run_id"]), proc)
    second = wait_for("another job began", lambda: began({first["run_id"]}), proc)
    time.sleep(1.0)
    blocker = subprocess.run(["sbatch", "--parsable", "-p", "debug", "-w", second["node"], "-c", "2",
                              "-J", "blocker", "-o", "/dev/null", "--wrap", "sleep 2"],
                             capture_output=True, text=True, check=True).stdout.strip()
    preempted = wait_for("the preempted run was recorded", lambda: finished(second["run_id"]), proc)
    third = wait_for("a third job began", lambda: began({first["run_id"], second["run_id"]}), proc)
    time.sleep(1.0)
    subprocess.run(["scontrol", "update", f"nodename={third['node']}", "state=down",
                    "reason=nightshift-test"], check=True)                # the node fails under it
    failed = wait_for("the node failure was recorded", lambda: finished(third["run_id"]), proc)
    node_back(third["node"])

    def ran_again(event) -> bool:
        return any(e["event"] == "run_finished" and e["status"] == "ok" and e["seed"] == event["seed"]
                   and e["commit"] == event["commit"] and e["role"] == event["role"]
                   for e in ledger_lines(repo, "pre"))

    wait_for("the seeds ran again", lambda: all(ran_again(e) for e in (cancelled, preempted, failed)),
             proc, 240)
    proc.send_signal(signal.SIGINT)                                       # Ctrl-C: the exit path
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert cancelled["status"] == "interrupted" and cancelled["job_state"] == "CANCELLED"
    assert "cancelled outside Nightshift" in cancelled["reason"] and "runs again" in cancelled["reason"]
    assert preempted["status"] == "interrupted" and preempted["job_state"] == "PREEMPTED"
    assert "preempted" in preempted["reason"] and squeue()[blocker][1] == "COMPLETED"
    assert failed["status"] == "crash" and failed["job_state"] == "NODE_FAIL"
    assert "only this run is lost" in failed["reason"]
    state = loop_state(repo, "pre")
    assert not state.in_flight and state.stopped_reason == "interrupted"   # the night went on
    assert [r.run_id for r in state.runs if r.status == Status.CRASH] == [third["run_id"]]
    assert {r.run_id for r in state.interrupted} >= {first["run_id"], second["run_id"]}
    # taken back, not recorded as a second result: each (commit, seed, role, experiment) ends OK
    # once (a bracket is its own), but for the seeds the night runs twice on purpose (the
    # regime's re-run of a baseline seed, `repeat_seeds`), once the night got that far
    ok = Counter((r.commit, r.seed, r.role, r.experiment) for r in state.runs if r.ok)
    on_purpose = set(SequentialRule().repeat_seeds())
    assert all(n == 1 or (n == 2 and role == Role.REFERENCE and experiment is None and seed in on_purpose)
               for (_, seed, role, experiment), n in ok.items()), ok
    assert active_jobs_of(repo, "pre") == [], "Ctrl-C left a job of the tag in Slurm"
    shown = nightshift(repo, "status", "--tag", "pre", env=env, timeout=60)
    said = " ".join(shown.stdout.split())
    assert "taken back by the cluster (not results; their seeds run again): cancelled 1, preempted 1" \
        in said, shown.stdout


def test_kill_9_with_jobs_queued_and_running_resumes_with_nothing_lost_duplicated_or_left_queued(
        tmp_path, slurm_conf):
    # two CPUs per run: two jobs fill the two nodes and a third waits in the queue
    repo = slurm_repo(tmp_path, delay="3.0", baseline=6, cpus="2")
    env = cli_env(tmp_path / "data")
    proc = harness(repo, "k9", env, "--workers", "3", "--max-experiments", "2")

    def in_flight():
        lines = ledger_lines(repo, "k9")
        done = {e["run_id"] for e in lines if e["event"] == "run_finished"}
        ok = [e["run_id"] for e in lines if e["event"] == "run_finished" and e["status"] == "ok"]
        running = {e["run_id"]: e["job_id"] for e in lines if e["event"] == "run_began"
                   and e["run_id"] not in done}
        queued = {e["run_id"]: e["job_id"] for e in lines if e["event"] == "run_queued"
                  and e["run_id"] not in done and e["run_id"] not in running}
        return (ok, {**running, **queued}) if ok and len(running) >= 2 and queued else None

    ok_before, old_jobs = wait_for("two jobs running and one queued, after a result", in_flight, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    jobs = squeue()
    alive = [j for j in old_jobs.values() if jobs.get(j, ("", ""))[1] in ("PENDING", "RUNNING")]
    assert len(alive) >= 2, "the premise: Slurm jobs outlive the harness that submitted them"
    script = tmp_path / "script.json"     # the resumed night: a candidate that writes the judge
    script.write_text(json.dumps([{"replace": ["time.sleep(DELAY)",
                                               "os.remove('judge.py'); open('judge.py', 'w').write('x')\ntime.sleep(DELAY)"],
                                   "description": "rewrites the judge"}]))
    again = nightshift(repo, "run", "--tag", "k9", "--workers", "2", "--max-experiments", "1",
                       "--researcher", "scripted", "--script", str(script), env=env, timeout=400)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert re.search(r"cancelled \d+ Slurm jobs? an earlier harness of tag k9 left", again.stdout)
    jobs = squeue()
    for job_id in old_jobs.values():              # nothing of the old invocation ran on
        assert jobs.get(job_id, ("", "CANCELLED"))[1] in ("CANCELLED", "COMPLETED"), (job_id, jobs.get(job_id))
    lines = ledger_lines(repo, "k9")
    resumed_at = next(i for i, e in enumerate(lines) if e["event"] == "loop_resumed")
    assert not [e for e in lines[resumed_at:] if e.get("run_id") in old_jobs], \
        "the resumed night heard from a job of the killed one"
    state = loop_state(repo, "k9")
    assert not state.in_flight and assert_no_run_twice(state) is None
    assert set(ok_before) <= {r.run_id for r in state.runs}                  # nothing lost
    assert set(old_jobs) <= {r.run_id for r in state.interrupted}            # closed, not lost
    assert all(e.decided for e in state.experiments.values())
    # the integrity check holds on a node as here: the candidate that wrote the judge is tampered
    assert state.experiments["e0001"].verdict == Verdict.TAMPERED
    assert "judge.py" in state.experiments["e0001"].decision.reason
    assert git_out(repo, "rev-parse", "nightshift/k9") == state.incumbent
    for experiment in state.experiments.values():
        if experiment.commit and experiment.verdict != Verdict.KEEP:
            assert git_out(repo, "rev-parse", f"refs/nightshift/k9/discarded/{experiment.id}") == experiment.commit
    assert active_jobs_of(repo, "k9") == []


def test_a_runs_lines_reach_the_harness_as_it_prints_them_and_a_cancel_ends_it(tmp_path, slurm_conf):
    import queue

    job = script_job(tmp_path, "r1", "import time\nfor step in (1, 2):\n    print(f'step {step} loss "
                                     "{3 - step}.0', flush=True)\n    time.sleep(0.5)\ntime.sleep(120)\n")
    done, news, lines = queue.Queue(), [], []
    workers = slurm_workers(tmp_path, "unit", done, news)
    try:
        workers.submit(workers.slots[0], job, on_output=lambda run_id, line: lines.append((run_id, line)))
        wait_for("the run's second line", lambda: ("r1", "step 2 loss 1.0") in lines, timeout=120)
        assert done.empty()                       # the lines came while it ran, not at its end
        workers.cancel("r1")
        outcome = done.get(timeout=60)
    finally:
        workers.close()
    assert outcome.result.status == Status.INTERRUPTED and outcome.job_state is None
    assert "cancelled by the harness" in outcome.result.reason
    assert [n.node is None for n in news] == [True, False] and news[1].node in {"n1", "n2"}
    assert outcome.job_id == news[0].job_id and squeue()[outcome.job_id][1] == "CANCELLED"
    log = (tmp_path / "runs" / "r1" / "log.txt").read_text()
    assert log.startswith("step 1 loss 2.0")                      # its log came back


def test_one_gpu_per_run_where_the_partition_has_gpus(tmp_path, slurm_conf):
    """Partition `gpu` of the CI cluster: node n2 with two (fake) GPUs; two runs at once get one each."""
    import queue

    script = ("import json, os, time\ntime.sleep(2)\njson.dump({'val_bpb': 1.0, 'cuda': "
              "os.environ.get('CUDA_VISIBLE_DEVICES')}, open(os.path.join(os.environ['NIGHTSHIFT_OUT'], "
              "'result.json'), 'w'))\n")
    done, news = queue.Queue(), []
    workers = slurm_workers(tmp_path, "gpu", done, news, partition="gpu", workers=2)
    try:
        assert workers.describe()["gpus_per_run"] == 1 and workers.describe()["cpus_per_run"] == 1
        for slot, run_id in zip(workers.slots, ("g1", "g2")):
            workers.submit(slot, script_job(tmp_path, run_id, script))
        outcomes = [done.get(timeout=120) for _ in range(2)]
        workers.submit(workers.slots[0], script_job(tmp_path, "long", script, budget_s=3600))
        too_long = done.get(timeout=60)        # 64 min asked of a partition whose MaxTime is 60
    finally:
        workers.close()
    assert too_long.result is None and "exceeds partition gpu's MaxTime of 60 min" in too_long.error
    assert all(o.result.status == Status.OK and o.node == "n2" for o in outcomes), outcomes
    assert sorted(o.result.metrics["cuda"] for o in outcomes) == ["0", "1"]   # one GPU each
    assert max(o.started for o in outcomes) < min(o.ended for o in outcomes)  # at the same time


def test_a_job_whose_harness_stopped_beating_ends_by_itself(tmp_path, slurm_conf):
    """A kill -9 of the harness with no resume after it: its jobs stop on their own."""
    import queue

    from cluster.slurm import SlurmWorkers
    from cluster.slurm_settings import SlurmSettings

    job = script_job(tmp_path, "r1", "import time\ntime.sleep(120)\n", budget_s=120)
    (tmp_path / "shared").mkdir()
    news: list = []
    workers = SlurmWorkers(settings=SlurmSettings(shared_dir=str(tmp_path / "shared")), sandbox="local",
                           image="", workers=1, on_done=queue.Queue().put, on_dispatched=news.append,
                           job_prefix=job_prefix("beat", tmp_path), memory_mb=256, harness_lost_s=6.0)
    try:
        workers.submit(workers.slots[0], job)
        wait_for("the job began", lambda: any(n.node for n in news), timeout=120)
        job_id = news[0].job_id
        workers._closing.set()                 # the harness's threads stop, as in a kill -9:
        for thread in workers._threads:        # no cancel, no more heartbeats
            thread.join(10)
        ended = wait_for("the job ended by itself", lambda: squeue()[job_id][1] not in
                         ("PENDING", "RUNNING", "COMPLETING"), timeout=60)
        assert ended and squeue()[job_id][1] == "COMPLETED"     # it stopped its run and returned
    finally:
        workers.close(timeout_s=5)
