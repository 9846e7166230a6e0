"""The Claude researcher driving the real loop through the real CLI, against a local fake
Anthropic server: what the loop records, what the server received, and where the key is not.
"""
import json
import subprocess

from tests.fakes.anthropic_api import FakeAnthropic, message, tool_use
from tests.loop_helpers import cli_env, loop_state, make_repo, nightshift
from tests.night.test_keep_rule_loop import NOISE_SCRIPT
from tests.night.test_keep_rule_loop import PROGRAM as NOISE_PROGRAM

SECRET = "sk-ant-loop-secret-5555aaaa9999"
# The pure-noise program, with fewer seeds and the researcher left to `auto`.
PROGRAM = (NOISE_PROGRAM
           .replace("seeds: {baseline: 4, screen: 1, max: 6}", "seeds: {baseline: 3, screen: 1, max: 3}")
           .replace("researcher: optuna", "researcher: auto"))
PREDICTION = {"direction": "same", "expected_delta": 0.0, "interval": [-0.1, 0.1],
              "confidence": 0.8, "rationale": "SCALE is never read, so nothing can change"}


def _experiment_replies():
    return [
        message([tool_use("edit_file", {"path": "noise.py", "old_string": "SCALE = 1.0",
                                        "new_string": "SCALE = 2.0"})]),
        message([tool_use("submit", {"description": "SCALE 1.0 -> 2.0",
                                     "hypothesis": "a no-op knob: tests the keep rule",
                                     "prediction": PREDICTION})]),
    ]


def _env(tmp_path, fake):
    env = cli_env(tmp_path / "data")
    env.update(ANTHROPIC_API_KEY=SECRET, ANTHROPIC_BASE_URL=fake.url)
    return env


def test_claude_proposes_and_the_loop_records_its_prediction(tmp_path):
    repo = make_repo(tmp_path / "user", {"noise.py": NOISE_SCRIPT, "program.md": PROGRAM})
    with FakeAnthropic(_experiment_replies()) as fake:
        done = nightshift(repo, "run", "--tag", "c", "--max-experiments", "1", env=_env(tmp_path, fake))
        requests = list(fake.requests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "researcher: claude (ANTHROPIC_API_KEY is set)" in done.stdout

    state = loop_state(repo, "c")
    experiment = state.experiments["e0001"]
    assert experiment.researcher == "claude" and experiment.description == "SCALE 1.0 -> 2.0"
    assert experiment.prediction.interval == (-0.1, 0.1)
    assert experiment.decision.score is not None            # scored after the decision
    assert experiment.extra["turns"] == 2

    # What the server received: the tools, cache control on the stable prefix, no key.
    body = requests[0].json
    assert {t["name"] for t in body["tools"]} >= {"read_file", "edit_file", "write_file", "submit"}
    assert "cache_control" in json.dumps(body["system"]) or "cache_control" in json.dumps(body["tools"])
    assert all(SECRET.encode() not in r.body for r in requests)

    # The key is nowhere on disk: not in the ledger, the logs, the researcher's state, git.
    for path in (repo / "results").rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    history = subprocess.run(["git", "-C", str(repo), "log", "--all", "-p"], capture_output=True).stdout
    assert SECRET.encode() not in history

    status = nightshift(repo, "status", "--tag", "c", env=_env(tmp_path, fake))
    assert "researcher cost: $" in status.stdout


def test_a_dollar_cap_stops_the_loop_cleanly_with_exit_3(tmp_path):
    repo = make_repo(tmp_path / "user", {"noise.py": NOISE_SCRIPT, "program.md": PROGRAM})
    with FakeAnthropic(_experiment_replies()) as fake:
        done = nightshift(repo, "run", "--tag", "cap", "--max-experiments", "3",
                          "--max-usd", "0.000001", env=_env(tmp_path, fake))
        calls = len(fake.requests)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "budget cap" in done.stderr
    assert calls == 1                       # no call after the one that crossed the cap
    state = loop_state(repo, "cap")
    assert state.stopped_reason.startswith("ResearcherError")
    assert state.experiments == {} and len(state.reference(state.base_commit)) == 3
