"""The operators a graph may call (train/schema.py ALLOWED_OPERATORS, graph.py's checks): every
operator that exports of standard models use is listed; anything else is refused by name; a
listed kernel either checks its arguments itself (tried here with hostile ones) or is checked
by the interpreter first; and no listed operator lets a graph keep state between calls."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "train"))
import evaluate  # noqa: E402
import graph  # noqa: E402
import prepare  # noqa: E402
import schema  # noqa: E402
from benchmarks.grader import operators as catalogue  # noqa: E402
from tests.train.test_artifact import edit_model, honest, rewrite  # noqa: E402
from tests.train.test_evaluate import Attention  # noqa: E402
from tests.train.test_graph import _node, _prepend, _weight_name  # noqa: E402
from tests.train.test_prepare import make_corpus  # noqa: E402


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("operators")
    return prepare.prepare(make_corpus(root / "corpus"), root / "data")


def _unlisted(found: dict[str, set[str]]) -> dict[str, list[str]]:
    listed = schema.ALLOWED_OPERATORS | {f"higher_order.{name}" for name in schema.ALLOWED_HIGHER_ORDER}
    return {name: sorted(operators - listed) for name, operators in found.items() if operators - listed}


def test_every_operator_the_standard_layers_export_to_is_listed(tmp_path):
    """A torch upgrade that renames an operator of a standard layer fails here, not in a night."""
    assert _unlisted(catalogue.standard_operators(tmp_path)) == {}


@pytest.mark.slow
def test_every_operator_train_py_exports_to_is_listed_at_any_knobs(tmp_path, data_dir):
    found = catalogue.train_py_operators(tmp_path, data_dir)
    assert set(found) == {*catalogue.TRAIN_VARIANTS, *catalogue.TRAIN_EDITS}
    assert _unlisted(found) == {}


@pytest.mark.parametrize("target, inputs", [
    # memory-unsafe: an index kernel that skips its bounds check, storage swapped under a tensor
    ("torch.ops.aten._unsafe_index.Tensor", {"self": {"as_tensor": {"name": "idx"}},
                                             "indices": {"as_optional_tensors": [{"as_tensor": {"name": "idx"}}]}}),
    ("torch.ops.aten.set_.source_Tensor", {"self": {"as_tensor": {"name": "idx"}},
                                           "source": {"as_tensor": {"name": "idx"}}}),
    # side effects: random numbers (global generator state), the log, a process-global cache size
    ("torch.ops.aten.bernoulli.p", {"self": {"as_tensor": {"name": "idx"}}, "p": {"as_float": 0.5}}),
    ("torch.ops.aten._print.default", {"s": {"as_string": "hello"}}),
    ("torch.ops.aten._cufft_set_plan_cache_max_size.default", {"device_index": {"as_int": 0},
                                                               "max_size": {"as_int": 0}}),
    # in place on the input, by an operator no standard layer needs
    ("torch.ops.aten.fill_.Scalar", {"self": {"as_tensor": {"name": "idx"}}, "value": {"as_int": 0}}),
], ids=["_unsafe_index", "set_", "bernoulli", "_print", "a global flag", "fill_"])
def test_an_operator_off_the_list_is_refused_by_name_with_the_fix(tmp_path, data_dir, target, inputs):
    """One node of an exported graph edited to call it: refused before anything runs, by the
    schema (naming the operator and the list) and, with the schema skipped, by the interpreter."""
    evil = rewrite(honest(tmp_path), tmp_path / "evil.pt2", _prepend(_node(target, inputs, "evil")))
    result = evaluate.evaluate(evil, data_dir, "val", seed=1)
    name = target.removeprefix("torch.ops.")
    assert result["probes"]["artifact"]["ok"] is False and "val_bpb" not in result
    assert f"operator {name} is not on the evaluator's list (train/schema.py ALLOWED_OPERATORS" \
        in result["probes"]["artifact"]["detail"], result["probes"]["artifact"]["detail"]
    with pytest.raises(schema.Rejected, match=f"operator {name} is not on the evaluator's list"):
        graph._overload(target.split("."), "graph.nodes[0]")


def test_no_listed_operator_keeps_state_or_draws_random_numbers():
    """Listed: pure functions of their arguments. None writes to an argument but the three
    in-place operators (on the graph's own values only: graph.py refuses them on what it is
    given); the two that can draw random numbers (dropout, attention's dropout_p) are bound
    only where they draw none; none makes uninitialized memory."""
    writes, seeded = set(), set()
    for name in schema.ALLOWED_OPERATORS:
        namespace, packet, overload = name.split(".")
        op = getattr(getattr(getattr(torch.ops, namespace), packet), overload)
        if any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments):
            writes.add(name)
        if torch.Tag.nondeterministic_seeded in op.tags:
            seeded.add(name)
    assert writes == {"aten.add_.Tensor", "aten.div_.Tensor", "aten.square_.default"}
    assert seeded <= {"aten.dropout.default", "aten.scaled_dot_product_attention.default"}
    assert not {name for name in schema.ALLOWED_OPERATORS if "empty" in name}


# Hostile arguments to the listed kernels that index or size memory: torch's CPU kernel must
# raise (a torch upgrade that drops one of these checks fails here; run in a process of its own,
# since a kernel that does not check may crash it).
HOSTILE = {
    "embedding, index past the table": "aten.embedding.default(torch.zeros(4, 3), torch.tensor([1 << 40]))",
    "embedding, negative index": "aten.embedding.default(torch.zeros(4, 3), torch.tensor([-5]))",
    "gather, index past the dimension": "aten.gather.default(torch.zeros(4, 3), 1, torch.tensor([[1 << 40]]))",
    "gather, negative index": "aten.gather.default(torch.zeros(4, 3), 1, torch.tensor([[-7]]))",
    "gather, index larger than the input": "aten.gather.default(torch.zeros(4, 3), 1, torch.zeros(100, 2, dtype=torch.long))",
    "topk, k past the size": "aten.topk.default(torch.zeros(4), 10)",
    "repeat_interleave, negative": "aten.repeat_interleave.self_int(torch.zeros(4), -3)",
    "layer_norm, short weight": "aten.layer_norm.default(torch.zeros(2, 8), [8], torch.zeros(2), torch.zeros(2))",
    "rms_norm, short weight": "aten.rms_norm.default(torch.zeros(2, 8), [8], torch.zeros(2))",
    "conv1d, negative padding": "aten.conv1d.default(torch.zeros(1, 2, 8), torch.zeros(2, 2, 3), None, [1], [-5])",
    "conv1d, stride 0": "aten.conv1d.default(torch.zeros(1, 2, 8), torch.zeros(2, 2, 3), None, [0])",
    "conv1d, short bias": "aten.conv1d.default(torch.zeros(1, 2, 8), torch.zeros(2, 2, 3), torch.zeros(1))",
    "linear, long bias": "aten.linear.default(torch.zeros(2, 8), torch.zeros(4, 8), torch.zeros(1000))",
    "pad, negative past the size": "aten.pad.default(torch.zeros(1, 8), [-100, 0])",
    "split_with_sizes, negative": "aten.split_with_sizes.default(torch.zeros(8), [100, -92])",
    "slice, step 0": "aten.slice.Tensor(torch.zeros(8), 0, 0, 8, 0)",
    "select, index past the size": "aten.select.int(torch.zeros(8), 0, 1 << 40)",
    "view, wrong size": "aten.view.default(torch.zeros(8), [3, 4])",
    "expand, wrong size": "aten.expand.default(torch.zeros(3), [4])",
    "einsum, sizes that disagree": "aten.einsum.default('ii->i', [torch.zeros(3, 4)])",
    "cat, dimension past the rank": "aten.cat.default([torch.zeros(2, 2)], 5)",
    "masked_fill, mask of another shape": "aten.masked_fill.Scalar(torch.zeros(8), torch.zeros(100, dtype=torch.bool), 1.0)",
    "cumsum, dimension past the rank": "aten.cumsum.default(torch.zeros(8), 5)",
    "arange, step 0": "aten.arange.start_step(0, 10, 0)",
    "full, negative size": "aten.full.default([-5], 1.0)",
    "ones, size past memory": "aten.ones.default([1 << 62, 1 << 62])",
}
_PROBE = """
import json, sys, torch
from torch.ops import aten
raised = {}
for name, call in json.loads(sys.stdin.read()).items():
    try:
        eval(call)
        raised[name] = None
    except (RuntimeError, IndexError, ValueError) as error:
        raised[name] = type(error).__name__
print(json.dumps(raised))
"""


def test_the_listed_kernels_that_index_or_size_memory_check_their_arguments():
    done = subprocess.run([sys.executable, "-c", _PROBE], input=json.dumps(HOSTILE), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"a listed kernel crashed on a hostile argument: {done.stderr[-2000:]}"
    assert {name for name, error in json.loads(done.stdout).items() if error is None} == set()


def test_torch_s_attention_kernel_reads_past_a_key_shorter_than_its_values():
    """Why graph.py checks attention's shapes: on this torch the CPU kernel takes the number of
    keys from `value` and reads `key` that far (here into the rest of the key's storage; with
    a long enough value past it: a SIGSEGV). If an upgrade adds the check, this fails, and the
    interpreter's own check could go."""
    torch.manual_seed(0)
    q, stored, v = torch.randn(1, 1, 4, 8), torch.randn(1, 1, 16, 8), torch.randn(1, 1, 16, 8)
    short = stored[:, :, :1]                                      # one key; 15 more rows behind it
    out = torch.ops.aten.scaled_dot_product_attention.default(q, short, v)
    assert torch.allclose(out, torch.ops.aten.scaled_dot_product_attention.default(q, stored, v))
    with pytest.raises(schema.Rejected, match="do not fit"):
        graph.CHECKED[torch.ops.aten.scaled_dot_product_attention.default](q, short, v)


def _long_values(model: dict) -> None:
    """One node added and one argument changed: attention's value repeated 4096 times along
    the keys, its key left as it was."""
    nodes = model["graph_module"]["graph"]["nodes"]
    at = next(i for i, n in enumerate(nodes) if n["target"].endswith("scaled_dot_product_attention.default"))
    value = next(item for item in nodes[at]["inputs"] if item["name"] == "value")
    nodes.insert(at, _node("torch.ops.aten.repeat_interleave.self_int",
                           {"self": value["arg"], "repeats": {"as_int": 4096}, "dim": {"as_int": 1}}, "long_value"))
    value["arg"] = {"as_tensor": {"name": "long_value"}}


def test_attention_whose_key_is_shorter_than_its_values_is_refused_before_the_kernel_runs(tmp_path, data_dir):
    evil = rewrite(honest(tmp_path, Attention(causal=True)), tmp_path / "evil.pt2", edit_model(_long_values))
    result = evaluate.evaluate(evil, data_dir, "val", seed=1)
    failed = [p["detail"] for p in result["probes"].values() if not p["ok"]]
    assert failed and "scaled_dot_product_attention" in failed[0] and "do not fit" in failed[0], result["probes"]
    assert "val_bpb" not in result


@pytest.mark.parametrize("passes_it_through", ["aten.alias.default", "aten.contiguous.default", "aten.reshape.default",
                                               "aten.to.dtype", "aten.expand_as.default", "aten.dropout.default"])
def test_a_weight_written_through_any_listed_operator_that_returns_it_is_refused(tmp_path, data_dir,
                                                                                 passes_it_through):
    """State kept between calls: a weight passed through an operator that may return it (or a
    view of it), then written in place. Refused where torch's schema says the result aliases
    the weight, else after the first call that changed it (dropout returns its input itself)."""
    source = honest(tmp_path)
    weight = _weight_name(source)
    arguments = {"aten.alias.default": {}, "aten.contiguous.default": {}, "aten.reshape.default": {"shape": {"as_ints": [-1]}},
                 "aten.to.dtype": {"dtype": {"as_scalar_type": 7}}, "aten.dropout.default": {"p": {"as_float": 0.0},
                                                                                            "train": {"as_bool": False}},
                 "aten.expand_as.default": {"other": {"as_tensor": {"name": weight}}}}[passes_it_through]
    first = "input" if passes_it_through == "aten.dropout.default" else "self"
    evil = rewrite(source, tmp_path / "evil.pt2", _prepend(
        _node(f"torch.ops.{passes_it_through}", {first: {"as_tensor": {"name": weight}}, **arguments}, "same"),
        _node("torch.ops.aten.add_.Tensor", {"self": {"as_tensor": {"name": "same"}}, "other": {"as_float": 1.0}},
              "bumped")))
    result = evaluate.evaluate(evil, data_dir, "val", seed=1)
    failed = [p["detail"] for p in result["probes"].values() if not p["ok"]]
    assert failed and ("which the graph is given" in failed[0] or "keeps state between calls" in failed[0]), result["probes"]
    assert "val_bpb" not in result
