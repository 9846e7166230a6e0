"""`nightshift mcp` as Claude Code or Codex meets it: the real MCP SDK's client starts the real
server (`python -m agent.cli mcp`) in a user's repository and speaks to it over stdio. The
tools return the documents the commands' --json print, refuse with the commands' messages, and
drive a real night end to end: start it, check out, edit the file (a plain write, as an agent's
edit tool makes), propose, wait for the verdict, end it."""
from __future__ import annotations

import json
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
import pytest

from tests.needs import require

pytestmark = require("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from tests.interface.night import TAG  # noqa: E402
from tests.interface.strict import validate  # noqa: E402
from tests.interface.toy_target import toy_files  # noqa: E402
from tests.loop_helpers import cli_env, end_detached_night, loop_state, make_repo, nightshift  # noqa: E402

TOOLS = {"start_night", "checkout", "propose", "wait", "status", "show", "done"}
SCHEMA_OF = {"start_night": "started", "checkout": "checkout", "propose": "proposed",
             "wait": "experiment", "status": "status", "show": "experiment", "done": "done"}


@asynccontextmanager
async def connected(repo: Path, env: dict[str, str], errlog: Path) -> AsyncIterator[ClientSession]:
    """A session with `nightshift mcp` started in `repo`, as a client registers it."""
    server = StdioServerParameters(command=sys.executable, args=["-m", "agent.cli", "mcp"],
                                   cwd=str(repo), env=env)
    with open(errlog, "w") as log:
        async with stdio_client(server, errlog=log) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's document, checked to be exactly one of its schema (closed: no field the
    schema does not describe), and to be the JSON text it also returns."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content[0].text}"
    document = result.structured_content
    validate(document, SCHEMA_OF[tool])
    assert json.loads(result.content[0].text) == document
    return document


async def refusal(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error and result.structured_content is None, result
    return result.content[0].text


def cli_error(done) -> str:
    """What the command line printed after `error:` (its message, as a tool error carries it)."""
    assert done.returncode != 0 and done.stdout == "", done
    return done.stderr.strip().removeprefix("error: ")


def test_the_tools_are_listed_with_their_inputs_and_documents(tmp_path, night):
    async def scenario():
        async with connected(night.repo, cli_env(tmp_path / "data"), tmp_path / "server.log") as session:
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(listed) == TOOLS
            for name, tool in listed.items():
                assert tool.description and tool.input_schema["type"] == "object"
                assert "tag" in tool.input_schema["required"], name
                assert tool.output_schema["properties"]["schema"]["const"].startswith(
                    f"nightshift.{SCHEMA_OF[name]}/"), name
            propose = listed["propose"].input_schema
            assert propose["required"] == ["tag", "message", "hypothesis", "predict", "delta",
                                           "interval_low", "interval_high"]
            assert set(propose["properties"]) >= {"confidence", "rationale", "dir", "agent"}
            assert all(field.get("description") for field in propose["properties"].values())
            assert listed["wait"].input_schema["properties"]["timeout_s"]["default"] == 25
            assert listed["status"].annotations.read_only_hint is True
    anyio.run(scenario)


def test_status_and_show_return_what_the_command_line_prints(tmp_path, night):
    env = cli_env(tmp_path / "data")

    def printed(*args: str) -> dict:
        done = nightshift(night.repo, *args, "--tag", TAG, "--json", env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    async def scenario():
        async with connected(night.repo, env, tmp_path / "server.log") as session:
            status = await call(session, "status", tag=TAG)
            assert status == printed("status")
            assert status["counts"]["keep"] == 1 and status["running"] is False
            shown = await call(session, "show", tag=TAG, experiment="e0001")
            assert shown == printed("show", "e0001")
            assert shown["verdict"] == "keep" and "+WIDTH = 128" in shown["diff"]
            assert (await call(session, "show", tag=TAG, experiment="incumbent"))["id"] == "e0001"
            # refusals: the command's own message, as the tool's error
            unknown = await refusal(session, "show", tag=TAG, experiment="e0099")
            assert unknown == cli_error(nightshift(night.repo, "show", "e0099", "--tag", TAG,
                                                   "--json", env=env, timeout=120))
            assert "e0001" in unknown
            no_loop = await refusal(session, "status", tag="nosuchtag")
            assert no_loop.startswith("no loop at ") and f"Known tags: {TAG}" in no_loop
            # a decided experiment: wait returns it at once, as `nightshift wait` does
            assert (await call(session, "wait", tag=TAG, proposal="e0002"))["verdict"] == "discard"
    anyio.run(scenario)


def test_an_agent_drives_a_whole_night_through_the_tools_alone(tmp_path):
    repo = make_repo(tmp_path / "user", toy_files())
    env = cli_env(tmp_path / "data")
    tag = "mcp"

    async def wait_for_verdict(session: ClientSession, proposal: str) -> dict[str, Any]:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            result = await session.call_tool("wait", {"tag": tag, "proposal": proposal, "timeout_s": 10})
            if not result.is_error:
                validate(result.structured_content, "experiment")
                return result.structured_content
            assert "is not decided yet" in result.content[0].text, result.content[0].text
        pytest.fail(f"{proposal} was not decided in 300 s")

    async def scenario():
        async with connected(repo, env, tmp_path / "server.log") as session:
            started = await call(session, "start_night", tag=tag, agent_silence="5m")
            assert started["tag"] == tag and Path(started["log"]).name == "night.log"
            # a second night on the tag: refused, the holder named, from the second's own lines
            busy = await refusal(session, "start_night", tag=tag)
            assert busy.startswith(f"error: tag {tag} is in use") and str(started["pid"]) in busy
            copy = await call(session, "checkout", tag=tag)
            target = Path(copy["target_path"])
            assert copy["target"] == "toy.py" and target.parent == Path(copy["dir"])
            target.write_text(target.read_text().replace("LR = 1.0", "LR = 0.3"))
            filed = await call(session, "propose", tag=tag, message="LR 1.0 -> 0.3",
                               hypothesis="the metric is best at 0.3", predict="improve",
                               delta=-0.45, interval_low=-0.6, interval_high=-0.3,
                               confidence=0.9, rationale="the toy's curve", agent="mcp-agent")
            assert filed["proposal"] == "p0001" and filed["night_running"] is True
            verdict = await wait_for_verdict(session, "p0001")
            assert verdict["verdict"] == "keep", verdict
            assert verdict["prediction"]["interval"] == [-0.6, -0.3]

            # a protected file in the edit: refused before filing, with the command's message
            again = await call(session, "checkout", tag=tag)
            assert again["base"] == verdict["commit"]
            copy_dir = Path(again["dir"])
            (copy_dir / "helper.py").write_text("FACTOR = 0   # the metric, bent\n")
            target.write_text(target.read_text().replace("LR = 0.3", "LR = 0.31"))
            refused = await refusal(session, "propose", tag=tag, message="bent", hypothesis="h",
                                    predict="improve", delta=-1.0, interval_low=-2.0,
                                    interval_high=0.0)
            assert "helper.py" in refused and "checkout" in refused
            assert refused == cli_error(nightshift(
                repo, "propose", "--tag", tag, "-m", "bent", "--hypothesis", "h", "--predict",
                "improve", "--delta", "-1.0", "--interval", "-2.0,0.0", env=env, timeout=120))

            ended = await call(session, "done", tag=tag, reason="one good change is enough")
            assert ended["reason"] == "one good change is enough"
            status = await call(session, "status", tag=tag)
            assert status["kept"][0]["id"] == verdict["id"]

    try:
        anyio.run(scenario)
        ledger = repo / "results" / tag / "ledger.jsonl"
        deadline = time.monotonic() + 120
        while '"loop_stopped"' not in ledger.read_text() and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        end_detached_night(repo, tag)
    state = loop_state(repo, tag)
    [experiment] = state.experiments.values()        # the refused edit was never filed
    assert experiment.extra["proposal"] == "p0001" and experiment.extra["agent"] == "mcp-agent"
    assert experiment.verdict == "keep" and experiment.researcher == "external"
    assert state.stopped_reason and "the agent ended the night" in state.stopped_reason
    assert not (repo / "results" / tag / "inbox" / "p0002.json").exists()
