"""A 20-experiment night through `nightshift run`, the LLM researcher talking to a strict
local fake of its API, with the faults the real API produces injected along the way: a
whitespace-only text block, an answer cut at the output limit, a refusal, and a burst of
overloads (529 for Claude, 429 for Chat Completions).

Every experiment must come out as a real candidate (none invalid), the strict fake must never
have had to refuse a request (`fake.rejections`: the 400s the real API would have sent), and
the key must appear nowhere the night wrote: the ledger, the run logs, the transcripts, git.
"""
from __future__ import annotations

import pytest

from tests.fakes import anthropic_api as claude
from tests.fakes import openai_api as chat
from tests.loop_helpers import cli_env, git_out, loop_state, make_repo, nightshift
from tests.needs import needs

EXPERIMENTS = 20
WHITESPACE, CUT, REFUSAL, OVERLOAD = 3, 6, 9, 12      # the experiments that meet a fault
CLAUDE_KEY = "sk-ant-strict-night-5a5a5a5a5a"
OPENAI_KEY = "sk-openai-strict-night-7b7b7b7b7b"

# NOTE does nothing, so every candidate is pure noise; with alpha this small nothing is kept
# and the incumbent (NOTE = 0) stays the base of every edit.
SCRIPT = '''\
import json, os, random
NOTE = 0
value = 2.0 + random.Random(os.environ["NIGHTSHIFT_SEED"] + str(NOTE)).gauss(0.0, 0.01)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
    json.dump({"val_bpb": value}, out)
'''
PROGRAM = '''\
---
target: note.py
protected: []
command: python note.py
prepare: null
budget: 1s
grace: 30s
seeds: {{baseline: 2, screen: 1, max: 2}}
alpha: 0.0001
sandbox: local
researcher: {researcher}
{settings}
workers: 1
metric: val_bpb
---
NOTE is a label; lower val_bpb is better.
'''
PREDICTION = {"direction": "same", "expected_delta": 0.0, "interval": [-0.05, 0.05],
              "confidence": 0.8, "rationale": "NOTE is not read by anything"}


def _edit(k: int) -> dict:
    return {"path": "note.py", "old_string": "NOTE = 0", "new_string": f"NOTE = {k}"}


def _submit(k: int) -> dict:
    return {"description": f"NOTE 0 -> {k}", "hypothesis": "a label changes nothing",
            "prediction": PREDICTION}


def claude_script() -> list:
    replies = []
    for k in range(1, EXPERIMENTS + 1):
        edit, done = claude.tool_use("edit_file", _edit(k)), claude.tool_use("submit", _submit(k))
        if k == WHITESPACE:
            replies += [claude.message([claude.text("\n\n"), edit]), claude.message([claude.text("  ")]),
                        claude.message([done])]
        elif k == CUT:
            replies += [claude.cut([claude.text("Editing."), edit, done]), claude.message([edit, done])]
        elif k == REFUSAL:
            replies += [claude.refusal(), claude.message([edit, done])]
        elif k == OVERLOAD:
            replies += [claude.overloaded(retry_after_ms=20)] * 6 + [claude.message([edit, done])]
        else:
            replies.append(claude.message([edit, done]))
    return replies


def openai_script() -> list:
    replies = []
    for k in range(1, EXPERIMENTS + 1):
        calls = [chat.call("edit_file", _edit(k)), chat.call("submit", _submit(k))]
        if k == WHITESPACE:
            replies += [chat.completion("\n\n"), chat.completion(tool_calls=calls)]
        elif k == CUT:
            replies += [chat.cut(tool_calls=[chat.call("edit_file", '{"path": "note.py", "old_str')]),
                        chat.completion(tool_calls=calls)]
        elif k == REFUSAL:
            replies += [chat.refused(), chat.completion(tool_calls=calls)]
        elif k == OVERLOAD:
            replies += [chat.error(429, "Rate limit reached", "requests",
                                   headers={"retry-after": "0.02"})] * 6 + [chat.completion(tool_calls=calls)]
        else:
            replies.append(chat.completion(tool_calls=calls))
    return replies


@pytest.mark.parametrize("researcher", ["claude", pytest.param("openai", marks=needs("openai"))])
def test_a_twenty_experiment_night_with_the_apis_faults_loses_no_experiment(tmp_path, researcher):
    settings = "claude: {}" if researcher == "claude" else "openai: {model: qwen3-coder}"
    repo = make_repo(tmp_path / "user", {"note.py": SCRIPT,
                                         "program.md": PROGRAM.format(researcher=researcher, settings=settings)})
    env = cli_env(tmp_path / "data")
    if researcher == "claude":
        key, fake = CLAUDE_KEY, claude.FakeAnthropic(claude_script(), credentials=[CLAUDE_KEY])
        env.update(ANTHROPIC_API_KEY=key)
    else:
        key, fake = OPENAI_KEY, chat.FakeOpenAI(openai_script(), key=OPENAI_KEY)
        env.update(OPENAI_API_KEY=key)
    with fake:
        env["ANTHROPIC_BASE_URL" if researcher == "claude" else "OPENAI_BASE_URL"] = fake.url
        done = nightshift(repo, "run", "--tag", "strict", "--max-experiments", str(EXPERIMENTS), env=env)
        left, rejections = len(fake.script), list(fake.rejections)
    assert done.returncode == 0, done.stdout + done.stderr

    assert rejections == []                      # no request the real API would have refused
    assert left == 0                             # every scripted answer was asked for, no more
    state = loop_state(repo, "strict")
    experiments = list(state.experiments.values())
    assert len(experiments) == EXPERIMENTS
    assert all(e.commit and e.verdict is not None and e.verdict.value != "invalid" for e in experiments), \
        [(e.id, e.verdict, e.description) for e in experiments]
    by_note = {e.description: e for e in experiments}
    assert sorted(by_note) == sorted(f"NOTE 0 -> {k}" for k in range(1, EXPERIMENTS + 1))
    assert by_note[f"NOTE 0 -> {CUT}"].extra["errors"] == {"truncated": 1}
    assert by_note[f"NOTE 0 -> {REFUSAL}"].extra["errors"] == {"refusal": 1}
    assert by_note[f"NOTE 0 -> {OVERLOAD}"].usage.retries == 6

    written = [p for p in (repo / "results").rglob("*") if p.is_file()]
    assert any("transcript" in str(p) for p in written)
    for path in written:
        assert key not in path.read_text(encoding="utf-8", errors="replace"), path
    assert key not in git_out(repo, "log", "-p", "--all")
    assert key not in done.stdout + done.stderr
