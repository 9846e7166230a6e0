"""The schema a model artifact's JSON must satisfy before anything reads it as a model.
Protected, like artifact.py, which reads the archive with it.

torch's export format (torch/_export/serde/schema.py) is a tree of records, unions and strings;
this is that tree less what a model never needs, with a grammar for every string, because in
torch's loader strings of it reach code: a symbolic size goes to `sympy.sympify` (which calls
`eval`), an operator name to a getattr chain from `torch`, names into the Python that torch.fx
and the export's guards compile. graph.py's interpreter reads none of them as code; the
grammar is the first line all the same, and gives a refusal that names the field. A checker
takes (value, where) and returns the value graph.py binds, or raises `Rejected` naming
`where` (the entry and the field path).
Records refuse unknown fields; unions hold exactly one of their fields.
"""
from __future__ import annotations

import ast
import json
import re
from typing import Any, Callable

import torch

class Rejected(Exception):
    """The artifact cannot be evaluated; the message says why, for the run's reason."""


# ---------------------------------------------------------------- limits and grammars

MAX_JSON_BYTES = 256 << 20
MAX_NODES = 200_000
MAX_TEXT = 4096                  # a metadata string (dropped from the copy, but bounded)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}\Z")
DOTTED = re.compile(r"[A-Za-z0-9_]{1,255}(\.[A-Za-z0-9_]{1,255}){0,63}\Z")   # blocks.0.qkv.weight
SYMBOL = re.compile(r"[a-z]{1,3}[0-9]{1,9}\Z")                              # s95, u0
WORD = re.compile(r"[A-Za-z0-9_]{0,64}\Z")        # a string argument of an operator: "cpu", "tanh"
EQUATION = re.compile(r"[A-Za-z., ]{1,128}(->[A-Za-z. ]{0,64})?\Z")   # einsum's: "bid,bjd->bij"

OPERATOR_NAMESPACES = ("aten", "prims")
# The operators a graph may call: what torch.export makes of standard layers. Derived by
# exporting a catalogue of models (benchmarks/grader/operators.py: train.py at several knob
# values, nanoGPT blocks, MLPs, norms, attention of several kinds, rotary, conv1d, a mixture of
# experts, autocast); tests/train/test_operators.py fails when one of those exports uses an
# operator not listed here, so a torch upgrade that renames one fails a test, not a night.
# An allow-list: of torch's ~2,960 aten and prims overloads, those with a side effect (random
# numbers, files, the log, global flags), the in-place ones a model does not need, and the
# internal kernels that trust their arguments are absent by construction, not by a name
# someone thought of. Every kernel listed checks its arguments on the CPU (tried with
# hostile ones: tests/train/test_operators.py) but scaled_dot_product_attention, whose shapes
# graph.py checks before the call.
ALLOWED_OPERATORS = frozenset({
    # layers
    "aten.linear.default", "aten.embedding.default", "aten.conv1d.default", "aten.layer_norm.default",
    "aten.rms_norm.default", "aten.scaled_dot_product_attention.default",
    "aten.dropout.default",                    # at evaluation only: p = 0 or train = False (graph.py)
    # arithmetic, elementwise
    "aten.add.Tensor", "aten.sub.Tensor", "aten.rsub.Scalar", "aten.mul.Tensor", "aten.div.Tensor",
    "aten.pow.Scalar", "aten.pow.Tensor_Scalar", "aten.square.default", "aten.sqrt.default",
    "aten.rsqrt.default", "aten.reciprocal.default", "aten.exp.default", "aten.cos.default", "aten.sin.default",
    "aten.tanh.default", "aten.sigmoid.default", "aten.relu.default", "aten.gelu.default", "aten.silu.default",
    "aten.clamp.default", "aten.clamp_min.default", "aten.matmul.default", "aten.outer.default",
    "aten.einsum.default",
    # in place, on values the graph made itself (train.py's norm); never on what it is given (graph.py)
    "aten.add_.Tensor", "aten.div_.Tensor", "aten.square_.default",
    # reductions and normalizations
    "aten.sum.default", "aten.sum.dim_IntList", "aten.mean.dim", "aten.var.dim", "aten.amax.default",
    "aten.linalg_vector_norm.default", "aten.softmax.int", "aten.log_softmax.int", "aten.cumsum.default",
    "aten.topk.default",
    # comparisons and selection
    "aten.eq.Scalar", "aten.gt.Scalar", "aten.where.ScalarSelf", "aten.masked_fill.Scalar",
    "aten.gather.default", "aten.tril.default", "aten.triu.default",
    # shapes and views
    "aten.view.default", "aten.reshape.default", "aten.transpose.int", "aten.permute.default",
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.flatten.using_ints", "aten.expand.default",
    "aten.expand_as.default", "aten.slice.Tensor", "aten.select.int", "aten.split.Tensor",
    "aten.split_with_sizes.default", "aten.chunk.default", "aten.unbind.int", "aten.cat.default",
    "aten.stack.default", "aten.pad.default", "aten.repeat_interleave.self_int", "aten.contiguous.default",
    "aten.alias.default", "aten.to.dtype",
    # making tensors (never uninitialized: no empty)
    "aten.arange.default", "aten.arange.start", "aten.arange.start_step", "aten.ones.default",
    "aten.zeros.default", "aten.full.default", "aten.zeros_like.default",
    # what the export itself adds: the input's sizes, and checks of a tensor's dtype
    "aten.sym_size.int", "aten._assert_tensor_metadata.default",
})
ALLOWED_HIGHER_ORDER = {"wrap_with_autocast", "wrap_with_set_grad_enabled", "cond", "while_loop",
                        "map_impl", "invoke_subgraph"}
ALLOWED_PYTHON_OPS = {   # symbolic-size arithmetic that torch.export emits as Python functions
    "_operator": {"getitem", "add", "sub", "mul", "floordiv", "truediv", "mod", "pow", "neg", "pos",
                  "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "lshift", "rshift"},
    "math": {"floor", "ceil", "trunc", "sqrt"},
    "torch": {"sym_int", "sym_float", "sym_max", "sym_min", "sym_not", "sym_ite", "sym_sqrt", "sym_sum"},
}
SYMPY_FUNCTIONS = {"Symbol", "Integer", "Add", "Mul", "Pow", "Mod", "Max", "Min", "FloorDiv", "PythonMod",
                   "CleanDiv", "CeilDiv", "ModularIndexing", "Eq", "Ne", "Lt", "Le", "Gt", "Ge",
                   "StrictLessThan", "StrictGreaterThan", "LessThan", "GreaterThan", "Equality",
                   "Unequality", "And", "Or", "Not", "Rational", "PowByNatural", "IntTrueDiv",
                   "FloorToInt", "CeilToInt", "TruncToInt", "Identity"}
SYMBOL_ASSUMPTIONS = {"positive", "negative", "nonnegative", "nonpositive", "integer", "real", "finite",
                      "nonzero", "zero", "even", "odd", "extended_real"}
LAYOUT_STRIDED, MEMORY_FORMATS = 7, {0, 1, 2, 3, 4}
DEVICES = {"cpu", "cuda", "mps", "meta"}
# torch/_export/serde/schema.py's ScalarType enum (tests/train/test_graph.py checks it against torch's)
SCALAR_DTYPES = {1: torch.uint8, 2: torch.int8, 3: torch.int16, 4: torch.int32, 5: torch.int64,
                 6: torch.float16, 7: torch.float32, 8: torch.float64, 9: torch.complex32,
                 10: torch.complex64, 11: torch.complex128, 12: torch.bool, 13: torch.bfloat16,
                 28: torch.uint16, 29: torch.float8_e4m3fn, 30: torch.float8_e5m2,
                 31: torch.float8_e4m3fnuz, 32: torch.float8_e5m2fnuz, 33: torch.float8_e8m0fnu,
                 34: torch.uint32, 35: torch.uint64}
# The dtypes a stored tensor may have: plain numbers (no complex, no float8)
DTYPES = {code: SCALAR_DTYPES[code] for code in (1, 2, 3, 4, 5, 6, 7, 8, 12, 13)}
SCALAR_TYPES = {0} | set(SCALAR_DTYPES)   # 0: the serializer's "unknown"


def sym_expression(text: str) -> bool:
    """A symbolic size as torch writes it (`Symbol('s95', positive=True, integer=True)`,
    `Mul(Integer(2), Symbol('s0'))`, `2*s0 + 1`): integers, symbols and the arithmetic of
    SYMPY_FUNCTIONS, nothing else. Parsed, never evaluated (Qiskit's allow-list fix for the
    same hole, PR #14024)."""
    if not isinstance(text, str) or len(text) > 2000:
        return False
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return False
    nodes = list(ast.walk(tree))
    if len(nodes) > 400:
        return False
    for node in nodes:
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in SYMPY_FUNCTIONS):
                return False
            if node.func.id == "Symbol":
                if not (node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                        and SYMBOL.match(node.args[0].value) and len(node.args) == 1):
                    return False
            if any(k.arg not in SYMBOL_ASSUMPTIONS or not isinstance(k.value, ast.Constant)
                   or not isinstance(k.value.value, bool) for k in node.keywords):
                return False
        elif isinstance(node, ast.Name):
            if not (SYMBOL.match(node.id) or node.id in SYMPY_FUNCTIONS):
                return False
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, str) and not SYMBOL.match(node.value):
                return False
            if not isinstance(node.value, (int, str)):
                return False
        elif not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult,
                                   ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd, ast.keyword,
                                   ast.Load)):
            return False
    return True


def operator_target(name: str) -> bool:
    """A node's target: an operator on ALLOWED_OPERATORS, an allowed higher-order operator, or
    symbolic-size arithmetic."""
    parts = name.split(".") if isinstance(name, str) else []
    if not all(IDENTIFIER.match(p) for p in parts):
        return False
    if len(parts) == 5 and parts[:2] == ["torch", "ops"]:
        return ".".join(parts[2:]) in ALLOWED_OPERATORS
    if len(parts) == 4 and parts[:3] == ["torch", "ops", "higher_order"]:
        return parts[3] in ALLOWED_HIGHER_ORDER
    return len(parts) == 2 and parts[1] in ALLOWED_PYTHON_OPS.get(parts[0], ())


def not_listed(name: str) -> str:
    """Why a target is refused, with the fix: an operator by its name, anything else by its kind."""
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) == 5 and parts[:2] == ["torch", "ops"] and all(IDENTIFIER.match(p) for p in parts):
        return (f"operator {'.'.join(parts[2:])} is not on the evaluator's list (train/schema.py "
                f"ALLOWED_OPERATORS: what exports of standard layers use; no randomness, side effect "
                f"or unchecked kernel): build the model from standard layers")
    return (f"{show(name)} is not an allowed operator (an aten operator on the evaluator's list, the "
            f"higher-order operators of a model, size arithmetic)")


def target(value: Any, where: str) -> str:
    if not isinstance(value, str) or not operator_target(value):
        raise _refuse(where, not_listed(value))
    return value


# ---------------------------------------------------------------- the schema
# A checker takes (value, where) and returns the value graph.py binds, or
# raises Rejected naming `where` (entry: field path). Records refuse unknown fields; unions
# hold exactly one of their fields; every string has a grammar.

Checker = Callable[[Any, str], Any]


def _refuse(where: str, problem: str) -> Rejected:
    return Rejected(f"{where}: {problem}")


def grammar(pattern: re.Pattern | Callable[[str], bool], what: str) -> Checker:
    test = pattern.match if isinstance(pattern, re.Pattern) else pattern

    def check(value: Any, where: str) -> str:
        if not isinstance(value, str) or not test(value):
            raise _refuse(where, f"{show(value)} is not {what}")
        return value
    return check


def kind(*types: type, values: set | None = None) -> Checker:
    def check(value: Any, where: str) -> Any:
        if type(value) not in types or (values is not None and value not in values):
            raise _refuse(where, f"{show(value)} is not {' or '.join(t.__name__ for t in types)}"
                          + (f" in {sorted(values)}" if values is not None else ""))
        return value
    return check


def number(value: Any, where: str) -> Any:
    if value in ("Infinity", "-Infinity", "NaN") or type(value) in (int, float):
        return value
    raise _refuse(where, f"{show(value)} is not a number")


def text(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise _refuse(where, f"not a string of at most {MAX_TEXT} characters")
    return value


def not_pickled(value: Any, where: str) -> bool:
    if value is not False:
        raise _refuse(where, f"{show(value)}: the tensor is pickled, and unpickling runs code "
                      f"(save the model with save_model)")
    return value


def nullable(inner: Checker) -> Checker:
    return lambda value, where: None if value is None else inner(value, where)


def list_of(inner: Checker, most: int = MAX_NODES) -> Checker:
    def check(value: Any, where: str) -> list:
        if not isinstance(value, list) or len(value) > most:
            raise _refuse(where, f"not a list of at most {most} items")
        return [inner(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return check


def dict_of(key: Checker, inner: Checker) -> Checker:
    def check(value: Any, where: str) -> dict:
        if not isinstance(value, dict) or len(value) > MAX_NODES:
            raise _refuse(where, "not an object")
        return {key(k, f"{where} key"): inner(v, f"{where}.{k}") for k, v in value.items()}
    return check


def empty(value: Any, where: str) -> dict:
    if value not in ({}, [], None):
        raise _refuse(where, "must be empty (nothing a model needs)")
    return value


def dropped(value: Any, where: str) -> dict:
    """Debug metadata (stack traces, module paths): bounded strings, never written to the copy."""
    dict_of(grammar(IDENTIFIER, "a metadata key"), text)(value, where)
    return {}


def record(fields: dict[str, Checker], required: tuple[str, ...] = ()) -> Checker:
    def check(value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise _refuse(where, "not an object")
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise _refuse(where, f"unknown field {unknown[0]!r} (a model artifact holds only "
                          f"{', '.join(sorted(fields))})")
        missing = [name for name in required if name not in value]
        if missing:
            raise _refuse(where, f"missing field {missing[0]!r}")
        return {name: fields[name](v, f"{where}.{name}") for name, v in value.items()}
    return check


def union(fields: dict[str, Checker]) -> Checker:
    inner = record(fields)

    def check(value: Any, where: str) -> dict:
        if not isinstance(value, dict) or len(value) != 1:
            raise _refuse(where, f"must hold exactly one of {', '.join(sorted(fields))}")
        return inner(value, where)
    return check


def json_text(inner: Checker) -> Checker:
    """A string holding JSON (the pytree specs), parsed strictly and checked."""
    def check(value: Any, where: str) -> str:
        if not isinstance(value, str) or len(value) > MAX_TEXT * 16:
            raise _refuse(where, "not a JSON string")
        return json.dumps(inner(strict_json(value.encode(), where), where))
    return check


def _lazy(name: str) -> Checker:   # for the recursive types (a graph argument holds a graph)
    return lambda value, where: SCHEMA[name](value, where)


name = grammar(IDENTIFIER, "an identifier")
dotted = grammar(DOTTED, "a dotted name")
integer, boolean = kind(int), kind(bool)
hint = nullable(union({"as_int": integer, "as_bool": boolean, "as_float": number}))
sym_expr = record({"expr_str": grammar(sym_expression, "a size expression (integers, symbols and "
                                       "arithmetic)"), "hint": hint}, ("expr_str",))
sym_int = union({"as_expr": sym_expr, "as_int": integer})
sym_bool = union({"as_expr": sym_expr, "as_bool": boolean})
sym_float = union({"as_expr": sym_expr, "as_float": number})
device = record({"type": kind(str, values=DEVICES), "index": nullable(integer)}, ("type",))
tensor_meta = record({"dtype": kind(int, values=SCALAR_TYPES), "sizes": list_of(sym_int, 16),
                      "requires_grad": boolean, "device": device, "strides": list_of(sym_int, 16),
                      "storage_offset": sym_int, "layout": kind(int, values={LAYOUT_STRIDED})},
                     ("dtype", "sizes", "device", "strides", "storage_offset", "layout"))
tensor_arg = record({"name": name}, ("name",))
optional_tensor = union({"as_tensor": tensor_arg, "as_none": boolean})
sym_name = lambda value_checker: union({"as_name": name, **value_checker})   # noqa: E731
ARGUMENT_KINDS = {   # torch's Argument union, less what a model never needs: a callable passed as
    # an argument (as_operator: a cond whose branches are random ops), custom objects (pickles)
    "as_none": boolean, "as_tensor": tensor_arg, "as_tensors": list_of(tensor_arg),
    "as_int": integer, "as_ints": list_of(integer), "as_float": number, "as_floats": list_of(number),
    "as_string": grammar(lambda text: bool(WORD.match(text) or EQUATION.match(text)), "a plain word or an "
                         "einsum equation"),
    "as_strings": list_of(grammar(WORD, "a plain word")),
    "as_sym_int": sym_name({"as_int": integer}), "as_sym_ints": list_of(sym_name({"as_int": integer})),
    "as_sym_bool": sym_name({"as_bool": boolean}), "as_sym_bools": list_of(sym_name({"as_bool": boolean})),
    "as_sym_float": sym_name({"as_float": number}), "as_sym_floats": list_of(sym_name({"as_float": number})),
    "as_scalar_type": kind(int, values=SCALAR_TYPES), "as_memory_format": kind(int, values=MEMORY_FORMATS),
    "as_layout": kind(int, values={LAYOUT_STRIDED}), "as_device": device, "as_bool": boolean,
    "as_bools": list_of(boolean), "as_optional_tensors": list_of(optional_tensor),
    "as_optional_tensor": optional_tensor, "as_int_lists": list_of(list_of(integer)),
    "as_float_lists": list_of(list_of(number)),
    "as_complex": record({"real": number, "imag": number}, ("real", "imag")),
    "as_graph": record({"name": name, "graph": _lazy("graph")}, ("name", "graph")),
}
argument = union(ARGUMENT_KINDS)
node = record({"target": target,
               "inputs": list_of(record({"name": grammar(re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,255})?\Z"),
                                                         "an argument name"),
                                         "arg": argument, "kind": nullable(kind(int, values={0, 1, 2}))},
                                        ("name", "arg")), 256),
               "outputs": list_of(argument, 256), "metadata": dropped,
               "is_hop_single_tensor_return": nullable(boolean), "name": nullable(name)},
              ("target", "inputs", "outputs"))
tree_spec = record({"type": nullable(kind(str, values={"builtins.tuple", "builtins.list", "builtins.dict"})),
                    "context": nullable(json_text(nullable(list_of(kind(str, int), 4096)))),
                    "children_spec": list_of(_lazy("tree_spec"), 4096)}, ("type", "context", "children_spec"))
SCHEMA: dict[str, Checker] = {
    "tree_spec": tree_spec,
    "graph": record({"inputs": list_of(argument), "outputs": list_of(argument), "nodes": list_of(node),
                     "tensor_values": dict_of(name, tensor_meta), "sym_int_values": dict_of(name, sym_int),
                     "sym_bool_values": dict_of(name, sym_bool), "sym_float_values": dict_of(name, sym_float),
                     "is_single_tensor_return": boolean, "custom_obj_values": empty},
                    ("inputs", "outputs", "nodes", "tensor_values", "sym_int_values", "sym_bool_values")),
}
spec_string = json_text(lambda value, where: (
    [kind(int, values={1})(value[0], where), tree_spec(value[1], where)]
    if isinstance(value, list) and len(value) == 2 else _raise(_refuse(where, "not a pytree spec"))))
input_spec = union({
    "user_input": record({"arg": argument}, ("arg",)),
    "parameter": record({"arg": tensor_arg, "parameter_name": dotted}, ("arg", "parameter_name")),
    "buffer": record({"arg": tensor_arg, "buffer_name": dotted, "persistent": boolean},
                     ("arg", "buffer_name", "persistent")),
    "tensor_constant": record({"arg": tensor_arg, "tensor_constant_name": dotted},
                              ("arg", "tensor_constant_name")),
    "constant_input": record({"name": name, "value": union({"as_none": boolean, "as_int": integer,
                                                            "as_float": number, "as_bool": boolean})},
                             ("name", "value")),
})
output_spec = union({"user_output": record({"arg": argument}, ("arg",))})   # no mutation, no loss, no tokens
exported_program = record({
    "graph_module": record({
        "graph": SCHEMA["graph"],
        "signature": record({"input_specs": list_of(input_spec), "output_specs": list_of(output_spec)},
                            ("input_specs", "output_specs")),
        "module_call_graph": list_of(record({
            "fqn": grammar(re.compile(r"(" + DOTTED.pattern[:-2] + r")?\Z"), "a module path"),
            "signature": nullable(record({"inputs": list_of(argument), "outputs": list_of(argument),
                                          "in_spec": spec_string, "out_spec": spec_string,
                                          "forward_arg_names": nullable(list_of(name, 256))},
                                         ("inputs", "outputs", "in_spec", "out_spec")))}, ("fqn",))),
        "metadata": empty, "treespec_namedtuple_fields": empty}, ("graph", "signature", "module_call_graph")),
    "opset_version": dict_of(kind(str, values=set(OPERATOR_NAMESPACES)), integer),
    "range_constraints": dict_of(grammar(SYMBOL, "a symbol"),
                                 record({"min_val": nullable(integer), "max_val": nullable(integer)},
                                        ("min_val", "max_val"))),
    "schema_version": record({"major": integer, "minor": integer}, ("major", "minor")),
    "verifiers": list_of(kind(str, values={"TRAINING", "ATEN"}), 4),
    "torch_version": grammar(re.compile(r"[0-9A-Za-z.+_-]{1,64}\Z"), "a version"),
    "guards_code": empty,   # Python source: torch compiles it into a guard function
}, ("graph_module", "opset_version", "range_constraints", "schema_version"))
payload_config = record({"config": dict_of(dotted, record({
    "path_name": grammar(re.compile(r"(weight|tensor)_[0-9]{1,9}\Z"), "a payload file name"),
    "is_param": boolean, "use_pickle": not_pickled,
    "tensor_meta": tensor_meta}, ("path_name", "is_param", "use_pickle", "tensor_meta")))}, ("config",))


def _raise(error: Exception):
    raise error


def show(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def strict_json(data: bytes, where: str) -> Any:
    """JSON with duplicate keys refused (two readers could take different ones)."""
    def pairs(items: list) -> dict:
        keys = [k for k, _ in items]
        if len(keys) != len(set(keys)):
            raise _refuse(where, "a key appears twice")
        return dict(items)
    try:
        return json.loads(data, object_pairs_hook=pairs)
    except (ValueError, RecursionError) as error:
        raise _refuse(where, f"not valid JSON ({short(error)})") from None


def short(error: BaseException, limit: int = 300) -> str:
    text_ = " ".join(str(error).split())
    return text_ if len(text_) <= limit else text_[:limit] + " ..."
