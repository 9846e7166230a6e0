"""train/graph.py: the evaluator's own interpreter of an exported graph. It must compute what
torch's loader computes, bit for bit, on every kind of model the evaluator scores, and refuse
what a model must not do (write to its weights or its input: state kept between calls)."""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "train"))
import evaluate  # noqa: E402
import graph  # noqa: E402
import prepare  # noqa: E402
import schema  # noqa: E402
from tests.train.test_artifact import Cond, edit_model, honest, rewrite  # noqa: E402
from tests.train.test_evaluate import T, Attention, Causal  # noqa: E402
from tests.train.test_prepare import make_corpus  # noqa: E402


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("graph")
    return prepare.prepare(make_corpus(root / "corpus"), root / "data")


class InPlace(Causal):
    """In-place arithmetic on values the graph made itself (train.py's norm does this)."""

    def forward(self, idx):
        h = self.emb(idx)
        scale = h.norm(dim=-1, keepdim=True)
        scale.square_().div_(16).add_(1e-6)
        return self.head(self.mix(h / scale.sqrt()))


class Precision(Causal):
    """Autocast to bf16 inside the graph (save_model's precision), and grad mode switched."""

    def forward(self, idx):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return super().forward(idx).float()


class Dropout(Causal):
    def __init__(self) -> None:
        super().__init__()
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, idx):
        return self.head(self.drop(self.mix(self.emb(idx))))


MODELS = {"causal": Causal, "fixed batch": lambda: Causal(batch=2), "cond": Cond, "in place": InPlace,
          "attention": lambda: Attention(causal=True), "autocast": Precision, "dropout at eval": Dropout}


@pytest.mark.parametrize("name", MODELS)
def test_the_interpreter_computes_what_torch_s_loader_computes(tmp_path, name):
    path = honest(tmp_path, MODELS[name]())
    ours = evaluate.load_model(path)
    theirs = torch.export.load(str(path)).module()
    x = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(ours(x), theirs(x))


def test_the_enums_match_torch_s_serializer():
    from torch._export.serde import serialize
    assert {int(k): v for k, v in serialize._SERIALIZE_TO_TORCH_DTYPE.items()} == schema.SCALAR_DTYPES
    assert {int(k): v for k, v in serialize._SERIALIZE_TO_TORCH_MEMORY_FORMAT.items() if k} == graph.MEMORY_FORMATS
    assert graph.SCHEMA_MAJOR == serialize.SCHEMA_VERSION[0]


def _prepend(*nodes):
    """An edit that puts `nodes` first in the graph (after the inputs are bound)."""
    def change(model):
        model["graph_module"]["graph"]["nodes"][:0] = list(nodes)
    return edit_model(change)


def _node(target: str, inputs: dict, output: str) -> dict:
    return {"target": target, "name": output, "metadata": {}, "outputs": [{"as_tensor": {"name": output}}],
            "inputs": [{"name": k, "arg": v, "kind": 1} for k, v in inputs.items()]}


def _weight_name(path: Path) -> str:
    with zipfile.ZipFile(path) as archive:
        model = json.loads(archive.read(next(n for n in archive.namelist() if n.endswith("models/model.json"))))
    return next(spec["parameter"]["arg"]["name"] for spec in model["graph_module"]["signature"]["input_specs"]
                if "parameter" in spec)


WRITES = {   # a graph that changes what it is given, directly or through a view
    "weight": lambda w: [_node("torch.ops.aten.add_.Tensor", {"self": {"as_tensor": {"name": w}},
                                                              "other": {"as_float": 1.0}}, "bumped")],
    "view of a weight": lambda w: [
        _node("torch.ops.aten.view.default", {"self": {"as_tensor": {"name": w}}, "size": {"as_ints": [-1]}}, "flat"),
        _node("torch.ops.aten.div_.Tensor", {"self": {"as_tensor": {"name": "flat"}}, "other": {"as_float": 2.0}},
              "halved")],
    "input": lambda w: [_node("torch.ops.aten.square_.default", {"self": {"as_tensor": {"name": "idx"}}}, "squared")],
}


@pytest.mark.parametrize("what", WRITES)
def test_a_graph_that_writes_to_what_it_is_given_is_refused(tmp_path, what):
    source = honest(tmp_path)
    evil = rewrite(source, tmp_path / "evil.pt2", _prepend(*WRITES[what](_weight_name(source))))
    with pytest.raises(schema.Rejected, match="which the graph is given"):
        evaluate.load_model(evil)


@pytest.mark.parametrize("target", ["torch.ops.aten.no_such_op.default", "torch.ops.aten.__class__.default",
                                    "torch.ops.aten.add.__init__", "torch.ops.aten.add.overloads"])
def test_an_operator_not_in_torch_s_registry_is_refused_by_name(tmp_path, target):
    """No attribute of the namespace or of the operator's packet passes for an operator: none
    is on the list; and with the schema skipped, the interpreter looks overloads up in torch's
    registry, never by a getattr chain."""
    evil = rewrite(honest(tmp_path), tmp_path / "evil.pt2", _prepend(_node(
        target, {"self": {"as_tensor": {"name": "idx"}}}, "nothing")))
    with pytest.raises(schema.Rejected, match="not on the evaluator's list"):
        evaluate.load_model(evil)
    with pytest.raises(schema.Rejected, match="not on the evaluator's list|no such operator"):
        graph._overload(target.split("."), "graph.nodes[0]")


def test_a_node_that_reads_a_value_no_earlier_node_made_is_refused_by_name(tmp_path):
    evil = rewrite(honest(tmp_path), tmp_path / "evil.pt2", _prepend(_node(
        "torch.ops.aten.relu.default", {"self": {"as_tensor": {"name": "made_later"}}}, "early")))
    with pytest.raises(schema.Rejected, match="reads made_later, which no earlier node makes"):
        evaluate.load_model(evil)


def test_a_write_through_an_alias_torch_does_not_annotate_is_caught_after_the_call(tmp_path, data_dir):
    """dropout(w, 0, train=False) returns w itself, with no alias annotation in its schema, so
    the static check takes the result for a fresh value; the weights are compared after every
    call, and the first call that changed one ends the evaluation."""
    source = honest(tmp_path)
    weight = _weight_name(source)
    evil = rewrite(source, tmp_path / "evil.pt2", _prepend(
        _node("torch.ops.aten.dropout.default", {"input": {"as_tensor": {"name": weight}}, "p": {"as_float": 0.0},
                                                  "train": {"as_bool": False}}, "same"),
        _node("torch.ops.aten.add_.Tensor", {"self": {"as_tensor": {"name": "same"}}, "other": {"as_float": 1.0}},
              "bumped")))
    result = evaluate.evaluate(evil, data_dir, "val", seed=1)
    failed = [p["detail"] for p in result["probes"].values() if not p["ok"]]
    assert failed and "keeps state between calls" in failed[0] and weight in failed[0], result["probes"]
    assert "val_bpb" not in result


def test_every_call_gets_windows_in_storage_of_their_own(data_dir):
    """A scored batch and a probe's look the same to the model: (step, T), contiguous, at
    offset 0 of storage that holds nothing else (a view would show where it came from and let
    the model read each window's target byte)."""
    seen = []

    def recorder(x):
        seen.append((tuple(x.shape), x.stride(), x.storage_offset(), x.untyped_storage().nbytes()))
        return torch.zeros(*x.shape, 256)

    scorer = evaluate.Scorer(recorder, evaluate.Loaded(batch=None, context_len=T, max_batch=None, device="cpu"))
    val = evaluate.windows(prepare.load_split(data_dir, "val"), T, evaluate.EVAL_BYTES, torch.Generator().manual_seed(0))
    scorer.bits_per_byte(val[:70])
    evaluate.causality(scorer, val, seed=3)
    step = evaluate.SCORING_BATCH["cpu"]
    assert len(seen) > 3 and set(seen) == {((step, T), (T, 1), 0, step * T * 8)}


class Uninitialized(Causal):
    def forward(self, idx):
        return super().forward(idx) + torch.empty(idx.shape[0], T, 256)


def test_uninitialized_memory_is_never_made(tmp_path, data_dir):
    """aten.empty would hand the graph an earlier call's bytes: it is not on the list (and were
    it called, uninitialized memory reads as NaN while the evaluator runs)."""
    result = evaluate.evaluate(honest(tmp_path, Uninitialized()), data_dir, "val", seed=1)
    assert result["probes"]["artifact"]["ok"] is False
    assert "operator aten.empty.memory_format is not on the evaluator's list" in result["probes"]["artifact"]["detail"]


def _retarget(old: str, new_target: str):
    def change(model):
        for node in model["graph_module"]["graph"]["nodes"]:
            if node["target"] == old:
                node["target"] = new_target
    return edit_model(change)


def test_a_higher_order_operator_with_a_body_out_of_place_is_refused(tmp_path):
    """A body appended after the operands would be called as an operand, its inputs unmatched."""
    def change(model):
        for node in model["graph_module"]["graph"]["nodes"]:
            if node["target"].endswith("higher_order.cond"):
                body = next(item["arg"] for item in node["inputs"] if "as_graph" in item["arg"])
                node["inputs"].append({"name": "", "arg": body, "kind": 1})
    evil = rewrite(honest(tmp_path, Cond()), tmp_path / "evil.pt2", edit_model(change))
    with pytest.raises(schema.Rejected, match="takes its bodies at"):
        evaluate.load_model(evil)


@pytest.mark.parametrize("edit, words", [
    (lambda m: m["graph_module"]["graph"]["nodes"].insert(0, _node(
        "torch.ops.aten._sparse_coo_tensor_unsafe.default", {"indices": {"as_tensor": {"name": "idx"}},
                                                            "values": {"as_tensor": {"name": "idx"}}}, "sparse")),
     "operator aten._sparse_coo_tensor_unsafe.default is not on the evaluator's list"),
    (lambda m: m["graph_module"]["graph"]["nodes"].insert(0, _node(
        "torch.ops.aten.set_.source_Tensor", {"self": {"as_tensor": {"name": "idx"}},
                                             "source": {"as_tensor": {"name": "idx"}}}, "moved")),
     "operator aten.set_.source_Tensor is not on the evaluator's list"),
], ids=["unchecked sparse", "set_"])
def test_operators_that_trust_their_arguments_are_refused(tmp_path, edit, words):
    evil = rewrite(honest(tmp_path), tmp_path / "evil.pt2", edit_model(edit))
    with pytest.raises(schema.Rejected, match=words):
        evaluate.load_model(evil)


def _weights_config(change):
    def edit(entries):
        name = next(n for n in entries if n.endswith("model_weights_config.json"))
        config = json.loads(entries[name])
        change(next(iter(config["config"].values()))["tensor_meta"])
        entries[name] = json.dumps(config).encode()
    return edit


@pytest.mark.parametrize("change, words", [
    (lambda meta: meta.update(sizes=[{"as_int": 1 << 62}], strides=[{"as_int": 0}]), "repeat its stored bytes"),
    (lambda meta: meta.update(device={"type": "meta", "index": None}), "meta device"),
], ids=["stride 0", "meta"])
def test_a_stored_tensor_that_is_not_its_bytes_is_refused(tmp_path, change, words):
    evil = rewrite(honest(tmp_path), tmp_path / "evil.pt2", _weights_config(change))
    with pytest.raises(schema.Rejected, match=words):
        evaluate.load_model(evil)
