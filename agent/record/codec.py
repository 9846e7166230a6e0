"""Records <-> JSON-safe data, driven by the type hints of the dataclasses.

`encode(record)` gives what a ledger line holds; `decode(cls, data)` builds the record back,
converting nested records, enums, tuples and int-keyed dicts by their declared types, so a
field added to a record is written and read without more code. Keys a record lacks are
ignored (a newer harness wrote them); missing ones take the field's default.
"""
from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Mapping, Union


def encode(value: Any) -> Any:
    """JSON-safe data of a record: dataclasses as dicts (every field), enums as their value,
    tuples as lists, int dict keys as strings (JSON keys are strings), paths as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        return {key if isinstance(key, str) else str(key): encode(item) for key, item in value.items()}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)     # NaN and inf are not JSON; the line must stay valid
    return value


def decode(cls: type, data: Mapping[str, Any]) -> Any:
    """A record of type `cls` from JSON data: keys `cls` does not have are ignored (a newer
    harness wrote them), missing ones take their defaults."""
    if not isinstance(data, Mapping):
        raise TypeError(f"{cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs = {name: _value(hints[name], data[name]) for name in hints if name in data}
    return cls(**kwargs)


@lru_cache(maxsize=None)
def _hints_cached(cls: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls) if f.init)


def _hints(cls: type) -> dict[str, Any]:
    return dict(_hints_cached(cls))


def _value(hint: Any, value: Any) -> Any:
    """`value` (JSON data) as type `hint`."""
    if value is None or hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _value(options[0], value) if len(options) == 1 else value
    if origin is Literal:
        return value
    if dataclasses.is_dataclass(hint):
        return decode(hint, value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    args = typing.get_args(hint)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], item) for item in value)
        return tuple(_value(arg, item) for arg, item in zip(args, value))
    if origin is list:
        return [_value(args[0], item) for item in value] if args else list(value)
    if origin is dict:
        key_type, item_type = args if args else (Any, Any)
        return {_value(key_type, key): _value(item_type, item) for key, item in value.items()}
    if hint is float and isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, str):
        return int(value)
    return value
