"""Issue 13's "done when": a 20-experiment night through the real CLI against the strict fakes,
with whitespace blocks, a max_tokens cut, a refusal and a burst of overloads injected, finishes
every experiment with no 400 sent; the same night with `--researcher openai` against a fake
Chat Completions server; and the key is nowhere but in the request headers."""
from __future__ import annotations

import re
import subprocess

from tests.fakes import anthropic_api as claude_api
from tests.fakes import openai_api
from tests.loop_helpers import cli_env, loop_state, make_repo, nightshift
from tests.night.test_keep_rule_loop import NOISE_SCRIPT
from tests.night.test_loop_claude import PREDICTION, PROGRAM
from tests.needs import needs

EXPERIMENTS = 20
CLAUDE_KEY = "sk-ant-night-secret-20x-7777bbbb"
OPENAI_KEY = "sk-local-night-secret-20x-8888cccc"
PROGRAM_LLM = PROGRAM.replace("researcher: auto", "researcher: claude\nclaude: {retry_base_s: 0.01, cache_ttl: 1h}\n"
                              "openai: {model: qwen3-coder, retry_base_s: 0.01}")
SUBMIT = {"description": "SCALE changed", "hypothesis": "a no-op knob: tests the keep rule", "prediction": PREDICTION}


def _scale_edit(request: dict, n: int, opening_of) -> dict:
    """An edit of the current SCALE line (read from the request, so keeps are followed)."""
    line = re.search(r"^SCALE = .*$", opening_of(request), re.MULTILINE).group(0)
    return {"path": "noise.py", "old_string": line, "new_string": f"SCALE = {1 + n / 100:.2f}"}


def _claude_opening(request: dict) -> str:
    return " ".join(b["text"] for b in request["messages"][0]["content"] if b["type"] == "text")


def _openai_opening(request: dict) -> str:
    return request["messages"][1]["content"]


def claude_script():
    """The replies of 20 experiments, with trouble injected into four of them."""
    def edit(n, lead=()):
        return lambda request: claude_api.message([*lead, claude_api.tool_use("edit_file", _scale_edit(request, n, _claude_opening))])
    script = []
    for n in range(1, EXPERIMENTS + 1):
        if n == 3:    # a whitespace-only text block beside a thinking block
            script.append(edit(n, [claude_api.thinking("SCALE is unused."), claude_api.text("\n\n")]))
        elif n == 5:  # an answer cut at max_tokens in the middle of a write_file
            script += [claude_api.cut([claude_api.tool_use("write_file", {"path": "noise.py", "content": "import json, os\n"})]),
                       edit(n)]
        elif n == 7:  # a refusal: a fresh conversation follows
            script += [claude_api.refusal(), edit(n)]
        elif n == 9:  # a burst of overloads
            script += [claude_api.overloaded(retry_after_ms=10)] * 6 + [edit(n)]
        else:
            script.append(edit(n))
        script.append(claude_api.message([claude_api.text("  "), claude_api.tool_use("submit", SUBMIT)]))
    return script


def openai_script():
    def edit(n, content=None):
        return lambda request: openai_api.completion(content, [openai_api.call("edit_file", _scale_edit(request, n, _openai_opening))])
    script = []
    for n in range(1, EXPERIMENTS + 1):
        if n == 3:
            script.append(edit(n, content="\n\n"))
        elif n == 5:
            script += [openai_api.cut(tool_calls=[openai_api.call("write_file", '{"path": "noise.py", "content": "imp')]),
                       edit(n)]
        elif n == 7:
            script += [openai_api.refused(), edit(n)]
        elif n == 9:
            script += [openai_api.error(503, "overloaded", "server_error", headers={"retry-after-ms": "10"})] * 6 + [edit(n)]
        else:
            script.append(edit(n))
        script.append(openai_api.completion(tool_calls=[openai_api.call("submit", SUBMIT)]))
    return script


def _key_is_nowhere(repo, fake, key, done):
    assert all(key.encode() not in r.body for r in fake.requests)
    assert key not in done.stdout and key not in done.stderr
    for path in (repo / "results").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    history = subprocess.run(["git", "-C", str(repo), "log", "--all", "-p"], capture_output=True).stdout
    assert key.encode() not in history


def _every_experiment_finished(repo, tag, done, errors_seen):
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    state = loop_state(repo, tag)
    assert len(state.experiments) == EXPERIMENTS
    assert "invalid" not in state.verdict_counts(), state.verdict_counts()
    assert all(e.decided for e in state.experiments.values())
    assert state.stopped_reason == f"reached --max-experiments {EXPERIMENTS}"
    errors: dict[str, int] = {}
    for experiment in state.experiments.values():
        for kind, count in experiment.extra.get("errors", {}).items():
            errors[kind] = errors.get(kind, 0) + count
    assert errors == errors_seen
    assert state.usage.retries == 6 and state.usage.calls > 2 * EXPERIMENTS
    transcripts = sorted((repo / "results" / tag / "researcher" / "transcripts").glob("*.json"))
    assert len(transcripts) == EXPERIMENTS
    return state


def test_a_claude_night_with_trouble_injected_finishes_every_experiment(tmp_path):
    repo = make_repo(tmp_path / "user", {"noise.py": NOISE_SCRIPT, "program.md": PROGRAM_LLM})
    env = cli_env(tmp_path / "data")
    with claude_api.FakeAnthropic(claude_script(), credentials=[CLAUDE_KEY]) as fake:
        env.update(ANTHROPIC_API_KEY=CLAUDE_KEY, ANTHROPIC_BASE_URL=fake.url)
        # --no-overlap: one conversation per experiment, in order, so the fake's script lines
        # up (with overlap a keep makes the prepared proposal stale, and a conflict asks again)
        done = nightshift(repo, "run", "--tag", "c20", "--max-experiments", str(EXPERIMENTS),
                          "--hours", "5", "--no-overlap", env=env)
        status = nightshift(repo, "status", "--tag", "c20", env=env)
    assert fake.rejections == [] and all(r.status != 400 for r in fake.requests)
    # The brief reached the model: the night's deadline, the test, every earlier experiment.
    last = _claude_opening(fake.requests[-1].json)
    assert re.search(r"the night ends in [45]\.\d h", last) and "alpha 0.04" in last
    assert all(f"e{n:04d} " in last for n in range(1, EXPERIMENTS))
    state = _every_experiment_finished(repo, "c20", done, {"truncated": 1, "refusal": 1})
    assert state.usage.cache_read_input_tokens > state.usage.input_tokens      # the prompt cache served
    assert "6 retried" in status.stdout and "cache writes" in status.stdout
    _key_is_nowhere(repo, fake, CLAUDE_KEY, done)


@needs("openai")
def test_the_same_night_with_the_openai_researcher(tmp_path):
    repo = make_repo(tmp_path / "user", {"noise.py": NOISE_SCRIPT, "program.md": PROGRAM_LLM})
    env = cli_env(tmp_path / "data")
    with openai_api.FakeOpenAI(openai_script(), key=OPENAI_KEY) as fake:
        env.update(OPENAI_API_KEY=OPENAI_KEY, OPENAI_BASE_URL=fake.url)
        done = nightshift(repo, "run", "--tag", "o20", "--researcher", "openai",
                          "--max-experiments", str(EXPERIMENTS), "--no-overlap", env=env)
    assert fake.rejections == [] and all(r.status != 400 for r in fake.requests)
    assert "researcher: openai (chosen explicitly)" in done.stdout
    state = _every_experiment_finished(repo, "o20", done, {"truncated": 1, "refusal": 1})
    sent = [m for r in fake.requests for m in r.json["messages"] if m["role"] == "assistant"]
    assert all(m["content"] is None or m["content"].strip() for m in sent)   # the "\n\n" was not echoed
    assert state.usage.usd == 0.0                     # a local endpoint is free
    _key_is_nowhere(repo, fake, OPENAI_KEY, done)


def test_a_model_that_keeps_refusing_stops_the_night_with_exit_3(tmp_path):
    repo = make_repo(tmp_path / "user", {"noise.py": NOISE_SCRIPT, "program.md": PROGRAM_LLM})
    env = cli_env(tmp_path / "data")
    with claude_api.FakeAnthropic([claude_api.refusal()] * 2) as fake:
        env.update(ANTHROPIC_API_KEY=CLAUDE_KEY, ANTHROPIC_BASE_URL=fake.url)
        done = nightshift(repo, "run", "--tag", "r", "--max-experiments", "3", env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "refused 2 times in a row (frontier_llm" in done.stderr and "fallback_model" in done.stderr
    assert loop_state(repo, "r").stopped_reason.startswith("ResearcherError")
