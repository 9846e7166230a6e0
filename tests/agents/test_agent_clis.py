"""The real Claude Code and Codex binaries, headless and offline, driven by a scripted fake
model: a script reads what a command printed and decides its next step, a failing command is
reported back to the model, and each CLI finds the instructions a product ships where it looks
(Claude Code: CLAUDE.md and .claude/skills/; Codex: AGENTS.md and .agents/skills/)."""
from __future__ import annotations

import json
import sys

import pytest

from tests.agents.drive import run_claude_code, run_codex
from tests.fakes.agent_models import KEY, final, read_file, shell, use_skill, write_file
from tests.needs import needs

pytestmark = needs("agent_clis")

PRINTS_JSON = """python -c 'import json; print(json.dumps({"run": "r-17", "metrics": {"val_loss": 1.25}}))'"""
FAILS = """python -c 'import sys; print("no such run: r-99"); sys.exit(3)'"""


def script() -> list:
    """(a) a command that prints JSON, (b) a file written from what it printed, (c) a command
    that fails, (d) a final text that says what the failure was."""
    def decide(turn):
        printed = turn.result.json()
        assert turn.result.exit_code == 0, turn.result
        return write_file("decision.txt", f"{printed['run']} {printed['metrics']['val_loss'] * 2}")

    def report(turn):
        return final(f"the last command exited {turn.result.exit_code}: {turn.result.output.strip()}")

    return [shell(PRINTS_JSON), decide, shell("cat decision.txt"), shell(FAILS), report]


RUNNERS = {"claude": lambda repo, prompt, steps: run_claude_code(repo, prompt, steps, max_turns=10, timeout=90),
           "codex": lambda repo, prompt, steps: run_codex(repo, prompt, steps, timeout=90)}


@pytest.mark.parametrize("cli", RUNNERS)
def test_a_scripted_agent_reads_a_commands_output_writes_from_it_and_sees_a_failure(cli, tmp_path):
    run = RUNNERS[cli](tmp_path, "Look at run r-17 and write your decision.", script())

    assert run.exit_code == 0, run.explain()
    assert run.rejections == [], run.explain()
    assert (tmp_path / "decision.txt").read_text() == "r-17 2.5\n"      # written from the command's JSON
    shells = [r for r in run.tool_results if r.tool in ("Bash", "exec_command")]
    assert [r.exit_code for r in shells] == [0, 0, 3]
    assert shells[1].output.strip() == "r-17 2.5"                         # the file the CLI wrote, read back
    assert "no such run: r-99" in shells[2].output
    if cli == "claude":
        assert [r.is_error for r in shells] == [False, False, True]
        assert shells[2].text.startswith("Exit code 3")
    else:
        assert "Process exited with code 3" in shells[2].text
    assert run.final_text == "the last command exited 3: no such run: r-99"
    assert len(run.requests) == 5                                         # one model request per step
    assert all(r.status == 200 for r in run.requests)


def test_claude_code_streams_from_the_fake_with_its_key_only(tmp_path, monkeypatch):
    """What Claude Code sent: HEAD / then streamed Messages requests carrying the fake's key;
    a real key in the test's environment never reaches it (nor the commands it runs)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-real-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-real-secret")
    run = run_claude_code(tmp_path, "Show the environment.", [shell("env"), final("done")], max_turns=3, timeout=60)

    assert run.exit_code == 0 and run.rejections == [], run.explain()
    assert run.fake.requests[0].method == "HEAD"
    assert {(r.path, r.headers["x-api-key"], r.json["stream"]) for r in run.requests} == \
        {("/v1/messages?beta=true", KEY, True)}
    seen = run.tool_results[0].output
    assert "real-secret" not in seen and "real-secret" not in json.dumps(run.env)
    assert "PATH=" in seen
    assert {"Bash", "Write", "Read", "Skill"} <= {t["name"] for t in run.requests[0].json["tools"]}
    assert run.events[-1]["type"] == "result" and run.events[-1]["num_turns"] == 2


def test_codex_streams_from_the_fake_with_its_key_only(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-real-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-real-secret")
    run = run_codex(tmp_path, "Show the environment.", [shell("env"), final("done")], timeout=60)

    assert run.exit_code == 0 and run.rejections == [], run.explain()
    assert {(r.method, r.path, r.headers["authorization"], r.json["stream"]) for r in run.fake.requests} == \
        {("POST", "/v1/responses", f"Bearer {KEY}", True)}
    seen = run.tool_results[0].output
    assert "real-secret" not in seen and "real-secret" not in json.dumps(run.env)
    path = next(line for line in seen.splitlines() if line.startswith("PATH="))
    assert path.endswith(run.env["PATH"])              # Codex puts its own folder first; no login shell reset it
    declared = {(t["type"], t.get("name")) for t in run.requests[0].json["tools"]}
    assert {("function", "exec_command"), ("custom", "apply_patch")} <= declared
    assert [e["type"] for e in run.events][:2] == ["thread.started", "turn.started"]
    assert run.events[-1]["type"] == "turn.completed"


def test_a_file_read_then_replaced_by_either_cli(tmp_path):
    """Claude Code's Write refuses to replace a file it has not read: read_file, then write_file."""
    for name, runner in RUNNERS.items():
        (tmp_path / "notes.md").write_text("old\nsecond line\n")
        run = runner(tmp_path, "Rewrite the notes.",
                     [read_file("notes.md"), lambda turn: write_file("notes.md", turn.result.output.upper()),
                      final("rewritten")])
        assert run.exit_code == 0 and run.rejections == [], run.explain()
        assert run.tool_results[0].output == "old\nsecond line\n", name
        assert (tmp_path / "notes.md").read_text() == "OLD\nSECOND LINE\n", name


SKILL = """\
---
name: night-shift
description: Drive a Nightshift night from the command line (description-marker-7).
---
# Night shift

Run `nightshift status --json` first (body-marker-9).
"""


def _text_of_request(request) -> str:
    return json.dumps(request.json)


def test_claude_code_reads_claude_md_and_its_skills_under_dot_claude(tmp_path):
    (tmp_path / "CLAUDE.md").write_text("Project rule: claude-md-marker-3.\n")
    (tmp_path / "AGENTS.md").write_text("Project rule: agents-md-marker-5.\n")
    (tmp_path / ".claude" / "skills" / "night-shift").mkdir(parents=True)
    (tmp_path / ".claude" / "skills" / "night-shift" / "SKILL.md").write_text(SKILL)

    run = run_claude_code(tmp_path, "Start the night.", [use_skill("night-shift"), final("ok")], max_turns=3, timeout=60)

    assert run.exit_code == 0 and run.rejections == [], run.explain()
    first, second = (_text_of_request(r) for r in run.requests)
    assert "claude-md-marker-3" in first and "agents-md-marker-5" not in first
    assert "night-shift: Drive a Nightshift night from the command line (description-marker-7)." in first
    assert "body-marker-9" not in first                                   # the body only once the skill is used
    skill = run.tool_results[0]
    assert skill.tool == "Skill" and skill.is_error is False
    assert "body-marker-9" in skill.attached and "description-marker-7" not in skill.attached   # front matter stripped
    assert "body-marker-9" in second


def test_claude_code_does_not_see_a_skill_only_under_dot_agents(tmp_path):
    (tmp_path / ".agents" / "skills" / "night-shift").mkdir(parents=True)
    (tmp_path / ".agents" / "skills" / "night-shift" / "SKILL.md").write_text(SKILL)
    run = run_claude_code(tmp_path, "Start the night.", [final("ok")], max_turns=2, timeout=60)
    assert run.exit_code == 0 and run.rejections == [], run.explain()
    assert "description-marker-7" not in _text_of_request(run.requests[0])


def test_codex_reads_agents_md_and_its_skills_under_dot_agents(tmp_path):
    (tmp_path / "AGENTS.md").write_text("Project rule: agents-md-marker-5.\n")
    (tmp_path / "CLAUDE.md").write_text("Project rule: claude-md-marker-3.\n")
    (tmp_path / ".agents" / "skills" / "night-shift").mkdir(parents=True)
    (tmp_path / ".agents" / "skills" / "night-shift" / "SKILL.md").write_text(SKILL)
    (tmp_path / ".claude" / "skills" / "other").mkdir(parents=True)
    (tmp_path / ".claude" / "skills" / "other" / "SKILL.md").write_text(
        SKILL.replace("night-shift", "other").replace("marker-7", "marker-8"))

    run = run_codex(tmp_path, "Start the night.", [use_skill("night-shift"), final("ok")], timeout=60)

    assert run.exit_code == 0 and run.rejections == [], run.explain()
    first = _text_of_request(run.requests[0])
    assert "agents-md-marker-5" in first and "claude-md-marker-3" not in first
    assert "night-shift: Drive a Nightshift night from the command line (description-marker-7)." in first
    assert "description-marker-8" not in first                            # .claude/skills is not Codex's
    assert "body-marker-9" not in first
    skill = run.tool_results[0]                                           # no Skill tool: the model reads the file
    assert skill.exit_code == 0 and "body-marker-9" in skill.output


def test_a_step_that_raises_stops_the_cli_with_the_reason_recorded(tmp_path):
    """A script bug fails the run fast and says why, for either CLI."""
    def broken(turn):
        return write_file("x.txt", str(turn.result.json()["missing"]))

    for name, runner in RUNNERS.items():
        run = runner(tmp_path, "go", [shell("echo '{\"present\": 1}'"), broken, final("never")])
        assert run.exit_code == 1, (name, run.explain())                 # the 400 ends the CLI's turn
        assert len(run.rejections) == 1 and "KeyError: 'missing'" in run.rejections[0], (name, run.rejections)
        assert not (tmp_path / "x.txt").exists()


def test_the_cli_runs_this_interpreter_as_python(tmp_path):
    for runner in RUNNERS.values():
        run = runner(tmp_path, "go", [shell("python -c 'import sys; print(sys.executable)'"), final("ok")])
        assert run.exit_code == 0, run.explain()
        assert run.tool_results[0].output.strip() == sys.executable
