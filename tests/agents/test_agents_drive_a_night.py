"""The real Claude Code and Codex drive a whole night through the shipped skill: installed with
`nightshift skill`, read by each CLI where it looks, and its documented commands run by the CLI's
own shell tool (the fake model plays them, reading each command's JSON to decide the next).

Started from inside the agent's session with no --researcher, the night's researcher is the
agent (external): the API key the agent's commands inherit never starts a second, nested
researcher. The fake model would see such a researcher's requests as steps past its script."""
from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from tests.agents.drive import base_env, run_claude_code, run_codex
from tests.fakes.agent_models import final, read_file, shell, use_skill, write_file
from tests.interface.toy_target import PROGRAM, toy_files
from tests.loop_helpers import PROJECT, cli_env, end_detached_night, loop_state, make_repo, nightshift
from tests.needs import needs

pytestmark = needs("agent_clis")
TAG = "agentnight"
WAIT = f"nightshift wait --tag {TAG} p0001 --timeout 25s --json"   # Codex yields a command at 30 s


def shim(folder: Path) -> Path:
    """`nightshift` on the agent's PATH, as an install puts it there: this checkout's CLI."""
    folder.mkdir()
    script = folder / "nightshift"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m agent.cli "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def night_script(skill_seen: list[str]) -> list:
    def start(turn):
        skill_seen.append(turn.result.attached or turn.result.output)
        return shell(f"nightshift run --tag {TAG} --agent-silence 2m --detach", wait_s=25)

    def edit(turn):
        return read_file(turn.result.json()["target_path"])

    def improve(turn):
        path = turn.history[-2].json()["target_path"]
        return write_file(path, turn.result.output.replace("LR = 1.0", "LR = 0.3"))

    def wait_again(turn):   # a wait that timed out (exit 6) is asked again, as the skill says
        if turn.result.exit_code == 6:
            return shell(WAIT, wait_s=28)
        return shell(f"nightshift status --tag {TAG} --json")

    def verdict(turn):
        decided = next(r.json() for r in reversed(turn.history) if '"nightshift.experiment/1"' in r.output)
        return final(f"{decided['id']}: {decided['verdict']}")

    return [use_skill("nightshift"), start,
            shell(f"nightshift checkout --tag {TAG} --json", wait_s=120), edit, improve,
            shell(f'nightshift propose --tag {TAG} -m "LR 1.0 -> 0.3" --hypothesis "the optimum is '
                  f'near 0.3" --predict improve --delta -0.45 --interval -0.6,-0.3 --json'),
            shell(WAIT, wait_s=28), wait_again, wait_again,
            shell(f"nightshift done --tag {TAG} --json"), verdict]


RUNNERS = {"claude": lambda repo, steps, env: run_claude_code(repo, "Run a Nightshift night and improve val_bpb.",
                                                                steps, max_turns=20, timeout=400, env=env),
           "codex": lambda repo, steps, env: run_codex(repo, "Run a Nightshift night and improve val_bpb.",
                                                        steps, timeout=400, env=env)}


@pytest.mark.parametrize("cli", RUNNERS)
def test_a_real_coding_agent_runs_a_night_through_the_skill(cli, tmp_path):
    repo = make_repo(tmp_path / "user", toy_files(PROGRAM.replace("researcher: external", "researcher: auto")))
    installed = nightshift(repo, "skill", env=cli_env(tmp_path / "data"))
    assert installed.returncode == 0, installed.stderr
    env = {"PATH": f"{shim(tmp_path / 'bin')}{os.pathsep}{base_env(tmp_path)['PATH']}",
           "PYTHONPATH": str(PROJECT), "NIGHTSHIFT_DATA_ROOT": str(tmp_path / "data"), "COLUMNS": "120"}
    skill_seen: list[str] = []
    try:
        check_the_night(cli, repo, env, skill_seen)
    finally:
        end_detached_night(repo, TAG)


def check_the_night(cli: str, repo: Path, env: dict, skill_seen: list[str]) -> None:
    run = RUNNERS[cli](repo, night_script(skill_seen), env)

    assert run.exit_code == 0 and run.rejections == [], run.explain()
    assert "nightshift propose" in skill_seen[0]          # the skill's body reached the model
    assert run.final_text == "e0001: keep", run.explain()
    ledger = repo / "results" / TAG / "ledger.jsonl"
    deadline = time.monotonic() + 120
    while '"loop_stopped"' not in ledger.read_text() and time.monotonic() < deadline:
        time.sleep(0.5)                                    # the night the agent started ends on `done`
    state = loop_state(repo, TAG)
    assert state.stopped_reason == "the agent ended the night", (repo / "results" / TAG / "night.log").read_text()
    started = next(json.loads(line) for line in ledger.read_text().splitlines() if '"loop_started"' in line)
    session = "Claude Code" if cli == "claude" else "Codex"
    assert started["researcher"] == "external" and f"started from a {session} session" in started["researcher_why"]
    experiment = state.experiments["e0001"]
    assert experiment.extra["proposal"] == "p0001" and experiment.verdict == "keep"
    assert experiment.prediction.expected_delta == -0.45    # what the agent registered before the run
    # no nested researcher: every request the model server saw was one of the script's steps
    assert len(run.requests) == len(night_script([]))
