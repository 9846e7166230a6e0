"""What a model artifact may hold, checked before anything reads it as a model. Protected,
like evaluate.py, which calls `read`.

The training step runs the candidate's code, so its `model.pt2` is hostile input. torch's
export format is a zip of JSON and raw weights, but in torch's loader strings of it reach
code: a symbolic size goes to `sympy.sympify` (which calls `eval`), an operator name to a
getattr chain from `torch`, a forward argument name into generated guard code, node names
into the Python that torch.fx writes; weights marked `use_pickle`, the sample inputs and custom
objects are pickles. So torch's loader never reads the candidate's file:

1. **read**: only zip entries whose names are on an allow-list, within size limits;
2. **validate**: model.json and the two payload configs against schema.py, field by field,
   every string by a narrow grammar (an identifier, a dotted name, an operator on the
   allow-list, a size expression of integer arithmetic over symbols), unknown fields refused,
   the reason naming the entry and the field;
3. **bind**: the weights made from their raw bytes (shape, strides and offset checked to fit
   the payload; no pickle is read), and the graph bound by graph.py's interpreter, which checks
   every node, recursively through the bodies of higher-order operators: operators on the
   allow-list, no randomness, no write to a weight or the input;
4. **guard**: while the model is bound and runs, an audit hook (guard.py, `sys.addaudithook`)
   refuses code execution, processes, sockets, ctypes, writes and reads outside the
   interpreter's own files. A route nobody has found yet then fails closed, as `bad_artifact`
   with the event named.

Any refusal raises `Rejected` (schema.py) with the reason.
"""
from __future__ import annotations

import math
import re
import sys
import zipfile
from pathlib import Path

import torch

from graph import Model
from schema import (DTYPES, MAX_JSON_BYTES, Rejected, exported_program, payload_config, short, show,
                    strict_json)

# ---------------------------------------------------------------- limits

MAX_ARCHIVE_BYTES = 16 << 30     # uncompressed, all entries
ROOT = re.compile(r"[A-Za-z0-9_.-]{1,128}\Z")
ENTRY = re.compile(r"(archive_format|archive_version|byteorder|\.data/version|\.data/serialization_id"
                   r"|models/model\.json|data/sample_inputs/model\.pt"
                   r"|data/weights/model_weights_config\.json|data/weights/weight_[0-9]{1,9}"
                   r"|data/constants/model_constants_config\.json|data/constants/tensor_[0-9]{1,9})\Z")
SMALL_ENTRIES = {"archive_format": re.compile(rb"pt2\Z"), "archive_version": re.compile(rb"[0-9]{1,8}\Z"),
                 "byteorder": re.compile(rb"(little|big)\Z"), ".data/version": re.compile(rb"[0-9]{1,8}\n?\Z"),
                 ".data/serialization_id": re.compile(rb"[0-9]{0,64}\Z")}


# ---------------------------------------------------------------- the archive

def read(path: Path) -> Model:
    """The model of the archive at `path`, validated and bound (graph.py); Rejected naming the
    entry and the field otherwise. torch's loader never sees the file."""
    if not path.is_file():
        raise Rejected(f"no model at {path.name}: train.py must end with save_model(model, ...) "
                       f"(train/evaluate.py), which writes $NIGHTSHIFT_OUT/{path.name}")
    if not zipfile.is_zipfile(path):
        raise Rejected(f"{path.name} is not an exported program (not a zip archive)")
    with zipfile.ZipFile(path) as archive:
        entries = _entries(archive, path.name)
        small = {rel: _read(archive, info, 64) for rel, info in entries.items() if rel in SMALL_ENTRIES}
        for rel, pattern in SMALL_ENTRIES.items():
            if not pattern.match(small.get(rel, b"")):
                raise Rejected(f"{path.name}: {rel} is missing or holds {show(small.get(rel))}")
        if small["byteorder"] != sys.byteorder.encode():
            raise Rejected(f"{path.name}: weights stored {small['byteorder'].decode()}-endian; this machine "
                           f"is {sys.byteorder}-endian")
        if "models/model.json" not in entries:
            raise Rejected(f"{path.name}: no models/model.json (save the model with save_model)")
        program = exported_program(strict_json(_read(archive, entries["models/model.json"], MAX_JSON_BYTES),
                                                "models/model.json"), "models/model.json")
        tensors: dict[str, torch.Tensor] = {}
        for folder, name in (("weights", "model_weights_config.json"), ("constants", "model_constants_config.json")):
            rel = f"data/{folder}/{name}"
            config = payload_config(strict_json(_read(archive, entries[rel], MAX_JSON_BYTES), rel), rel) \
                if rel in entries else {"config": {}}
            storages: dict[str, torch.Tensor] = {}   # one per payload: tensors sharing it stay views of it
            for fqn, meta in config["config"].items():
                data_rel = f"data/{folder}/{meta['path_name']}"
                if data_rel not in entries:
                    raise Rejected(f"{path.name}: {rel}: {fqn} names {meta['path_name']}, which is not in the archive")
                if data_rel not in storages:
                    storages[data_rel] = _storage(_read(archive, entries[data_rel], MAX_ARCHIVE_BYTES),
                                                  meta["tensor_meta"], f"{rel}: {fqn}")
                tensors[fqn] = _tensor(storages[data_rel], meta["tensor_meta"], f"{rel}: {fqn}")
    return Model(program, tensors)


def _storage(data: bytes, meta: dict, where: str) -> torch.Tensor:
    """A payload's raw bytes as a flat tensor of its dtype (torch writes a tensor's whole
    storage, its shape and strides in the config)."""
    dtype = DTYPES.get(meta["dtype"])
    if dtype is None:
        raise Rejected(f"{where}: dtype {meta['dtype']} is not a plain tensor dtype")
    if len(data) % dtype.itemsize:
        raise Rejected(f"{where}: {len(data)} bytes, not a whole number of {dtype} values")
    if not data:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype)


def _tensor(storage: torch.Tensor, meta: dict, where: str) -> torch.Tensor:
    """A stored tensor: its shape, strides and offset over the payload, checked to fit."""
    if not all("as_int" in s for s in meta["sizes"] + meta["strides"] + [meta["storage_offset"]]):
        raise Rejected(f"{where}: a stored tensor has symbolic sizes")
    sizes = [s["as_int"] for s in meta["sizes"]]
    strides = [s["as_int"] for s in meta["strides"]]
    offset = meta["storage_offset"]["as_int"]
    if len(sizes) != len(strides) or any(v < 0 for v in sizes + strides) or offset < 0:
        raise Rejected(f"{where}: sizes {sizes} and strides {strides} do not describe a tensor")
    if DTYPES.get(meta["dtype"]) != storage.dtype:
        raise Rejected(f"{where}: stored as {storage.dtype}, described as dtype {meta['dtype']}")
    span = 0 if 0 in sizes else 1 + offset + sum((n - 1) * s for n, s in zip(sizes, strides))
    if span > storage.numel():
        raise Rejected(f"{where}: {storage.numel() * storage.element_size()} bytes stored, fewer than its "
                       f"shape {sizes} needs")
    if math.prod(sizes) > max(span, 1):
        raise Rejected(f"{where}: sizes {sizes} and strides {strides} repeat its stored bytes")
    device = torch.device(meta["device"]["type"], meta["device"].get("index"))
    if device.type == "meta":
        raise Rejected(f"{where}: a tensor on the meta device holds no values")
    try:
        tensor = torch.zeros(sizes, dtype=storage.dtype) if span == 0 else storage.as_strided(sizes, strides, offset)
    except (RuntimeError, TypeError, OverflowError) as error:
        raise Rejected(f"{where}: sizes {sizes} cannot be made ({short(error)})") from None
    if device.type != "cpu":
        try:
            tensor = tensor.to(device)
        except (RuntimeError, AssertionError) as error:
            raise Rejected(f"{where}: saved on {device}, which this machine cannot use ({short(error)})") from None
    return tensor


def _entries(archive: zipfile.ZipFile, label: str) -> dict[str, zipfile.ZipInfo]:
    """The archive's entries by their path under its one root folder, each name allowed."""
    infos = archive.infolist()
    roots = {info.filename.split("/", 1)[0] for info in infos}
    if len(roots) != 1 or not ROOT.match(next(iter(roots))):
        raise Rejected(f"{label}: entries under {len(roots)} root folders; an exported program has one")
    found: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in infos:
        rel = info.filename.split("/", 1)[1] if "/" in info.filename else ""
        if not ENTRY.match(rel) or rel in found:
            raise Rejected(f"{label}: entry {info.filename!r} is not part of a model artifact "
                           f"(only the graph, its weights and constants are read)")
        if info.flag_bits & 0x1:
            raise Rejected(f"{label}: entry {info.filename!r} is encrypted")
        total += info.file_size
        found[rel] = info
    if total > MAX_ARCHIVE_BYTES:
        raise Rejected(f"{label}: {total} bytes uncompressed, more than the {MAX_ARCHIVE_BYTES} allowed")
    return found


def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo, most: int) -> bytes:
    if info.file_size > most:
        raise Rejected(f"entry {info.filename!r} holds {info.file_size} bytes, more than {most}")
    with archive.open(info) as stream:   # never more than declared: a lying header is caught
        data = stream.read(most + 1)
    if len(data) > most:
        raise Rejected(f"entry {info.filename!r} is larger than its header says")
    return data
