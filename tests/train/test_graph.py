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
import schema  # noqa: E402
from tests.train.test_artifact import Cond, edit_model, honest, rewrite  # noqa: E402
from tests.train.test_evaluate import T, Attention, Causal  # noqa: E402


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
    assert {int(k): v for k, v in serialize._SERIALIZE_TO_TORCH_DTYPE.items()} == graph.DTYPES
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
        _node("torch.ops.aten.mul_.Scalar", {"self": {"as_tensor": {"name": "flat"}}, "other": {"as_float": 2.0}},
              "doubled")],
    "input": lambda w: [_node("torch.ops.aten.fill_.Scalar", {"self": {"as_tensor": {"name": "idx"}},
                                                             "value": {"as_int": 0}}, "zeroed")],
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
    """Only an overload torch's registry lists is called: no attribute of the namespace or of
    the operator's packet passes for one (the schema's grammar lets these names through)."""
    evil = rewrite(honest(tmp_path), tmp_path / "evil.pt2", _prepend(_node(
        target, {"self": {"as_tensor": {"name": "idx"}}}, "nothing")))
    with pytest.raises(schema.Rejected, match="no such operator"):
        evaluate.load_model(evil)


def test_a_node_that_reads_a_value_no_earlier_node_made_is_refused_by_name(tmp_path):
    evil = rewrite(honest(tmp_path), tmp_path / "evil.pt2", _prepend(_node(
        "torch.ops.aten.relu.default", {"self": {"as_tensor": {"name": "made_later"}}}, "early")))
    with pytest.raises(schema.Rejected, match="reads made_later, which no earlier node makes"):
        evaluate.load_model(evil)
