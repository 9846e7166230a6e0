"""How agents and scripts read and drive a night.

A coding agent (Claude Code, Codex) or a shell script reads a night through documents, not
through the terminal's tables: `nightshift status --json` and `nightshift show ID --json`
print one JSON document each, made by `views` from the ledger's fold and checked against the
JSON Schemas in `schemas/` (docs/json.md says what every field means). The schemas are the
promise: a field they list as required is in every document of that schema version.

It drives a night through its own working copy (`workcopy`: where the agent edits the target)
and the inbox of the external researcher (agent/researchers/inbox.py, where `nightshift
propose` files the edits);
`skill` is the text that teaches a coding agent those commands.
"""
