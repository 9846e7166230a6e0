"""docs/guides/agents.md, followed literally: the commands of its "Try it" block, parsed out of
the page and run as one shell session in a repository holding the bundled program.md and
train/, as a new user (or their agent) would paste them. Only the budget is shortened, in the
repository's program.md, not in the commands."""
from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from tests.loop_helpers import PROJECT, cli_env, end_detached_night, loop_state, project_repo

PAGE = PROJECT / "docs" / "guides" / "agents.md"


def page_commands() -> str:
    section = PAGE.read_text().split("## Try it", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the Try it section holds one bash block"
    return blocks[0]


def json_documents(text: str) -> list[dict]:
    """The JSON documents a session printed one after another (each may span lines)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) != -1:
        document, at = decoder.raw_decode(text, at)
        found.append(document)
    return found


@pytest.mark.slow
def test_the_agents_page_runs_as_written(tmp_path):
    commands = page_commands()
    assert commands.count("nightshift ") >= 6
    repo = project_repo(tmp_path / "user", budget="4s", seeds="{baseline: 2, screen: 2, max: 2}")
    script = ("set -euo pipefail\n"
              'nightshift() { python -m agent.cli "$@"; }\n'   # the console script, from this checkout
              + commands)
    try:
        check_the_session(repo, script, tmp_path)
    finally:
        end_detached_night(repo, "demo")


def check_the_session(repo, script: str, tmp_path) -> None:
    done = subprocess.run(["bash", "-c", script], cwd=repo, env=cli_env(tmp_path / "data"),
                          capture_output=True, text=True, timeout=900)
    night_log = repo / "results" / "demo" / "night.log"
    log = night_log.read_text() if night_log.exists() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log[-3000:]
    documents = json_documents(done.stdout)
    proposed, verdict, status = documents[0], documents[1], documents[2]
    assert proposed["proposal"] == "p0001"
    assert verdict["id"] == "e0001" and verdict["verdict"] in {"keep", "discard", "inconclusive"}
    assert status["tag"] == "demo"
    state = loop_state(repo, "demo")
    assert state.experiments["e0001"].extra["proposal"] == "p0001"
    assert "WARMDOWN_FRAC = 0.5" in subprocess.run(
        ["git", "-C", str(repo), "show", f"{state.experiments['e0001'].commit}:train/train.py"],
        capture_output=True, text=True, check=True).stdout
    deadline = time.monotonic() + 300      # the detached night decides what it holds, then stops
    while "loop_stopped" not in (repo / "results" / "demo" / "ledger.jsonl").read_text():
        assert time.monotonic() < deadline, night_log.read_text()[-3000:]
        time.sleep(0.5)
    state = loop_state(repo, "demo")
    assert state.stopped_reason == "the agent ended the night", night_log.read_text()[-3000:]
