"""What a model artifact may hold, checked before any loader reads it. Protected, like
evaluate.py, which calls `load_model`.

The training step runs the candidate's code, so its `model.pt2` is hostile input. torch's
export format is a zip of JSON and raw weights, but strings in it reach code on the way in:
a symbolic size goes to `sympy.sympify` (which calls `eval`), an operator name to a getattr
chain from `torch`, a forward argument name into generated guard code, node names into the
Python that torch.fx writes; weights marked `use_pickle`, the sample inputs and custom
objects are pickles. So the candidate's file never reaches torch:

1. **read**: only zip entries whose names are on an allow-list, within size limits;
2. **validate**: model.json and the two payload configs against schema.py, field by field,
   every string by a narrow grammar (an identifier, a dotted name, an operator on the
   allow-list, a size expression of integer arithmetic over symbols), unknown fields refused,
   the reason naming the entry and the field;
3. **copy**: a canonical archive written here (the validated JSON re-serialized, debug
   metadata such as stack traces dropped, no sample inputs), which is what torch loads;
4. **load** it with pickle refused, and audit every callable of the graph, recursively:
   node targets, callables passed as arguments, the bodies of higher-order operators;
5. **guard**: while the model loads and runs, an audit hook (`sys.addaudithook`) refuses
   code execution nobody planned: `exec`/`compile` outside the few places torch and the
   interpreter generate code (and there, source that smuggles anything in), processes,
   sockets, ctypes, writes, and reads outside the interpreter and the canonical copy. A
   route nobody has found yet then fails closed, as `bad_artifact` with the event named.

Any refusal raises `Rejected` (schema.py) with the reason.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import operator
import pickle
import re
import zipfile
from pathlib import Path

import torch

from schema import (ALLOWED_HIGHER_ORDER, ALLOWED_PYTHON_OPS, DENIED_ATEN, DTYPES, ITEMSIZE, MAX_JSON_BYTES,
                    OPERATOR_NAMESPACES, Rejected, exported_program, payload_config, short, show,
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

def canonical_copy(path: Path, dest: Path) -> Path:
    """Validate the archive at `path` and write its canonical copy at `dest`; Rejected naming
    the entry and the field otherwise. Only what the copy holds is ever loaded."""
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
        if "models/model.json" not in entries:
            raise Rejected(f"{path.name}: no models/model.json (save the model with save_model)")
        program = exported_program(strict_json(_read(archive, entries["models/model.json"], MAX_JSON_BYTES),
                                                "models/model.json"), "models/model.json")
        payloads: dict[str, bytes] = {}
        configs = {}
        for folder, prefix in (("weights", "model_weights_config.json"), ("constants", "model_constants_config.json")):
            rel = f"data/{folder}/{prefix}"
            config = payload_config(strict_json(_read(archive, entries[rel], MAX_JSON_BYTES), rel), rel) \
                if rel in entries else {"config": {}}
            for fqn, meta in config["config"].items():
                data_rel = f"data/{folder}/{meta['path_name']}"
                if data_rel not in entries:
                    raise Rejected(f"{path.name}: {rel}: {fqn} names {meta['path_name']}, which is not in the archive")
                payloads[data_rel] = _read(archive, entries[data_rel], MAX_ARCHIVE_BYTES)
                _check_payload(meta["tensor_meta"], len(payloads[data_rel]), f"{rel}: {fqn}")
            configs[rel] = config
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_STORED) as copy:
        for rel in SMALL_ENTRIES:
            copy.writestr(f"model/{rel}", small[rel])
        copy.writestr("model/models/model.json", json.dumps(program))
        for rel, config in configs.items():
            copy.writestr(f"model/{rel}", json.dumps(config))
        for rel, data in payloads.items():
            copy.writestr(f"model/{rel}", data)
        copy.writestr("model/data/sample_inputs/model.pt", _sample_inputs(program))
    return dest


def _sample_inputs(program: dict) -> bytes:
    """torch's loader wants example inputs, and the module it builds takes its signature from
    them; the candidate's are a pickle, so the copy holds ours: zeros of the user inputs'
    declared shapes (a symbolic size at its hint), saved here."""
    graph = program["graph_module"]["graph"]
    inputs = []
    for spec in program["graph_module"]["signature"]["input_specs"]:
        if "user_input" not in spec:
            continue
        arg = spec["user_input"]["arg"]
        meta = graph["tensor_values"].get(arg.get("as_tensor", {}).get("name"))
        if meta is None or meta["dtype"] not in DTYPES:
            raise Rejected("models/model.json: a user input that is not a tensor of a plain dtype")
        shape = [s.get("as_int", (s.get("as_expr", {}).get("hint") or {}).get("as_int", 2)) for s in meta["sizes"]]
        inputs.append(torch.zeros(shape, dtype=DTYPES[meta["dtype"]]))
    buffer = io.BytesIO()
    torch.save((tuple(inputs), {}), buffer)
    return buffer.getvalue()


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


def _check_payload(meta: dict, size: int, where: str) -> None:
    """A weight's bytes must cover its concrete shape: no symbolic sizes in stored tensors."""
    if not all("as_int" in s for s in meta["sizes"] + meta["strides"] + [meta["storage_offset"]]):
        raise Rejected(f"{where}: a stored tensor has symbolic sizes")
    sizes = [s["as_int"] for s in meta["sizes"]]
    strides = [s["as_int"] for s in meta["strides"]]
    if len(sizes) != len(strides) or any(v < 0 for v in sizes + strides) or meta["storage_offset"]["as_int"] < 0:
        raise Rejected(f"{where}: sizes {sizes} and strides {strides} do not describe a tensor")
    span = 0 if 0 in sizes else 1 + meta["storage_offset"]["as_int"] + sum(
        (n - 1) * s for n, s in zip(sizes, strides))
    if span * ITEMSIZE.get(meta["dtype"], 8) > size:
        raise Rejected(f"{where}: {size} bytes stored, fewer than its shape {sizes} needs")


# ---------------------------------------------------------------- loading and the audit

@contextlib.contextmanager
def no_pickle():
    """While loading: torch.load only in weights_only mode, and no pickle at all elsewhere
    (the canonical copy holds none; this is the second line)."""
    def refuse(*_args, **_kwargs):
        raise Rejected("it holds pickled data (unpickling runs code); save it with save_model")

    saved = (pickle.loads, pickle.load, torch.load, getattr(torch._C, "_pickle_load_obj", None))
    real_load = torch.load
    pickle.loads = pickle.load = refuse
    torch.load = lambda *args, **kwargs: real_load(*args, **{**kwargs, "weights_only": True})
    if saved[3] is not None:
        torch._C._pickle_load_obj = refuse
    try:
        yield
    finally:
        pickle.loads, pickle.load, torch.load = saved[:3]
        if saved[3] is not None:
            torch._C._pickle_load_obj = saved[3]


def load(copy: Path):
    """The exported program of a canonical copy, loaded with pickle refused and audited;
    Rejected saying why not. The evaluator calls it, and runs the model, inside guard.Guard."""
    try:
        with no_pickle():
            program = torch.export.load(str(copy))
    except Rejected:
        raise
    except Exception as error:
        raise Rejected(f"the model cannot be loaded: {type(error).__name__}: {short(error)}") from None
    audit(program)
    return program


def audit(program) -> None:
    """Only tensor arithmetic: no file access, no printing, no randomness, no state kept
    between calls (a model that remembers its inputs could tell a probe from a score), and
    every callable checked, wherever it appears: a node's target, an argument, a subgraph."""
    signature = program.graph_signature
    if signature.buffers_to_mutate or getattr(signature, "user_inputs_to_mutate", None):
        raise Rejected("the graph changes its own buffers or inputs when called (a stateful model)")
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op in ("call_module", "call_method"):
                raise Rejected(f"the graph calls Python ({node.op} {node.target}), not only operators")
            if node.op == "call_function" and not _allowed(node):
                raise Rejected(f"the graph uses {node.target}, which is not model arithmetic "
                               f"(file access, printing, randomness or a custom operator)")
            for value in _leaves((node.args, node.kwargs)):
                if callable(value) and not isinstance(value, (torch.fx.GraphModule, torch.fx.Node)):
                    raise Rejected(f"the graph passes {value} as an argument of {node.target}: "
                                   f"only subgraphs of the model may be passed")


def _leaves(value):
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    else:
        yield value


def _allowed(node: torch.fx.Node) -> bool:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        namespace, op_name = target.namespace, target._schema.name.split("::")[-1]
        if namespace not in OPERATOR_NAMESPACES or op_name in DENIED_ATEN:
            return False
        return torch.Tag.nondeterministic_seeded not in target.tags or _no_randomness(node)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name() in ALLOWED_HIGHER_ORDER
    module = getattr(target, "__module__", None)
    allowed = ALLOWED_PYTHON_OPS.get({"operator": "_operator"}.get(module, module), ())
    return getattr(target, "__name__", None) in allowed or target in (operator.getitem, math.floor, math.ceil)


def _no_randomness(node: torch.fx.Node) -> bool:
    """An op that can draw random numbers but does not here: attention or dropout with
    probability 0, or dropout outside training."""
    arguments = node.target._schema.arguments
    given = {a.name: a.default_value for a in arguments if a.has_default_value()}
    given |= dict(zip((a.name for a in arguments), node.args)) | dict(node.kwargs)
    if given.get("train") is False:
        return True
    probability = given.get("dropout_p", given.get("p"))
    return isinstance(probability, (int, float)) and probability == 0 and (
        "dropout_p" in given or "p" in given)
