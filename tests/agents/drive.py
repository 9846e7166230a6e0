"""Run the real coding-agent CLIs (Claude Code, Codex) headless, offline, against a started
scripted fake model (tests/fakes/agent_models.py), and hand back what happened.

    run = run_claude_code(repo, "do the thing", [shell("ls"), final("done")], max_turns=5, timeout=60)
    assert run.exit_code == 0, run.explain()
    assert run.fake.rejections == [] and run.tool_results[0].exit_code == 0

Each CLI runs with a throwaway HOME (and CODEX_HOME holding a config.toml that points Codex at
the fake), telemetry, update checks and plugins off, stdin from /dev/null, and an environment
built from nothing: PATH (this interpreter's folder first, so `python` and the project's
commands are this venv's), HOME, LANG and what the CLI needs to reach the fake. No variable
of the test's own environment (no ANTHROPIC_* or OPENAI_* key) reaches the CLI.
The binaries come from tests/needs.py's agent_clis_dir() (kind "agent_clis").
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from tests.fakes.agent_models import FakeClaudeCodeModel, FakeCodexModel, Item, ToolResult
from tests.fakes.server import RecordedRequest
from tests.needs import agent_cli

CLAUDE_TOOLS = ("Bash", "Write", "Edit", "Skill")


@dataclass
class AgentRun:
    """One CLI run: how it ended, what it printed, and what the fake model saw."""
    cli: str                                # "claude" or "codex"
    exit_code: int | None                   # None when it outlasted `timeout` (then killed)
    stdout: str
    stderr: str
    events: list[dict[str, Any]]            # stdout's JSON: Claude Code's one result object, Codex's JSONL events
    fake: FakeClaudeCodeModel | FakeCodexModel
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def timed_out(self) -> bool:
        return self.exit_code is None

    @property
    def requests(self) -> list[RecordedRequest]:
        """The model requests (POSTs); `fake.requests` also holds Claude Code's HEAD /."""
        return [r for r in self.fake.requests if r.method == "POST"]

    @property
    def tool_results(self) -> list[ToolResult]:
        return self.fake.tool_results

    @property
    def rejections(self) -> list[str]:
        return self.fake.rejections

    @property
    def final_text(self) -> str | None:
        """The agent's last answer as the CLI reported it."""
        if self.cli == "claude":
            results = [e for e in self.events if e.get("type") == "result"]
            return results[-1].get("result") if results else None
        messages = [e["item"].get("text") for e in self.events
                    if e.get("type") == "item.completed" and (e.get("item") or {}).get("type") == "agent_message"]
        return messages[-1] if messages else None

    def explain(self) -> str:
        """What to print when an assertion on this run fails."""
        return (f"{self.cli} exit {self.exit_code}{' (timed out)' if self.timed_out else ''}\n"
                f"rejections: {self.rejections}\n"
                f"tool results: {[(r.tool, r.exit_code, r.output[:200]) for r in self.tool_results]}\n"
                f"stdout: {self.stdout[-3000:]}\nstderr: {self.stderr[-3000:]}")


def base_env(home: Path) -> dict[str, str]:
    """The whole environment a CLI gets before its own variables: no inherited secrets."""
    path = os.pathsep.join(dict.fromkeys([str(Path(sys.executable).parent),
                                          *os.environ.get("PATH", os.defpath).split(os.pathsep)]))
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1"}


def _json_of(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str, str]:
    with subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            return process.returncode, stdout, stderr
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)     # the CLI and the commands it started
            stdout, stderr = process.communicate()
            return None, stdout, stderr


class _Home:
    """A throwaway HOME: the given folder (kept), or a temporary one (removed)."""

    def __init__(self, home: Path | None, prefix: str) -> None:
        self.given = home
        self.path = Path(home) if home else Path(tempfile.mkdtemp(prefix=prefix))
        self.path.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc: object) -> None:
        if self.given is None:
            shutil.rmtree(self.path, ignore_errors=True)


def run_claude_code(workdir: str | Path, prompt: str, script: Iterable[Item], *, max_turns: int = 10,
                    timeout: float = 60, allowed_tools: Iterable[str] = CLAUDE_TOOLS,
                    env: dict[str, str] | None = None, home: Path | None = None) -> AgentRun:
    """`claude -p PROMPT --output-format json` in `workdir`, its model the scripted fake.
    `env` adds variables (a test's own, never a real key); `home`, when given, is kept."""
    workdir = Path(workdir).resolve()
    with FakeClaudeCodeModel(script, workdir=workdir) as fake, _Home(home, "nightshift-claude-home-") as home_dir:
        environment = {**base_env(home_dir),
                       "ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": fake.key,
                       "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
                       "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **(env or {})}
        command = [str(agent_cli("claude")), "-p", prompt, "--output-format", "json",
                   "--allowedTools", ",".join(allowed_tools), "--max-turns", str(max_turns),
                   "--no-session-persistence"]
        code, stdout, stderr = _run(command, workdir, environment, timeout)
    return AgentRun("claude", code, stdout, stderr, _json_of(stdout), fake, command, environment)


CODEX_CONFIG = """\
model = "gpt-5.5"
model_provider = "fake"
check_for_update_on_startup = false
allow_login_shell = false   # a login shell reads /etc/profile, which resets PATH (this venv's python lost)

[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false

[model_providers.fake]
name = "fake"
base_url = "{url}"
env_key = "FAKE_MODEL_KEY"
wire_api = "responses"
"""


def run_codex(workdir: str | Path, prompt: str, script: Iterable[Item], *, timeout: float = 60,
              env: dict[str, str] | None = None, home: Path | None = None) -> AgentRun:
    """`codex exec --json PROMPT` in `workdir`, approvals and sandbox off, its model the
    scripted fake (CODEX_HOME = HOME, holding the config.toml above)."""
    workdir = Path(workdir).resolve()
    with FakeCodexModel(script, workdir=workdir) as fake, _Home(home, "nightshift-codex-home-") as home_dir:
        (home_dir / "config.toml").write_text(CODEX_CONFIG.format(url=fake.url))
        environment = {**base_env(home_dir), "CODEX_HOME": str(home_dir), "FAKE_MODEL_KEY": fake.key,
                       **(env or {})}
        command = [str(agent_cli("codex")), "exec", "--json", "--strict-config", "--skip-git-repo-check",
                   "--ephemeral", "--dangerously-bypass-approvals-and-sandbox", "--cd", str(workdir), prompt]
        code, stdout, stderr = _run(command, workdir, environment, timeout)
    return AgentRun("codex", code, stdout, stderr, _json_of(stdout), fake, command, environment)
