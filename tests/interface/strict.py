"""The schemas held to the letter: `validate` also refuses a field the schema does not describe."""
from __future__ import annotations

from typing import Any

import jsonschema

from agent.interface.schema import load_schema


def closed(schema: Any) -> Any:
    """`schema` with every described object closed (additionalProperties false). The shipped
    schemas stay open, so that a reader of version 1 accepts a field added later; the tests
    close them, so that a field the code prints and the schema (and docs) do not describe fails."""
    if isinstance(schema, dict):
        shut = {key: closed(value) for key, value in schema.items()}
        if "properties" in shut:
            shut["additionalProperties"] = False
        return shut
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    return schema


def validate(document: dict[str, Any], name: str) -> None:
    """Raise jsonschema.ValidationError unless `document` is exactly a `name` document."""
    jsonschema.Draft202012Validator(closed(load_schema(name))).validate(document)
