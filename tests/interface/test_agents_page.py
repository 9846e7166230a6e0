"""docs/guides/agents.md, followed literally: the commands of its "Try it" block, parsed out of
the page and run as one shell session in a repository holding the bundled program.md and
train/, as a new user (or their agent) would paste them. Only the budget is shortened, in the
repository's program.md, not in the commands."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.loop_helpers import PROJECT, cli_env, loop_state, project_repo

PAGE = PROJECT / "docs" / "guides" / "agents.md"


def page_commands() -> str:
    section = PAGE.read_text().split("## Try it", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the Try it section holds one bash block"
    return blocks[0]


@pytest.mark.slow
def test_the_agents_page_runs_as_written(tmp_path):
    commands = page_commands()
    assert commands.count("nightshift ") >= 6
    repo = project_repo(tmp_path / "user", budget="4s", seeds="{baseline: 2, screen: 2, max: 2}")
    script = ("set -euo pipefail\n"
              'nightshift() { python -m agent.cli "$@"; }\n'   # the console script, from this checkout
              + commands)
    done = subprocess.run(["bash", "-c", script], cwd=repo, env=cli_env(tmp_path / "data"),
                          capture_output=True, text=True, timeout=900)
    log = (repo / "demo.log").read_text() if (repo / "demo.log").exists() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log[-3000:]
    documents = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    proposed, verdict, status = documents[0], documents[1], documents[2]
    assert proposed["proposal"] == "p0001"
    assert verdict["id"] == "e0001" and verdict["verdict"] in {"keep", "discard", "inconclusive"}
    assert status["tag"] == "demo"
    state = loop_state(repo, "demo")
    assert state.experiments["e0001"].extra["proposal"] == "p0001"
    assert "WARMDOWN_FRAC = 0.5" in subprocess.run(
        ["git", "-C", str(repo), "show", f"{state.experiments['e0001'].commit}:train/train.py"],
        capture_output=True, text=True, check=True).stdout
    assert "stopped: the agent ended the night" in log
