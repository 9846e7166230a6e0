"""The user's commands on a keep and at a night's end: fed from the ledger by a follower that
keeps its place, given an allow-listed environment, cut off when they hang."""
import json
import time
from pathlib import Path

import pytest

from agent.publish.follow import Follower
from agent.publish.hooks import HOOK_LOG, Hooks, HookSink
from agent.record.events import (Decision, DecisionMade, ExperimentProposed, LoopStarted, LoopStopped,
                                 Verdict)
from agent.record.ledger import Ledger
from agent.record.records import Direction, ExitCode
from tests.loop_helpers import cli_env, loop_state, make_repo, nightshift

SECRET = "https://hooks.example/T000/B000/s3cr3t-webhook"


def proposed(ledger, id, commit):
    ledger.append(ExperimentProposed(id=id, commit=commit, parent="base0000", description=f"LR up ({id})",
                                     hypothesis="a short run wants a larger step", prediction=None,
                                     researcher="scripted"))


def kept(ledger, id, commit, incumbent="base0000"):
    ledger.append(DecisionMade(id=id, commit=commit, incumbent=incumbent, verdict=Verdict.KEEP,
                               reason="p=0.001 <= 0.005 at look 2",
                               decision=Decision(verdict=Verdict.KEEP, effect=0.12, interval=(0.08, 0.16),
                                                 p_value=0.001, seeds=(1000, 1001))))


def sink(tmp_path, results, **hooks):
    return HookSink(Hooks(**hooks), "dec07", "val_bpb", Direction.MINIMIZE, tmp_path, results,
                    timeout_s=hooks.pop("timeout_s", 10) if "timeout_s" in hooks else 10)


def follow(results, hook_sink):
    said = []
    follower = Follower(results, hook_sink, said.append).start()
    return follower, said


def alive(pid: int) -> bool:
    """Running, not a zombie that nobody reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_each_keep_and_the_stop_reach_their_hook_once_across_a_restart(tmp_path, monkeypatch):
    monkeypatch.setenv("SLACK_URL", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-to-a-hook")
    results, got = tmp_path / "results" / "dec07", tmp_path / "got"
    ledger = Ledger(results)
    hooks = dict(on_keep=f"cat >> {got}.keeps; echo >> {got}.keeps; env > {got}.env; echo posted to $SLACK_URL",
                 on_stop=f"cat > {got}.stop", env=("SLACK_URL",))
    follower, said = follow(results, sink(tmp_path, results, **hooks))
    ledger.append(LoopStarted(tag="dec07", base_commit="base0000"))
    proposed(ledger, "e0001", "cand0001")
    kept(ledger, "e0001", "cand0001")
    follower.close(10)                                     # the harness killed here, say
    keeps = read_lines(tmp_path / "got.keeps")
    assert [k["experiment"] for k in keeps] == ["e0001"] and not said
    (keep,) = keeps
    assert keep["event"] == "keep" and keep["commit"] == "cand0001" and keep["replaces"] == "base0000"
    assert keep["effect"] == 0.12 and keep["interval"] == [0.08, 0.16] and keep["seeds"] == 2
    assert keep["description"] == "LR up (e0001)" and keep["metric"] == "val_bpb"
    assert keep["show"] == "nightshift show e0001 --tag dec07"
    env = (tmp_path / "got.env").read_text()
    assert f"SLACK_URL={SECRET}" in env and "NIGHTSHIFT_EVENT=keep" in env
    assert "ANTHROPIC_API_KEY" not in env                  # only what is listed reaches a hook
    log = (results / HOOK_LOG).read_text()
    assert "on_keep (e0001): exit 0" in log and "posted to ***" in log and SECRET not in log

    # the night resumes: the follower goes on from its cursor, nothing is delivered twice
    follower, said = follow(results, sink(tmp_path, results, **hooks))
    proposed(ledger, "e0002", "cand0002")
    kept(ledger, "e0002", "cand0002", incumbent="cand0001")
    ledger.append(LoopStopped(reason="reached --max-experiments 2"))
    follower.close(10)
    assert [k["experiment"] for k in read_lines(tmp_path / "got.keeps")] == ["e0001", "e0002"]
    assert read_lines(tmp_path / "got.keeps")[1]["keeps_so_far"] == 2
    stop = json.loads((tmp_path / "got.stop").read_text())
    assert stop["event"] == "stop" and stop["kept"] == ["e0001", "e0002"] and stop["incumbent"] == "cand0002"
    assert stop["failed"] is False and stop["reason"] == "reached --max-experiments 2"


def test_a_hook_new_to_a_ledger_does_not_replay_its_old_keeps(tmp_path):
    results, got = tmp_path / "results" / "dec07", tmp_path / "got"
    ledger = Ledger(results)
    ledger.append(LoopStarted(tag="dec07", base_commit="base0000"))
    proposed(ledger, "e0001", "cand0001")
    kept(ledger, "e0001", "cand0001")
    follower, _ = follow(results, sink(tmp_path, results, on_keep=f"cat >> {got}; echo >> {got}"))
    proposed(ledger, "e0002", "cand0002")
    kept(ledger, "e0002", "cand0002", incumbent="cand0001")
    follower.close(10)
    (only,) = read_lines(got)
    assert only["experiment"] == "e0002" and only["keeps_so_far"] == 2   # the fold knows e0001


def test_a_hook_that_hangs_is_cut_off_with_its_children_and_one_that_fails_is_said_once(tmp_path):
    results = tmp_path / "results" / "dec07"
    ledger = Ledger(results)
    child = tmp_path / "child.pid"
    hang = HookSink(Hooks(on_keep=f"sleep 300 & echo $! > {child}; wait", on_stop="echo no route >&2; exit 7"),
                    "dec07", "val_bpb", Direction.MINIMIZE, tmp_path, results, timeout_s=1)
    follower, said = follow(results, hang)
    started = time.monotonic()
    ledger.append(LoopStarted(tag="dec07", base_commit="base0000"))
    for n in (1, 2):
        proposed(ledger, f"e000{n}", f"cand000{n}")
        kept(ledger, f"e000{n}", f"cand000{n}")
    ledger.append(LoopStopped(reason="the researcher failed", exit_code=ExitCode.RESEARCHER))
    follower.close(20)
    assert time.monotonic() - started < 10                          # two keeps, a second each
    assert not alive(int(child.read_text()))                       # the hook's child went with it
    assert said == ["hooks: on_keep hook cut off after 1 s (results/dec07/hooks.log); the night goes on",
                    "hooks: on_stop hook failed (exit 7): no route (results/dec07/hooks.log); "
                    "the night goes on"]                            # the second cut-off not said again
    log = (results / HOOK_LOG).read_text()
    assert log.count("cut off after 1 s") == 2 and "on_stop (the researcher failed): failed (exit 7)" in log


LR_SCRIPT = '''\
import json, math, os, random

LR = 0.003          # search: log(1e-4, 0.1)

# a short run wants a larger step: each doubling of LR is worth 0.2 (20 sds of noise)
value = 2.0 - 0.2 * math.log2(LR / 0.003) + random.Random(f"{os.environ['NIGHTSHIFT_SEED']}/{LR}").gauss(0, 0.01)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
    json.dump({"val_bpb": value}, out)
'''

LR_PROGRAM = '''\
---
target: lr.py
protected: []
command: python lr.py
prepare: null
budget: 1s
grace: 30s
seeds: {{baseline: 2, screen: 1, max: 4}}
sandbox: local
researcher: optuna
metric: val_bpb
on_keep: cat > {got}/keep-$NIGHTSHIFT_TAG-$(date +%s%N).json
on_stop: cat > {got}/stop.json
---
Learning rate first.
'''


def tracked_program(tracking: str) -> str:
    """LR_SCRIPT's program.md, a 2-s budget, with `tracking:` in place of the hooks."""
    head, _, rest = LR_PROGRAM.partition("on_keep:")
    return (head.replace("budget: 1s", "budget: 2s").replace("{{", "{").replace("}}", "}")
            + f"tracking: {tracking}\n---" + rest.split("---", 1)[1])


def test_a_night_pings_its_hook_on_each_keep_and_at_its_end(tmp_path):
    got = tmp_path / "got"
    got.mkdir()
    repo = make_repo(tmp_path / "user", {"lr.py": LR_SCRIPT, "program.md": LR_PROGRAM.format(got=got)})
    done = nightshift(repo, "run", "--tag", "lr", "--max-experiments", "2", env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    state = loop_state(repo, "lr")
    keeps = [json.loads(p.read_text()) for p in sorted(got.glob("keep-lr-*.json"))]
    assert [k["experiment"] for k in keeps] == [e.id for e in state.kept()] and keeps
    assert all(k["commit"] == e.commit for k, e in zip(keeps, state.kept()))
    stop = json.loads((got / "stop.json").read_text())
    assert stop["tag"] == "lr" and stop["experiments"] == 2 and stop["incumbent"] == state.incumbent


def test_program_md_names_a_bad_hook_field_and_its_line(tmp_path):
    from agent.program import ProgramError, parse_program

    program = parse_program("---\non_keep: ./ping.sh\nhook_env: [SLACK_WEBHOOK_URL]\n---\n", tmp_path / "program.md")
    assert program.hooks == Hooks(on_keep="./ping.sh", env=("SLACK_WEBHOOK_URL",)) and program.hooks
    assert not parse_program("---\n---\n", tmp_path / "program.md").hooks
    with pytest.raises(ProgramError, match=r"program.md:3: field 'hook_env': 'slack url' is not an "
                                           r"environment variable name"):
        parse_program("---\non_keep: ./ping.sh\nhook_env: [slack url]\n---\n", tmp_path / "program.md")
    with pytest.raises(ProgramError, match=r"program.md:2: field 'on_stop'"):
        parse_program("---\non_stop: [notify, me]\n---\n", tmp_path / "program.md")


def test_a_tracking_uri_with_credentials_is_refused_before_it_reaches_the_ledger(tmp_path):
    from agent.program import ProgramError, parse_program

    with pytest.raises(ProgramError, match=r"program.md:2: field 'tracking.mlflow.uri': the URI holds "
                                           r"credentials.*MLFLOW_TRACKING_USERNAME"):
        parse_program("---\ntracking: {mlflow: 'http://me:s3cret@mlflow.lab:5000'}\n---\n", tmp_path / "program.md")
    repo = make_repo(tmp_path / "user", {"lr.py": LR_SCRIPT, "program.md": LR_PROGRAM.format(got=tmp_path)})
    done = nightshift(repo, "run", "--mlflow", "http://me:s3cret@mlflow.lab:5000", env=cli_env(tmp_path / "data"))
    assert done.returncode == 1 and "--mlflow: the URI holds credentials" in done.stderr
    assert not (repo / "results").exists()                                  # refused before anything
