"""Plain JSON data, strictly: what `json.dumps(..., allow_nan=False)` accepts.

The views build dicts of their own, but the values inside come from the ledger's records:
floats that may be NaN or infinite (a run that diverged, a test on one seed), tuples, enums,
int-keyed dicts. JSON has no NaN, and a reader's parser would choke on Python's `NaN`
literal, so a number that is not finite is `null` here: unknown, which is what it means.
"""
from __future__ import annotations

import enum
import json
import math
from pathlib import Path
from typing import Any

# How the ledger writes a float that is not finite inside a free-form dict (agent/record/codec.py
# encodes it as its repr): a run's metrics read back with these strings where numbers were.
NOT_FINITE_TEXT = frozenset({"nan", "inf", "-inf"})


def plain(value: Any) -> Any:
    """`value` as JSON types: dicts with string keys, lists, str, int, finite float, bool,
    None. Non-finite floats become None; enums their value; tuples lists; paths text."""
    if isinstance(value, enum.Enum):          # first: Verdict and Role are str too
        return plain(value.value)
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(plain(key)): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON data: {type(value).__name__} {value!r}")


def numbers(value: Any) -> Any:
    """A free-form dict from the ledger (a run's metrics, a decision's details) as plain
    JSON, reading the ledger's text for a non-finite float ("nan", "inf") back as None."""
    if isinstance(value, str) and value in NOT_FINITE_TEXT:
        return None
    if isinstance(value, dict):
        return {str(key): numbers(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [numbers(item) for item in value]
    return plain(value)


def document_text(document: dict[str, Any]) -> str:
    """One document as the text `--json` prints: strict JSON (a NaN left anywhere raises
    here rather than reach a reader as an invalid token), indented for a person who looks,
    in ASCII (escaped) whatever the terminal's encoding."""
    return json.dumps(document, allow_nan=False, indent=2)
