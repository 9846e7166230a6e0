"""The JSON Schemas (draft 2020-12) of the documents, shipped inside the package so that an
agent or a test can validate what `--json` printed against the promise of its version."""
from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

# schemas/<name>.json: nightshift.<name>/1. The agent's commands print the last four
# (agent/interface/operations.py makes them); `nightshift wait --json` prints an experiment.
SCHEMA_NAMES = ("status", "experiment", "checkout", "proposed", "done", "started")


def load_schema(name: str) -> dict[str, Any]:
    """The schema of `nightshift.<name>/1` (one of SCHEMA_NAMES)."""
    if name not in SCHEMA_NAMES:
        raise ValueError(f"no schema {name!r}; there are {', '.join(SCHEMA_NAMES)}")
    return json.loads((files("agent.interface") / "schemas" / f"{name}.json").read_text(encoding="utf-8"))
