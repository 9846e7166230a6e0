"""The agent's commands as an MCP server (`nightshift mcp`): a coding agent (Claude Code, Codex)
drives a night through tools instead of a shell.

One tool per command, each the operation the command runs (operations.py), so the two cannot
check different things or say different words: `start_night` (`run --researcher external
--detach`), `checkout`, `propose`, `wait`, `done`, `status` and `show`. A tool returns the
document the command's `--json` prints, as structured content (its JSON Schema, shipped in
schemas/, is the tool's output schema) and as the same JSON text; a refusal is a tool error
whose text is the message the command prints after `error:`.

Built on the official MCP SDK's high-level server (`MCPServer`, pip install -e '.[mcp]'), on
stdio: the client starts `nightshift mcp` in the repository and speaks on its stdin and stdout.
Nothing here prints: stdout is the protocol's. Each call loads program.md again, as each
command does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from agent.interface import operations
from agent.interface.jsonable import document_text
from agent.interface.operations import PROPOSAL_FIELDS, OperationError
from agent.interface.schema import load_schema

WAIT_S = 25.0     # a wait tool call's default: under the tool-call limits of the clients (Codex: 60 s)

INSTRUCTIONS = """\
You are the researcher of a Nightshift night: you propose edits to the one file program.md \
names (its `target:`), with a prediction; Nightshift runs each in a sandbox on fresh seeds, \
measures the metric with its own evaluator and keeps a change only when the gain is \
statistically real. Never judge a change by running the training script yourself, never commit.

1. status(tag): if `running` is false, start_night(tag). 2. checkout(tag): edit the file at \
`target_path`, nothing else. 3. propose(tag, ...): the prediction is candidate minus incumbent \
in metric units (negative improves a minimised metric); size the interval with the status's \
`noise.sd`. 4. wait(tag, proposal) until it returns the verdict (a timeout error: call it \
again). 5. checkout again (the copy moves to the new incumbent) and go on. 6. done(tag) when \
finished. Every tool returns a JSON document (docs/json.md); an error says what to fix."""

Tag = Annotated[str, Field(description="The night's tag (its folder under results/, its branch "
                                       "nightshift/<tag>).")]
Dir = Annotated[Optional[str], Field(description="The working copy (default: results/<tag>/agent); "
                                                 "several agents: one each.")]


def build_server(program: Path) -> MCPServer:
    """The server whose tools act on the night of the program.md at `program` (relative to the
    working directory, as the command line's --program)."""

    def run(operation: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> CallToolResult:
        try:
            document = operation(operations.open_program(program), *args, **kwargs)
        except OperationError as error:
            return CallToolResult(content=[TextContent(type="text", text=error.message)], is_error=True)
        return CallToolResult(content=[TextContent(type="text", text=document_text(document))],
                              structured_content=document)

    def start_night(
        tag: Tag,
        agent_silence: Annotated[Optional[str], Field(description="Stop the night when you propose "
                                 "nothing for this long after its last decision, e.g. 30m "
                                 "(default 60m); time spent waiting on runs does not count.")] = None,
        hours: Annotated[Optional[float], Field(description="Stop after this many hours.")] = None,
        max_experiments: Annotated[Optional[int], Field(description="Stop after this many "
                                   "experiments.")] = None,
        budget: Annotated[Optional[str], Field(description="Training budget per run, e.g. 60s "
                          "(overrides program.md).")] = None,
    ) -> CallToolResult:
        """Start the night on `tag` in the background with you as its researcher (`nightshift
        run --researcher external --detach`); returns once it holds the tag (an existing tag is
        resumed). Its output goes to results/<tag>/night.log. It measures the incumbent first:
        checkout waits for that."""
        argv = ["run", "--researcher", "external", "--program", str(Path(program).absolute())]
        for flag, value in (("--agent-silence", agent_silence), ("--hours", hours),
                            ("--max-experiments", max_experiments), ("--budget", budget)):
            if value is not None:
                argv += [flag, str(value)]
        return run(lambda prog: operations.start_night(prog, tag, argv))

    def checkout(tag: Tag, dir: Dir = None) -> CallToolResult:
        """Make or reset your working copy at the night's incumbent; returns `target_path`, the
        one file to edit (program.md's target). Checking out again drops the edits in the copy
        and moves it to the incumbent of the moment: do it after each verdict."""
        return run(operations.checkout, tag, _path(dir))

    def propose(
        tag: Tag,
        message: Annotated[str, Field(description=PROPOSAL_FIELDS["message"])],
        hypothesis: Annotated[str, Field(description=PROPOSAL_FIELDS["hypothesis"])],
        predict: Annotated[Literal["improve", "worsen", "same"],
                           Field(description=PROPOSAL_FIELDS["predict"])],
        delta: Annotated[float, Field(description=PROPOSAL_FIELDS["delta"])],
        interval_low: Annotated[float, Field(description="Where the measured delta will fall, "
                                "in metric units: the interval's low end.")],
        interval_high: Annotated[float, Field(description="The interval's high end.")],
        confidence: Annotated[float, Field(description=PROPOSAL_FIELDS["confidence"])] = 0.8,
        rationale: Annotated[str, Field(description=PROPOSAL_FIELDS["rationale"])] = "",
        dir: Dir = None,
        agent: Annotated[str, Field(description=PROPOSAL_FIELDS["agent"])] = "agent",
    ) -> CallToolResult:
        """Hand the night the edit in your working copy, with its prediction registered before
        the run. Checked before it is filed: only the target changed, it parses, the prediction
        is well formed. Returns the proposal's id (p0001) for `wait`; proposals queue."""
        return run(operations.propose, tag, message=message, hypothesis=hypothesis,
                   predict=predict, delta=delta, interval=(interval_low, interval_high),
                   confidence=confidence, rationale=rationale, agent=agent, directory=_path(dir))

    def wait(
        tag: Tag,
        proposal: Annotated[str, Field(description="A proposal id (p0001) or an experiment id "
                                       "(e0007).")],
        timeout_s: Annotated[float, Field(description="How long to wait, in seconds; call again "
                                          "after a timeout.")] = WAIT_S,
    ) -> CallToolResult:
        """Wait until a proposal (or experiment) is decided and return its experiment in full:
        verdict, reason, runs, curves, diff (as `show`). An error when the timeout passed first
        (call it again) or when no night runs on the tag to decide it (start_night resumes)."""
        return run(operations.wait, tag, proposal, timeout_s)

    def status(tag: Tag) -> CallToolResult:
        """The night at a glance: the incumbent and its value, the noise, every experiment with
        its verdict, what is pending and in flight, whether a night runs on the tag."""
        return run(operations.status, tag)

    def show(
        tag: Tag,
        experiment: Annotated[str, Field(description="An experiment id (e0003), `incumbent` (the "
                                         "kept experiment the night stands on) or `base`.")],
    ) -> CallToolResult:
        """One experiment in full: hypothesis, prediction, verdict and the keep rule's numbers,
        the diff, every run with its log, curve and training dynamics beside its parent's."""
        return run(operations.show, tag, experiment)

    def done(
        tag: Tag,
        reason: Annotated[str, Field(description="Why, recorded with the night's stop.")] = "",
    ) -> CallToolResult:
        """End the night once it has taken every proposal filed (what runs is decided first)."""
        return run(operations.done, tag, reason)

    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    acts = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    tools = [_tool(start_night, "started", acts), _tool(checkout, "checkout", acts),
             _tool(propose, "proposed", acts), _tool(wait, "experiment", reads),
             _tool(status, "status", reads), _tool(show, "experiment", reads),
             _tool(done, "done", acts)]
    return MCPServer("nightshift", instructions=INSTRUCTIONS, tools=tools, log_level="WARNING")


def serve(program: Path) -> None:
    """Serve on stdin and stdout until the client closes them."""
    build_server(program).run("stdio")


def _tool(function: Callable[..., Any], schema: str, annotations: ToolAnnotations) -> Tool:
    """`function` as a tool whose output schema is its document's JSON Schema (schemas/)."""
    tool = Tool.from_function(function, annotations=annotations)
    metadata = tool.fn_metadata.model_copy(update={"output_schema": load_schema(schema)})
    return tool.model_copy(update={"fn_metadata": metadata})


def _path(text: Optional[str]) -> Optional[Path]:
    return Path(text) if text else None
