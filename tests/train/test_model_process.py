"""train/model_process.py: the model's graph runs in a process apart from the one that holds the
targets and computes the score. Whatever happens there (a kernel's SIGSEGV, a kill, a graph
that never ends, a refusal) ends as a failed probe, never as a number, and the scorer lives on."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "train"))
import evaluate  # noqa: E402
import graph  # noqa: E402
import model_process  # noqa: E402
import prepare  # noqa: E402
from tests.train.test_artifact import edit_model, honest, rewrite  # noqa: E402
from tests.train.test_evaluate import T, Attention, Causal  # noqa: E402
from tests.train.test_graph import _node  # noqa: E402
from tests.train.test_prepare import make_corpus  # noqa: E402


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("model_process")
    return prepare.prepare(make_corpus(root / "corpus"), root / "data")


def test_the_model_process_computes_what_the_model_computes_here(tmp_path):
    path = honest(tmp_path, Attention(causal=True))
    x = torch.randint(0, 256, (5, T), generator=torch.Generator().manual_seed(0))
    with model_process.ModelProcess.fork() as process:
        loaded = process.load(path)
        assert (loaded.batch, loaded.context_len, loaded.device) == (None, T, "cpu") and process.pid != os.getpid()
        apart = process(x)
    with torch.no_grad():
        assert torch.equal(apart, evaluate.load_model(path)(x).float())


class Heads(Causal):
    """Causal attention over heads (B, 1, T, D): the shape for which torch's CPU kernel runs."""

    def mix(self, x):
        h = x[:, None]
        return torch.nn.functional.scaled_dot_product_attention(h, h, h, is_causal=True)[:, 0]


def _crashing_attention(model: dict) -> None:
    """Two edits of an exported attention: its value becomes one row expanded to 4M rows (a
    view: no memory), and it attends to every key (causal attention would stop at the query)."""
    nodes = model["graph_module"]["graph"]["nodes"]
    at = next(i for i, n in enumerate(nodes) if n["target"].endswith("scaled_dot_product_attention.default"))
    items = {item["name"]: item for item in nodes[at]["inputs"]}
    nodes[at:at] = [_node("torch.ops.aten.slice.Tensor", {"self": items["value"]["arg"], "dim": {"as_int": 2},
                                                         "start": {"as_int": 0}, "end": {"as_int": 1}}, "one_row"),
                    _node("torch.ops.aten.expand.default", {"self": {"as_tensor": {"name": "one_row"}},
                                                           "size": {"as_ints": [-1, -1, 1 << 22, -1]}}, "long_value")]
    items["value"]["arg"] = {"as_tensor": {"name": "long_value"}}
    items["is_causal"]["arg"] = {"as_bool": False}


def test_a_kernel_that_crashes_ends_the_model_process_and_the_run_is_a_failed_probe(tmp_path, data_dir, monkeypatch):
    """The attack: attention whose values outnumber its keys, so torch's kernel reads the key
    far past its storage. With the interpreter's shape check off, it kills the process that
    runs it (SIGSEGV); that process is not the scorer's: the probe fails, naming the signal,
    no number is recorded, and the scorer (this test) goes on."""
    evil = rewrite(honest(tmp_path, Heads()), tmp_path / "evil.pt2", edit_model(_crashing_attention))
    monkeypatch.setattr(graph, "CHECKED", {})   # the defence in the interpreter off: the process split alone
    result = evaluate.evaluate(evil, data_dir, "val", seed=1)
    failed = [(name, p["detail"]) for name, p in result["probes"].items() if not p["ok"]]
    assert failed and "killed by signal SIGSEGV" in failed[0][1], result["probes"]
    assert failed[0][0] in ("shape", "scoring") and "val_bpb" not in result
    monkeypatch.undo()   # and with it on, refused before the kernel runs
    result = evaluate.evaluate(evil, data_dir, "val", seed=1)
    assert any("do not fit" in p["detail"] for p in result["probes"].values() if not p["ok"]), result["probes"]


def test_a_model_process_killed_mid_scoring_is_a_failed_probe(tmp_path, data_dir, monkeypatch):
    """Killed by a signal after a few calls (as an out-of-memory kill would): the probe of that
    stage fails with the signal, the probes that passed stay passed, no number is recorded."""
    calls, real = [], model_process.ModelProcess.__call__

    def killed_on_the_fifth_call(self, windows):
        calls.append(len(windows))
        if len(calls) == 5:
            os.kill(self.pid, signal.SIGKILL)
        return real(self, windows)
    monkeypatch.setattr(model_process.ModelProcess, "__call__", killed_on_the_fifth_call)
    result = evaluate.evaluate(honest(tmp_path), data_dir, "val", seed=1)
    assert result["probes"]["shape"]["ok"] and not result["probes"]["scoring"]["ok"], result["probes"]
    assert "the model process ended: killed by signal SIGKILL" in result["probes"]["scoring"]["detail"]
    assert "val_bpb" not in result


class Forever(Causal):
    """A graph that never ends: a while_loop whose condition always holds."""

    def forward(self, idx):
        logits = super().forward(idx)
        (out,) = while_loop(lambda x: x.sum() > float("-inf"), lambda x: (x * 1.0,), (logits,))
        return out


def test_a_graph_that_never_ends_is_ended_at_the_deadline(tmp_path, data_dir):
    path = honest(tmp_path, Forever())
    process = model_process.ModelProcess.fork(deadline=time.monotonic() + 3.0)
    result = evaluate.evaluate(path, data_dir, "val", seed=1, model=process)
    assert result["probes"]["artifact"]["ok"] and not result["probes"]["shape"]["ok"], result["probes"]
    assert "did not answer before the evaluation's deadline" in result["probes"]["shape"]["detail"]
    assert process.ended is not None and "SIGKILL" in process.ended


def test_a_refusal_of_the_guard_in_the_model_process_is_the_guard_probe(tmp_path, data_dir, monkeypatch):
    """Whatever the route, what the read tries in the model process is refused by its guard,
    and reported to the scorer as the probe `guard`."""
    import artifact

    def reads_a_file(path):
        return open("/etc/hostname").read()
    monkeypatch.setattr(artifact, "read", reads_a_file)
    result = evaluate.evaluate(honest(tmp_path), data_dir, "val", seed=1)
    assert result["probes"]["guard"]["ok"] is False and "read /etc/hostname" in result["probes"]["guard"]["detail"]
    assert "val_bpb" not in result


def test_the_scorer_never_reads_the_artifact(tmp_path, data_dir, monkeypatch):
    """The artifact is read in the model process alone: here its reader may as well not exist."""
    import artifact

    path = honest(tmp_path)
    with model_process.ModelProcess.fork() as process:
        monkeypatch.setattr(artifact, "read", lambda path: pytest.fail("the scorer read the artifact"))
        result = evaluate.evaluate(path, data_dir, "val", seed=1, model=process)
    assert all(p["ok"] for p in result["probes"].values()), result["probes"]
