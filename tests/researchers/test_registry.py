"""Choosing a researcher by name."""
import sys

import pytest

from agent.record.records import Direction
from agent.researchers.base import ResearcherError
from agent.researchers.optuna_researcher import OptunaResearcher
from agent.researchers.registry import make_researcher, resolve_researcher_name
from agent.researchers.scripted import ScriptedResearcher

def test_auto_picks_claude_only_when_a_key_is_set():
    assert resolve_researcher_name("auto", {}) == ("optuna", "ANTHROPIC_API_KEY not set")
    assert resolve_researcher_name("auto", {"ANTHROPIC_API_KEY": ""})[0] == "optuna"
    assert resolve_researcher_name("auto", {"ANTHROPIC_API_KEY": "sk-x"}) == ("claude", "ANTHROPIC_API_KEY is set")
    assert resolve_researcher_name("optuna", {"ANTHROPIC_API_KEY": "sk-x"}) == ("optuna", "chosen explicitly")
    with pytest.raises(ResearcherError, match="unknown researcher .gpt.*auto, claude, external, openai, optuna, scripted"):
        resolve_researcher_name("gpt", {})


def test_auto_inside_a_coding_agents_session_is_the_agent_never_a_nested_researcher():
    # what the real CLIs set in their commands' environment (tests/agents measured it), with
    # the agent's own key beside it: never a second researcher on the agent's bill
    for marker, agent in (("CLAUDECODE", "Claude Code"), ("CODEX_THREAD_ID", "Codex")):
        name, why = resolve_researcher_name("auto", {marker: "1", "ANTHROPIC_API_KEY": "sk-agent"})
        assert name == "external" and f"started from a {agent} session" in why
    assert resolve_researcher_name("claude", {"CLAUDECODE": "1"})[0] == "claude"   # on purpose


def test_makes_optuna_with_the_program_direction(tmp_path):
    researcher = make_researcher("auto", state_dir=tmp_path / "state", direction=Direction.MAXIMIZE, env={})
    assert isinstance(researcher, OptunaResearcher) and researcher.direction is Direction.MAXIMIZE
    assert (tmp_path / "state" / "optuna.db").exists()


def test_scripted_needs_a_script(tmp_path):
    with pytest.raises(ResearcherError, match="needs a script"):
        make_researcher("scripted", state_dir=tmp_path)
    (tmp_path / "s.json").write_text('["print(1)\\n"]')
    assert isinstance(make_researcher("scripted", state_dir=tmp_path,
                                      script=tmp_path / "s.json"), ScriptedResearcher)


def test_claude_import_failure_becomes_a_researcher_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "agent.researchers.claude", None)   # import now fails
    with pytest.raises(ResearcherError, match="claude researcher is unavailable"):
        make_researcher("claude", state_dir=tmp_path)
