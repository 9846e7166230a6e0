"""A model artifact's graph, run by an interpreter of our own. Protected, like evaluate.py,
which scores the model through it.

torch's loader (`torch.export.load`) turns the archive back into Python: it hands size
expressions to sympy (which calls `eval`), resolves names by getattr chains, and generates and
compiles Python for the graph module and its guards. Each is a door for a string in the
candidate's file. This module uses none of them. The JSON that schema.py validated is walked
once: each node is bound to an operator from a fixed table and its arguments to values or to
earlier nodes' results, and the graph then runs node by node. No source is generated, no
string is evaluated or imported, no pickle is read, and torch.export is never imported (its
serializer imports torch._dynamo: 1.2-1.8 s of every evaluation step).

What a graph may do is checked while it is bound; anything else is `Rejected`, naming the node:
- call an operator on the evaluator's list (schema.ALLOWED_OPERATORS), drawing no random
  numbers (dropout only with p = 0 or outside training), writing only to tensors the graph
  made itself. A write to a weight, a buffer, the input, or a view of one, would keep state
  from one call to the next, and a model that remembers could tell a probe from a score. A
  listed kernel that trusts its arguments gets them checked before the call (CHECKED);
- size arithmetic from a fixed table (schema.ALLOWED_PYTHON_OPS);
- the higher-order operators of a model (autocast, grad mode, cond, while_loop, map,
  invoke_subgraph), run here by a few lines each, their bodies bound by the same rules.
Sizes are never read from the archive's expressions: the graph computes them from its input
(aten.sym_size) like any other value.
"""
from __future__ import annotations

import math
import operator
import re
from typing import Any, Callable

import numpy as np
import torch

from schema import (ALLOWED_HIGHER_ORDER, ALLOWED_OPERATORS, ALLOWED_PYTHON_OPS, OPERATOR_NAMESPACES,
                    SCALAR_DTYPES, Rejected, not_listed)

SCHEMA_MAJOR = 8                 # torch/_export/serde/schema.py SCHEMA_VERSION, torch 2.13
MEMORY_FORMATS = {1: torch.contiguous_format, 2: torch.channels_last, 3: torch.channels_last_3d,
                  4: torch.preserve_format}
POSITIONAL, KEYWORD = 1, 2
PYTHON_MODULES = {"_operator": operator, "math": math, "torch": torch}

Getter = Callable[[dict], Any]   # the value of an argument, given the values computed so far


class Model:
    """The artifact's model: `model(windows)` -> its outputs, computed by the interpreter.

    `program` is model.json as schema.py validated it; `tensors` the weights and constants by
    their names (artifact.py reads them from the archive's raw bytes)."""

    def __init__(self, program: dict, tensors: dict[str, torch.Tensor]) -> None:
        major = program["schema_version"]["major"]
        if major != SCHEMA_MAJOR:
            raise Rejected(f"models/model.json: schema_version {major}.x; this evaluator reads "
                           f"{SCHEMA_MAJOR}.x (save the model with this environment's torch)")
        module = program["graph_module"]
        graph = module["graph"]
        self.bound: dict[str, Any] = {}
        user_inputs = []
        for spec in module["signature"]["input_specs"]:
            (kind, body), = spec.items()
            if kind == "user_input":
                if "as_tensor" not in body["arg"]:
                    raise Rejected("models/model.json: a user input that is not a tensor")
                user_inputs.append(body["arg"]["as_tensor"]["name"])
            elif kind == "constant_input":
                (_, value), = body["value"].items()
                self.bound[body["name"]] = None if "as_none" in body["value"] else value
            else:
                fqn = body.get("parameter_name") or body.get("buffer_name") or body["tensor_constant_name"]
                if fqn not in tensors:
                    raise Rejected(f"models/model.json: input_specs: {kind} {fqn} has no stored tensor")
                self.bound[body["arg"]["name"]] = tensors[fqn]
        if len(user_inputs) != 1:
            raise Rejected(f"the model must take one tensor of byte windows; it takes {len(user_inputs)} inputs")
        self.input_name = user_inputs[0]
        self.input_meta = graph["tensor_values"].get(self.input_name)
        if self.input_meta is None:
            raise Rejected(f"models/model.json: tensor_values has no entry for the input {self.input_name}")
        names = [_input_name(arg) for arg in graph["inputs"]]
        if sorted(names) != sorted([*self.bound, self.input_name]):
            raise Rejected("models/model.json: the graph's inputs are not the ones its signature binds")
        # Everything the graph is given comes from outside it: weights, buffers, the windows.
        self.graph = Graph(graph, "graph", shared=set(names))
        self.tensors = tensors
        self.ranges = program["range_constraints"]
        # What every call must leave as it found it: the static check above misses any write
        # through an alias torch's schemas do not annotate, so each call is checked after.
        self.pristine = Pristine({name: v for name, v in self.bound.items() if isinstance(v, torch.Tensor)})
        self.device = next((t.device for t in tensors.values()), torch.device("cpu"))

    @property
    def window_shape(self) -> tuple[int | None, int] | None:
        """(batch size, or None where the graph takes any; context length) of an int64 input of
        two dimensions; None for any other input."""
        sizes = self.input_meta["sizes"]
        if self.input_meta["dtype"] != 5 or len(sizes) != 2 or "as_int" not in sizes[1]:
            return None
        return sizes[0].get("as_int"), sizes[1]["as_int"]

    @property
    def max_batch(self) -> int | None:
        """The most windows a call may hold where the batch is a symbol the export bounded
        (range_constraints), else None."""
        size = self.input_meta["sizes"][0]
        symbol = re.fullmatch(r"Symbol\('([a-z]{1,3}[0-9]{1,9})'(, [a-z_]+=(True|False))*\)",
                              size.get("as_expr", {}).get("expr_str", ""))
        bound = self.ranges.get(symbol.group(1), {}) if symbol else {}
        return bound.get("max_val")

    def __call__(self, windows: torch.Tensor) -> Any:
        outputs = self.graph.run({**self.bound, self.input_name: windows})
        changed = self.pristine.changed()
        if changed:
            raise Rejected(f"calling the model changed {changed}, which it is given (a weight or a buffer): "
                           f"a model that changes its weights keeps state between calls")
        return outputs[0] if len(outputs) == 1 else outputs


class Pristine:
    """The given tensors as they were: each one's shape, strides, offset and storage, and a copy
    of every storage's bytes. `changed()` names one that differs now, or returns None. Bytes
    are compared bitwise (a NaN weight stays equal to itself; numpy's compare of bytes is 10x
    faster than torch.equal on the CPU), and the metadata too: an in-place view op (t_, squeeze_) changes no byte."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.layout = {name: _layout(t) for name, t in tensors.items()}
        self.tensors = tensors
        self.storages: dict[int, tuple[str, torch.Tensor, torch.Tensor]] = {}
        for name, t in tensors.items():
            storage = t.untyped_storage()
            if storage.data_ptr() not in self.storages:
                raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
                self.storages[storage.data_ptr()] = (name, raw, raw.clone())

    def changed(self) -> str | None:
        for name, t in self.tensors.items():
            if _layout(t) != self.layout[name]:
                return name
        for name, raw, copy in self.storages.values():
            if not (np.array_equal(raw.numpy(), copy.numpy()) if raw.device.type == "cpu" else torch.equal(raw, copy)):
                return name
        return None


def _layout(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.untyped_storage().data_ptr(), \
        t.untyped_storage().nbytes()


class Graph:
    """A graph of the archive bound to operators: `run(values)` with its inputs by name returns
    its outputs, in order. `shared` names the inputs that come from outside the graph (weights,
    buffers, the input, or a view of one): they may be read, never written."""

    def __init__(self, graph: dict, where: str, shared: set[str]) -> None:
        self.where = where
        self.inputs = [_input_name(arg) for arg in graph["inputs"]]
        self.shared = set(shared)          # grows with every view of a shared value
        defined = set(self.inputs)
        self.steps = []
        for i, node in enumerate(graph["nodes"]):
            where_node = f"{where}.nodes[{i}] ({node['target']})"
            _defined(node["inputs"], defined, where_node)
            self.steps.append(self._bind(node, where_node))
            defined |= _output_names(node)
        _defined([{"arg": arg} for arg in graph["outputs"]], defined, f"{where}.outputs")
        self.outputs = [_argument(arg, where) for arg in graph["outputs"]]
        self.returns_shared = any(_names(arg) & self.shared for arg in graph["outputs"])

    def run(self, values: dict) -> list:
        for call, args, kwargs, bind in self.steps:
            bind(values, call(*[get(values) for get in args], **{k: get(values) for k, get in kwargs.items()}))
        return [get(values) for get in self.outputs]

    def call(self, *inputs) -> list:
        """The graph as a function of its inputs in order (a higher-order operator's body)."""
        if len(inputs) != len(self.inputs):
            raise Rejected(f"{self.where}: called with {len(inputs)} values for {len(self.inputs)} inputs")
        return self.run(dict(zip(self.inputs, inputs)))

    # ---- binding a node: its callable, its arguments, where its results go

    def _bind(self, node: dict, where: str):
        target = node["target"]
        parts = target.split(".")
        if parts[:3] == ["torch", "ops", "higher_order"]:
            return self._higher_order(parts[3], node, where)
        if parts[:2] == ["torch", "ops"]:
            return self._operator(_overload(parts, where), node, where)
        if len(parts) == 2 and parts[1] in ALLOWED_PYTHON_OPS.get(parts[0], ()):
            function = getattr(PYTHON_MODULES[parts[0]], parts[1])
            args = [_argument(item["arg"], where) for item in node["inputs"]]
            if any(_names(item["arg"]) & self.shared for item in node["inputs"]):
                self.shared |= _output_names(node)   # getitem(w, 0) is a view, pos(w) is w
            return function, args, {}, _binder(node, where, single=True)
        raise Rejected(f"{where}: not an operator of a model")

    def _operator(self, op: torch._ops.OpOverload, node: dict, where: str):
        schema = op._schema
        given = {item["name"]: item for item in node["inputs"]}
        unknown = set(given) - {a.name for a in schema.arguments}
        if unknown:
            raise Rejected(f"{where}: {op} has no argument {sorted(unknown)[0]!r}")
        args, kwargs, positional = [], {}, True
        for spec in schema.arguments:   # in the schema's order: positional until the first keyword
            if spec.name not in given:
                positional = False
                continue
            item = given[spec.name]
            kind = item.get("kind") or (KEYWORD if spec.kwarg_only or spec.has_default_value() else POSITIONAL)
            positional = positional and kind == POSITIONAL and not spec.kwarg_only
            getter = _argument(item["arg"], where)
            if positional:
                args.append(getter)
            else:
                kwargs[spec.name] = getter
        if torch.Tag.nondeterministic_seeded in op.tags and not _no_randomness(schema, given):
            raise Rejected(f"{where}: {op} draws random numbers: no randomness at evaluation (a score is deterministic)")
        touched = {spec.name for spec in schema.arguments if spec.alias_info is not None}
        written = {spec.name for spec in schema.arguments if spec.alias_info is not None and spec.alias_info.is_write}
        for name in written & set(given):
            held = _names(given[name]["arg"]) & self.shared
            if held:
                raise Rejected(f"{where}: {op} writes to {sorted(held)[0]}, which the graph is given "
                               f"(a weight, a buffer, the input or a view of one): a model that changes "
                               f"them keeps state between calls")
        if any(r.alias_info is not None for r in schema.returns) and any(
                _names(given[n]["arg"]) & self.shared for n in touched & set(given)):
            self.shared |= _output_names(node)   # a view of a shared value is shared too
        return CHECKED.get(op, op), args, kwargs, _binder(node, where, single=len(schema.returns) == 1)

    def _higher_order(self, name: str, node: dict, where: str):
        if name not in ALLOWED_HIGHER_ORDER:
            raise Rejected(f"{where}: not a higher-order operator of a model")
        items = [item["arg"] for item in node["inputs"]]
        if any(item.get("kind") == KEYWORD and item["name"] for item in node["inputs"]):
            raise Rejected(f"{where}: keyword arguments to a higher-order operator")
        # Each operator's layout is fixed: its bodies where it takes them and nowhere else, its
        # operands after them, exactly as many as each body takes. A body's input is shared
        # where its operand is; where a body sees the operands otherwise (a loop's carried
        # values, a map's slices), all are shared if any operand is.
        values = [None if "as_graph" in arg else _argument(arg, where) for arg in items]
        bodies_at, operands_from, length = HIGHER_ORDER_LAYOUT[name]
        graphs_at = tuple(i for i, arg in enumerate(items) if "as_graph" in arg)
        if graphs_at != bodies_at or (length is not None and len(items) != length) or len(items) < operands_from:
            raise Rejected(f"{where}: {name} takes its bodies at {list(bodies_at)} and its operands from "
                           f"position {operands_from}; this node has {len(items)} inputs, bodies at {list(graphs_at)}")
        operands = [a for arg in items[operands_from:] for a in (_listed(arg) if _is_list(arg) else [arg])]
        shared_operands = [bool(_names(arg) & self.shared) for arg in operands]
        args, bodies = [], []
        for arg, value in zip(items, values):
            if value is not None:
                args.append(value)
                continue
            body = arg["as_graph"]
            inputs = [_input_name(a) for a in body["graph"]["inputs"]]
            if len(inputs) != len(operands):
                raise Rejected(f"{where}: the body {body['name']} takes {len(inputs)} inputs, "
                               f"given {len(operands)} operands")
            if name in ("while_loop", "map_impl"):
                shared = set(inputs) if any(shared_operands) else set()
            else:
                shared = {n for n, held in zip(inputs, shared_operands) if held}
            bodies.append(Graph(body["graph"], f"{where} {body['name']}", shared))
            args.append(_constant(bodies[-1].call))
        if any(body.returns_shared for body in bodies) or (
                name in ("while_loop", "map_impl") and any(shared_operands)):
            self.shared |= _output_names(node)   # the result may be a shared value, passed through
        return HIGHER_ORDER[name], args, {}, _binder(node, where, single=False)


# ---------------------------------------------------------------- the higher-order operators

def _autocast(device_type, dtype, enabled, cache_enabled, body, *operands):
    with torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled):
        return body(*operands)


def _set_grad_enabled(enabled, body, *operands):
    with torch.set_grad_enabled(enabled):
        return body(*operands)


def _cond(predicate, true_body, false_body, operands):
    return (true_body if bool(predicate) else false_body)(*operands)


def _while_loop(cond_body, loop_body, carried, additional):
    carried = list(carried)
    while bool(cond_body(*carried, *additional)[0]):
        carried = loop_body(*carried, *additional)
    return carried


def _map(body, xs, pos_args):
    rows = [body(*row, *pos_args) for row in zip(*[x.unbind(0) for x in xs])]
    return [torch.stack(column) for column in zip(*rows)]


def _invoke_subgraph(body, _identifier, *operands):
    return body(*operands)


HIGHER_ORDER = {"wrap_with_autocast": _autocast, "wrap_with_set_grad_enabled": _set_grad_enabled,
                "cond": _cond, "while_loop": _while_loop, "map_impl": _map, "invoke_subgraph": _invoke_subgraph}
# name: (where its bodies are, where its operands start, how many inputs it takes or None)
HIGHER_ORDER_LAYOUT = {"wrap_with_autocast": ((4,), 5, None), "wrap_with_set_grad_enabled": ((1,), 2, None),
                       "invoke_subgraph": ((0,), 2, None), "cond": ((1, 2), 3, 4), "while_loop": ((0, 1), 2, 4),
                       "map_impl": ((0,), 1, 3)}
assert set(HIGHER_ORDER) == ALLOWED_HIGHER_ORDER


# ---------------------------------------------------------------- kernels that trust their arguments

def _attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
               enable_gqa=False):
    """scaled_dot_product_attention, its shapes checked first. Its CPU kernel takes the number
    of keys from `value` and reads `key` that far: an edited graph whose key is shorter than its
    values read past the key's storage (garbage in the logits; a SIGSEGV for a long enough
    value, tried on torch 2.13). So: query, key and value of one rank, as many keys as values,
    one width for query and key, the same leading sizes (fewer key and value heads only with
    enable_gqa, dividing the query's), a mask that broadcasts to the scores."""
    tensors = (query, key, value)
    if not all(isinstance(t, torch.Tensor) for t in tensors) or len({t.dim() for t in tensors}) != 1 \
            or query.dim() < 2:
        raise Rejected("scaled_dot_product_attention: query, key and value must be tensors of one rank")
    (*q_lead, length, width), (*k_lead, keys, k_width), (*v_lead, values, _) = (t.shape for t in tensors)
    heads_fit = q_lead[-1:] == k_lead[-1:] or (enable_gqa and k_lead[-1] > 0 and q_lead[-1] % k_lead[-1] == 0)
    if keys != values or width != k_width or k_lead != v_lead or q_lead[:-1] != k_lead[:-1] or not heads_fit:
        raise Rejected(f"scaled_dot_product_attention: query {tuple(query.shape)}, key {tuple(key.shape)} and "
                       f"value {tuple(value.shape)} do not fit (as many keys as values, one width for query "
                       f"and key, the same batch and heads)")
    scores = (*q_lead, length, keys)
    if attn_mask is not None and (not isinstance(attn_mask, torch.Tensor) or attn_mask.dim() > len(scores)
                                  or _broadcast(attn_mask.shape, scores) != scores):
        raise Rejected(f"scaled_dot_product_attention: a mask of shape {tuple(attn_mask.shape)} for scores "
                       f"of shape {scores}")
    return torch.ops.aten.scaled_dot_product_attention.default(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


def _broadcast(shape, to) -> tuple | None:
    try:
        return tuple(torch.broadcast_shapes(tuple(shape), tuple(to)))
    except RuntimeError:
        return None


# operator: what the interpreter calls in its place (the same arguments, checked first)
CHECKED = {torch.ops.aten.scaled_dot_product_attention.default: _attention}


# ---------------------------------------------------------------- arguments and results

def _overload(parts: list[str], where: str) -> torch._ops.OpOverload:
    """torch.ops.<namespace>.<operator>.<overload>, looked up in torch's operator registry (the
    names are identifiers: schema.operator_target), never by a getattr chain from `torch`."""
    if len(parts) != 5 or parts[2] not in OPERATOR_NAMESPACES or ".".join(parts[2:]) not in ALLOWED_OPERATORS:
        raise Rejected(f"{where}: {not_listed('.'.join(parts))}")
    try:
        packet = getattr(getattr(torch.ops, parts[2]), parts[3])
    except (AttributeError, RuntimeError):
        raise Rejected(f"{where}: no such operator in this torch") from None
    if not isinstance(packet, torch._ops.OpOverloadPacket) or parts[4] not in packet.overloads():
        raise Rejected(f"{where}: no such operator in this torch")
    op = getattr(packet, parts[4])
    if not isinstance(op, torch._ops.OpOverload):
        raise Rejected(f"{where}: not an operator overload")
    return op


def _argument(arg: dict, where: str) -> Getter:
    """A getter for one argument: a constant, or values computed earlier in the graph."""
    (kind, value), = arg.items()
    if kind == "as_tensor":
        name = value["name"]
        return lambda values: values[name]
    if _is_list(arg):
        getters = [_argument(item, where) for item in _listed(arg)]
        return lambda values: [get(values) for get in getters]
    if kind in ("as_sym_int", "as_sym_bool", "as_sym_float", "as_optional_tensor"):
        (inner, item), = value.items()
        if inner in ("as_name", "as_tensor"):
            name = item if inner == "as_name" else item["name"]
            return lambda values: values[name]
        return _constant(None if inner == "as_none" else _number(item))
    if kind == "as_graph":
        raise Rejected(f"{where}: a subgraph passed to an operator that is not higher-order")
    return _constant(_value(kind, value, where))


def _value(kind: str, value: Any, where: str) -> Any:
    if kind == "as_none":
        return None
    if kind in ("as_int", "as_ints", "as_bool", "as_bools", "as_string", "as_strings", "as_int_lists"):
        return value
    if kind in ("as_float", "as_floats", "as_float_lists"):
        return _number(value)
    if kind == "as_scalar_type":
        if value not in SCALAR_DTYPES:
            raise Rejected(f"{where}: dtype {value} is not a tensor dtype")
        return SCALAR_DTYPES[value]
    if kind == "as_memory_format":
        if value not in MEMORY_FORMATS:
            raise Rejected(f"{where}: memory format {value} is not one of torch's")
        return MEMORY_FORMATS[value]
    if kind == "as_layout":
        return torch.strided
    if kind == "as_device":
        return torch.device(value["type"], value.get("index"))
    if kind == "as_complex":
        return complex(_number(value["real"]), _number(value["imag"]))
    raise Rejected(f"{where}: an argument of kind {kind} is not read")


def _number(value: Any) -> Any:
    if isinstance(value, list):
        return [_number(v) for v in value]
    return {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}.get(value, value) \
        if isinstance(value, str) else value


def _constant(value: Any) -> Getter:
    return lambda values: value


def _is_list(arg: dict) -> bool:
    return next(iter(arg)) in ("as_tensors", "as_optional_tensors", "as_sym_ints", "as_sym_bools", "as_sym_floats")


def _listed(arg: dict) -> list[dict]:
    """The items of a list argument, each as an argument of its own."""
    (kind, value), = arg.items()
    if kind == "as_tensors":
        return [{"as_tensor": item} for item in value]
    if kind == "as_optional_tensors":
        return [item if "as_tensor" in item else {"as_none": True} for item in value]
    single = kind[:-1]   # as_sym_ints -> as_sym_int
    return [{single: item} for item in value]


def _names(arg: dict) -> set[str]:
    """The names of the values an argument refers to."""
    (kind, value), = arg.items()
    if kind == "as_tensor":
        return {value["name"]}
    if _is_list(arg):
        return set().union(*[_names(item) for item in _listed(arg)])
    if kind in ("as_sym_int", "as_sym_bool", "as_sym_float", "as_optional_tensor"):
        (inner, item), = value.items()
        return {item} if inner == "as_name" else {item["name"]} if inner == "as_tensor" else set()
    return set()


def _input_name(arg: dict) -> str:
    names = _names(arg)
    if len(names) != 1:
        raise Rejected("models/model.json: a graph input that is not one named value")
    return next(iter(names))


def _defined(inputs: list[dict], defined: set[str], where: str) -> None:
    """Every value a node reads was made before it (a body's own values are its own)."""
    for item in inputs:
        if "as_graph" not in item["arg"]:
            missing = _names(item["arg"]) - defined
            if missing:
                raise Rejected(f"{where}: reads {sorted(missing)[0]}, which no earlier node makes")


def _output_names(node: dict) -> set[str]:
    return set().union(*[_names(arg) for arg in node["outputs"]]) if node["outputs"] else set()


def _binder(node: dict, where: str, single: bool) -> Callable[[dict, Any], None]:
    """Where a node's result goes. A single return (a tensor, a size, a list of tensors) goes
    to the node's one output; a sequence (an operator's several returns, a body's outputs) is
    spread over its outputs, one each, or into its one list output."""
    targets = [_target(out) for out in node["outputs"]]

    def bind(values: dict, result: Any) -> None:
        if not targets:
            return
        if single or (len(targets) == 1 and isinstance(targets[0], list)):
            _put(values, targets[0], result)
            return
        if not isinstance(result, (list, tuple)) or len(result) != len(targets):
            raise Rejected(f"{where}: returned {type(result).__name__}, not its {len(targets)} outputs")
        for target, value in zip(targets, result):
            _put(values, target, value)
    return bind


def _target(out: dict) -> str | list | None:
    """An output's name, its list of names, or None where nothing is named (None, a constant)."""
    if _is_list(out):
        return [_target(item) for item in _listed(out)]
    names = _names(out)
    return next(iter(names)) if names else None


def _put(values: dict, target: str | list | None, value: Any) -> None:
    if isinstance(target, list):
        if not isinstance(value, (list, tuple)) or len(value) != len(target):
            raise Rejected(f"a node returned {type(value).__name__} for a list of {len(target)} outputs")
        for name, item in zip(target, value):
            _put(values, name, item)
    elif target is not None:
        values[target] = value


def _no_randomness(schema, given: dict) -> bool:
    """An operator that can draw random numbers but does not here: attention or dropout with
    probability 0, or dropout outside training."""
    values = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    for name, item in given.items():
        (kind, value), = item["arg"].items()
        values[name] = _number(value) if kind in ("as_float", "as_int", "as_bool") else item["arg"]
    if values.get("train") is False:
        return True
    probability = values.get("dropout_p", values.get("p"))
    return isinstance(probability, (int, float)) and not isinstance(probability, bool) and probability == 0 \
        and ("dropout_p" in values or "p" in values)
