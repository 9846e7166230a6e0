"""train/artifact.py and train/guard.py: a model artifact is hostile input. Each attack is tried
twice: against the evaluator as it runs (the schema refuses it, naming the entry and field),
and with the schema skipped, loading the raw archive under the guard alone (the second line
must fail closed too). A torch upgrade that opens a new route into code fails one of these.
The payloads write a marker file; none may ever appear."""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "train"))
import schema  # noqa: E402
import evaluate  # noqa: E402
import graph as graph_module  # noqa: E402
import guard  # noqa: E402
import prepare  # noqa: E402
from tests.train.test_evaluate import T, Causal  # noqa: E402
from tests.train.test_prepare import make_corpus  # noqa: E402


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("artifact")
    return prepare.prepare(make_corpus(root / "corpus"), root / "data")


class Cond(torch.nn.Module):
    """A model with a higher-order operator: torch.cond over two subgraphs."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.head = torch.nn.Embedding(256, 16), torch.nn.Linear(16, 256)

    def forward(self, idx):   # the predicate reads a weight, not the input: still causal
        h = self.emb(idx)
        return self.head(torch.cond(self.head.bias.sum() > 0, lambda x: x * 2, lambda x: x - 1, (h,)))


def honest(tmp_path: Path, model: torch.nn.Module | None = None) -> Path:
    return evaluate.save_model(model or Causal(), T, tmp_path / "honest")


def rewrite(source: Path, dest: Path, edit) -> Path:
    """A copy of the archive at `source` whose entries `edit(entries)` changed (name -> bytes)."""
    with zipfile.ZipFile(source) as archive:
        entries = {info.filename: archive.read(info.filename) for info in archive.infolist()}
    edit(entries)
    with zipfile.ZipFile(dest, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return dest


def edit_model(change):
    """An `edit` that applies `change(model_json)` to models/model.json."""
    def edit(entries):
        name = next(n for n in entries if n.endswith("models/model.json"))
        model = json.loads(entries[name])
        change(model)
        entries[name] = json.dumps(model).encode()
    return edit


def code(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('code ran')"


def graph(model) -> dict:
    return model["graph_module"]["graph"]


def symbolic_size_with_code(marker):
    """torch passes a symbolic size to sympy.sympify, which calls eval: one size becomes
    `exec(...) or <the honest symbol>` (the route of the issue, public since July 2026)."""
    def change(model):
        size = graph(model)["tensor_values"]["idx"]["sizes"][0]   # the batch: a symbol
        size["as_expr"]["expr_str"] = f"exec({code(marker)!r}) or {size['as_expr']['expr_str']}"
    return change


def forward_name_with_code(marker):
    """The forward argument's name is written into Python that torch generates and compiles
    (the forward's signature, the guards' messages "Guard failed: <name>.size()[0] ...")."""
    def change(model):
        signature = model["graph_module"]["module_call_graph"][0]["signature"]
        signature["forward_arg_names"] = [f'idx" + str(exec("{code(marker)}")) + "']
    return change


def target_os_system(marker):
    """An operator name is resolved by a getattr chain from `torch`: torch.os.system is one."""
    def change(model):
        nodes = graph(model)["nodes"]
        nodes.insert(0, {"target": "torch.os.system", "name": "evil", "metadata": {},
                         "inputs": [{"name": "command", "arg": {"as_string": f"touch {marker}"}, "kind": 1}],
                         "outputs": [{"as_int": 0}]})
    return change


def cond_branch_is_an_operator(_marker):
    """A cond whose branches are passed as operators, not subgraphs: aten.rand_like."""
    def change(model):
        for node in graph(model)["nodes"]:
            if node["target"].endswith("higher_order.cond"):
                for item in node["inputs"]:
                    if "as_graph" in item["arg"]:
                        item["arg"] = {"as_operator": "torch.ops.aten.rand_like.default"}
    return change


ATTACKS = {   # name: (the model it starts from, the change, what the schema's refusal names)
    "symbolic size": (Causal, symbolic_size_with_code, "expr_str"),
    "forward argument name": (Causal, forward_name_with_code, "forward_arg_names"),
    "operator name": (Causal, target_os_system, "torch.os.system"),
    "cond branch": (Cond, cond_branch_is_an_operator, "as_operator"),
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_evaluator_refuses_each_attack_by_the_schema_before_the_model_is_bound(tmp_path, data_dir, attack):
    make, change, named = ATTACKS[attack]
    marker = tmp_path / "marker"
    evil = rewrite(honest(tmp_path, make()), tmp_path / "evil.pt2", edit_model(change(marker)))
    result = evaluate.evaluate(evil, data_dir, "val", seed=1)
    assert result["probes"]["artifact"]["ok"] is False, result["probes"]
    assert "models/model.json" in result["probes"]["artifact"]["detail"]
    assert named in result["probes"]["artifact"]["detail"]
    assert "val_bpb" not in result and not marker.exists()


@pytest.mark.parametrize("attack", ["symbolic size", "forward argument name"])
def test_with_the_schema_skipped_the_interpreter_runs_no_string(tmp_path, attack):
    """The second line: the raw JSON, no schema, bound and run armed. The interpreter never
    reads a size expression or a forward argument name, so the code never runs, and the model
    computes what the honest one does."""
    make, change, _ = ATTACKS[attack]
    marker = tmp_path / "marker"
    source = honest(tmp_path, make())
    evil = rewrite(source, tmp_path / "evil.pt2", edit_model(change(marker)))
    reference = evaluate.load_model(source)
    with zipfile.ZipFile(evil) as archive:
        raw = json.loads(archive.read(next(n for n in archive.namelist() if n.endswith("models/model.json"))))
    x = torch.randint(0, 256, (3, T))
    with guard.Guard(readable=[tmp_path]), torch.no_grad():
        model = graph_module.Model(raw, dict(zip(*_weights(reference))))
        assert torch.equal(model(x), reference(x))
    assert not marker.exists()


def test_torch_s_own_loader_runs_the_symbolic_size_s_code(tmp_path):
    """Why torch's loader never reads a candidate's file: on this torch it runs the code of a
    symbolic size (sympy.sympify calls eval). If an upgrade closes this route, this fails: the
    attacks above would then prove less, and should be replaced by one that still runs."""
    marker = tmp_path / "marker"
    evil = rewrite(honest(tmp_path), tmp_path / "evil.pt2", edit_model(symbolic_size_with_code(marker)))
    try:
        torch.export.load(str(evil))
    except Exception:
        pass
    assert marker.exists()


def _weights(model: graph_module.Model) -> tuple[list[str], list[torch.Tensor]]:
    """The stored tensors of a bound model, by their names in the state dict."""
    return list(model.tensors), list(model.tensors.values())


class RandomBranch(Cond):
    """torch.cond whose branch draws random numbers: a subgraph, so the audit must read it."""

    def forward(self, idx):
        h = self.emb(idx)
        return self.head(torch.cond(self.head.bias.sum() > 0, lambda x: x + torch.rand_like(x),
                                    lambda x: x - 1, (h,)))


def test_randomness_inside_a_higher_order_operator_is_refused(tmp_path, data_dir):
    result = evaluate.evaluate(honest(tmp_path, RandomBranch()), data_dir, "val", seed=1)
    assert result["probes"]["artifact"]["ok"] is False
    assert "rand_like" in result["probes"]["artifact"]["detail"], result["probes"]["artifact"]


def test_with_the_schema_skipped_the_interpreter_refuses_a_callable_argument(tmp_path):
    source = honest(tmp_path, Cond())
    evil = rewrite(source, tmp_path / "evil.pt2", edit_model(cond_branch_is_an_operator(None)))
    with zipfile.ZipFile(evil) as archive:
        raw = json.loads(archive.read(next(n for n in archive.namelist() if n.endswith("models/model.json"))))
    tensors = evaluate.load_model(source).tensors
    with guard.Guard(readable=[tmp_path]), pytest.raises(schema.Rejected, match="as_operator"):
        graph_module.Model(raw, tensors)


def test_the_guard_refuses_a_process_and_a_write_while_armed(tmp_path):
    """Whatever the route, what the code would do is refused: a process, a file written."""
    import subprocess
    with pytest.raises(schema.Rejected, match="subprocess.Popen"):
        with guard.Guard(readable=[tmp_path]):
            with pytest.raises(guard.Refused):
                subprocess.run(["true"])
    with pytest.raises(schema.Rejected, match="for writing"):
        with guard.Guard(readable=[tmp_path]):
            with pytest.raises(guard.Refused):
                open(tmp_path / "written", "w")
    assert not (tmp_path / "written").exists()
    assert subprocess.run(["true"]).returncode == 0   # disarmed again: the hook is inert outside


def test_a_cond_model_is_honest_arithmetic_and_is_scored(tmp_path, data_dir):
    """Higher-order operators are allowed where their bodies are subgraphs the audit reads."""
    result = evaluate.evaluate(honest(tmp_path, Cond()), data_dir, "val", seed=1)
    assert all(p["ok"] for p in result["probes"].values()), result["probes"]


@pytest.mark.parametrize("edit, words", [
    (lambda e: e.__setitem__("tmp-model/extra/run.sh", b"rm -rf /"), "entry 'tmp-model/extra/run.sh'"),
    (lambda e: e.__setitem__("other/models/model.json", b"{}"), "root folders"),
    (edit_model(lambda m: m.__setitem__("surprise", 1)), "unknown field 'surprise'"),
    (edit_model(lambda m: m.__setitem__("guards_code", ["import os"])), "guards_code: must be empty"),
    (edit_model(lambda m: graph(m)["nodes"][0].__setitem__("name", "a b")), "not an identifier"),
    (edit_model(lambda m: m["graph_module"].__setitem__("treespec_namedtuple_fields", {"x": {"field_names": ["a"]}})),
     "treespec_namedtuple_fields: must be empty"),
    (lambda e: e.__setitem__(next(n for n in e if n.endswith("weight_0")), b"\0" * 8), "fewer than its shape"),
    (lambda e: e.__setitem__(next(n for n in e if n.endswith("models/model.json")),
                             b'{"graph_module": {}, "graph_module": {}}'), "a key appears twice"),
], ids=["extra entry", "second root", "unknown field", "guards code", "node name", "namedtuple",
        "short weights", "duplicate key"])
def test_anything_outside_the_schema_is_refused_with_where(tmp_path, data_dir, edit, words):
    evil = rewrite(honest(tmp_path), tmp_path / "evil.pt2", edit)
    result = evaluate.evaluate(evil, data_dir, "val", seed=1)
    assert result["probes"]["artifact"]["ok"] is False
    assert words in result["probes"]["artifact"]["detail"], result["probes"]["artifact"]["detail"]


@pytest.mark.parametrize("text, ok", [
    ("Symbol('s95', positive=True, integer=True)", True),
    ("Mul(Integer(2), Symbol('s0', integer=True))", True),
    ("2*s0 + 1", True),
    ("exec('x') or s0", False),
    ("Symbol('s0').__class__", False),
    ("Symbol('__import__')", False),
    ("Integer(64) if True else 1", False),
    ("[s0 for s0 in ()]", False),
])
def test_a_size_expression_is_integer_arithmetic_over_symbols(text, ok):
    assert schema.sym_expression(text) is ok
