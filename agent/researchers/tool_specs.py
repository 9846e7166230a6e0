"""The tools an LLM researcher is offered, declared once for every provider.

Each declaration is a name, a description written for the model, and a JSON schema of its
input under `parameters`. The Anthropic researcher sends them as `input_schema`, the
OpenAI-compatible one as `{"type": "function", "function": ...}`; `tools.Workbench` carries
them out. The descriptions are part of the cached prompt prefix: change them rarely.
"""
from __future__ import annotations

from typing import Any

_PATH = {"type": "string", "description": "repository-relative path, e.g. train/train.py"}

TOOLS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": (
            "Read the current draft of the target file or a protected (read-only) file. Lines "
            "come back numbered as '<n>\\t<text>'; the numbers are not part of the file."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "path": _PATH,
                "start_line": {"type": "integer", "description": "first line, 1-based"},
                "end_line": {"type": "integer", "description": "last line, inclusive"},
            },
            "required": ["path"],
        },
    },
    {
        "name": "edit_file",
        "description": (
            "Replace one exact, unique occurrence of old_string with new_string in the target "
            "file's draft. old_string must match the file byte for byte (whitespace included) "
            "and occur exactly once; include surrounding lines to make it unique. The result "
            "must still parse as Python, otherwise the edit is not applied."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "path": _PATH,
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
            },
            "required": ["path", "old_string", "new_string"],
        },
    },
    {
        "name": "write_file",
        "description": "Replace the whole draft of the target file with content (must parse).",
        "parameters": {
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "show_draft_diff",
        "description": "Show the unified diff of the current draft against the incumbent.",
        "parameters": {"type": "object", "properties": {}},
    },
    {
        "name": "show_experiment",
        "description": (
            "Show the diff and the log tail of one past experiment, by the id the ledger "
            "summary gives it."
        ),
        "parameters": {
            "type": "object",
            "properties": {"experiment_id": {"type": "string"}},
            "required": ["experiment_id"],
        },
    },
    {
        "name": "submit",
        "description": (
            "Submit the current draft as this experiment, with a prediction registered before "
            "the run. Deltas are candidate minus incumbent in metric units (for a minimised "
            "metric an improvement is negative). confidence is the probability you give to "
            "the measured delta falling inside interval."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "one line, <= 160 chars"},
                "hypothesis": {"type": "string", "description": "why this should change the metric"},
                "hypothesis_id": {
                    "type": "string",
                    "description": "id of the queued hypothesis this tests, if any",
                },
                "prediction": {
                    "type": "object",
                    "properties": {
                        "direction": {"type": "string", "enum": ["improve", "worsen", "same"]},
                        "expected_delta": {"type": "number"},
                        "interval": {
                            "type": "array", "items": {"type": "number"},
                            "minItems": 2, "maxItems": 2,
                            "description": "[lo, hi] with lo < hi, containing expected_delta",
                        },
                        "confidence": {"type": "number", "description": "in (0, 1), e.g. 0.8"},
                        "rationale": {"type": "string"},
                    },
                    "required": ["direction", "expected_delta", "interval", "confidence", "rationale"],
                },
            },
            "required": ["description", "hypothesis", "prediction"],
        },
    },
]

TOOL_NAMES = tuple(tool["name"] for tool in TOOLS)
EDITS = ("edit_file", "write_file")


def tools_for(names: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The tool declarations (name, description, JSON-schema `parameters`), optionally only
    those named."""
    return [tool for tool in TOOLS if names is None or tool["name"] in names]
