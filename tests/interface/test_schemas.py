"""The schemas are the promise agents read: valid draft 2020-12, every field described and
required, their words (verdicts, statuses, roles) the code's, and docs/json.md naming exactly
their fields."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest

from agent.interface.schema import SCHEMA_NAMES, load_schema
from agent.interface.views import EXPERIMENT_SCHEMA, STATUS_SCHEMA
from agent.record.records import Role, Verdict
from sandbox import Status

DOCS = Path(__file__).resolve().parents[2] / "docs" / "json.md"
SCHEMAS = {name: load_schema(name) for name in SCHEMA_NAMES}


def objects(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every object a schema describes, by name: the document (its title) and each $def."""
    named = {schema["title"]: schema["properties"]}
    named.update({name: d["properties"] for name, d in schema["$defs"].items() if "properties" in d})
    return named


def fields_everywhere(schema: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, subschema) of every property, nested ones too."""
    if isinstance(schema, dict):
        for name, sub in schema.get("properties", {}).items():
            yield f"{where}.{name}", sub
            yield from fields_everywhere(sub, f"{where}.{name}")
        for key, value in schema.items():
            if key != "properties":
                yield from fields_everywhere(value, f"{where}/{key}")
    elif isinstance(schema, list):
        for item in schema:
            yield from fields_everywhere(item, where)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_each_schema_is_valid_and_names_its_version(name):
    schema = SCHEMAS[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema"]["const"] == {"status": STATUS_SCHEMA,
                                                       "experiment": EXPERIMENT_SCHEMA}.get(
                                                           name, f"nightshift.{name}/1")


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_field_is_described_and_every_described_field_required(name):
    schema = SCHEMAS[name]
    for path, sub in fields_everywhere(schema):
        assert sub.get("description", "").strip(), f"{name}{path} has no description"
    for object_name, properties in objects(schema).items():
        holder = schema if object_name == schema["title"] else schema["$defs"][object_name]
        assert holder["required"] == list(properties), f"{name}: {object_name} leaves fields optional"


def test_both_schemas_describe_a_shared_object_alike():
    status, experiment = (SCHEMAS[n]["$defs"] for n in ("status", "experiment"))
    for name in set(status) & set(experiment):
        assert status[name] == experiment[name], f"$defs/{name} differs between the two schemas"


def test_the_schemas_words_are_the_code_s():
    """A verdict, status or role the code adds is a word an agent must be told of."""
    defs = SCHEMAS["experiment"]["$defs"]
    assert defs["Verdict"]["enum"] == [v.value for v in Verdict] + ["pending"]
    assert defs["Role"]["enum"] == [r.value for r in Role]
    assert defs["Run"]["properties"]["status"]["enum"] == [s.value for s in Status]


def documented() -> dict[str, set[str]]:
    """docs/json.md's tables: section (### `Name`) -> the fields its table names."""
    sections: dict[str, set[str]] = {}
    current = None
    for line in DOCS.read_text().splitlines():
        heading = re.match(r"^### `(\w+)`", line)
        if heading:
            current = heading.group(1)
            continue
        row = re.match(r"^\| `(\w+)` \|", line)
        if row and current is not None:
            sections.setdefault(current, set()).add(row.group(1))
    return sections


def test_the_docs_page_names_exactly_the_schemas_fields():
    described: dict[str, set[str]] = {}
    for schema in SCHEMAS.values():
        for name, properties in objects(schema).items():
            described[name] = set(properties)
    pages = documented()
    assert pages.keys() == described.keys(), "docs/json.md and the schemas describe different objects"
    for name in described:
        assert pages[name] == described[name], (
            f"docs/json.md `{name}`: missing {sorted(described[name] - pages[name])}, "
            f"not in the schema {sorted(pages[name] - described[name])}")
