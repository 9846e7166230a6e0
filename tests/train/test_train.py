"""train/train.py as the harness runs it: a real subprocess under the run protocol."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.progress import ProgressReader

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "train"))
import prepare  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """A small real corpus: the first 120 stdlib files (~1.5 MB), prepared like the default."""
    root, rels = prepare.list_corpus(None)
    corpus = tmp_path_factory.mktemp("corpus")
    for rel in rels[:120]:
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, corpus / rel)
    return prepare.prepare(corpus, tmp_path_factory.mktemp("data"))


def run_train(snapshot: Path, data_dir: Path, out: Path, split: str = "val") -> subprocess.CompletedProcess:
    env = {**os.environ, "NIGHTSHIFT_SEED": "1", "NIGHTSHIFT_BUDGET_S": "3", "NIGHTSHIFT_OUT": str(out),
           "NIGHTSHIFT_DATA": str(data_dir), "NIGHTSHIFT_SPLIT": split}
    return subprocess.run([sys.executable, "train/train.py"], cwd=snapshot, env=env,
                          capture_output=True, text=True, timeout=120)


def patched_snapshot(tmp_path: Path, **knobs: str) -> Path:
    """A copy of train/ with some knob lines rewritten, as a researcher's edit would."""
    snapshot = tmp_path / "snapshot"
    shutil.copytree(REPO / "train", snapshot / "train", ignore=shutil.ignore_patterns("__pycache__"))
    source = (snapshot / "train" / "train.py").read_text()
    for name, value in knobs.items():
        source, n = re.subn(rf"^{name} = \S+", f"{name} = {value}", source, flags=re.M)
        assert n == 1, f"knob {name} not found in train.py"
    (snapshot / "train" / "train.py").write_text(source)
    return snapshot


def run_evaluate(snapshot: Path, data_dir: Path, train_out: Path, out: Path, split: str = "val"):
    env = {**os.environ, "NIGHTSHIFT_OUT": str(out), "NIGHTSHIFT_TRAIN_OUT": str(train_out),
           "NIGHTSHIFT_DATA": str(data_dir), "NIGHTSHIFT_SPLIT": split}
    return subprocess.run([sys.executable, "train/evaluate.py"], cwd=snapshot, env=env,
                          capture_output=True, text=True, timeout=120)


def training_only(data_dir: Path, tmp_path: Path) -> Path:
    """The data as the training step sees it: the training split and meta.json alone."""
    folder = tmp_path / "train-only"
    folder.mkdir()
    for name in ("train.bin", "meta.json"):
        shutil.copyfile(data_dir / name, folder / name)
    return folder


def test_a_short_run_trains_on_the_training_split_alone_and_saves_a_model_the_evaluator_scores(tmp_path, data_dir):
    proc = run_train(REPO, training_only(data_dir, tmp_path), tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert "val_bpb" not in result and (tmp_path / "out" / "model.pt2").is_file()   # it measures nothing
    assert result["status"] == "ok" and result["device"] == "cpu" and result["export_seconds"] > 0
    assert result["steps"] > 0 and result["tokens"] > 0 and result["params"] > 0
    assert 3 <= result["train_seconds"] < result["total_seconds"] and result["mfu"] is None
    assert result["knobs"]["LR"] > 0 and math.isfinite(result["grad_norm"])
    assert math.isfinite(result["update_ratio"]) and result["update_ratio"] >= 0   # 0 while warming up
    assert result["tokens_per_s"] == pytest.approx(result["tokens"] / result["train_seconds"])
    assert result["flops_per_s"] == pytest.approx(6 * result["params"] * result["tokens_per_s"])
    assert result["peak_memory_mb"] > 0 and result["seed"] == 1
    assert set(result["knobs"]) >= {"N_LAYER", "N_EMBD", "OPTIMIZER", "BATCH_SIZE", "CONTEXT_LEN"}
    assert re.search(r"^step 0 \| loss [\d.]+ \| lr \S+ \|.* elapsed [\d.]+s$", proc.stdout, re.M)
    # Progress lines on the clock, every 2% of the budget, as the harness reads them live: the
    # curve early stopping compares, with the shape of a step (batch x context).
    reader = ProgressReader()
    points = [p for p in map(reader.feed, proc.stdout.splitlines()) if p is not None]
    elapsed = [p.elapsed_s for p in points]
    # a line every 2% of the budget, or every step where a step takes longer (a 3-s budget)
    assert len(points) >= min(result["steps"], 45) and elapsed == sorted(elapsed) and elapsed[-1] >= 3.0
    assert all(p.values["batch"] == 64 and p.values["context"] == 64 and 0 < p.loss < 6 for p in points)
    assert points[-1].step == result["steps"] - 1
    summary = proc.stdout.split("\n---\n")[-1]
    values = dict(line.split(":", 1) for line in summary.strip().splitlines())
    for key in ("steps", "tokens_per_s", "train_seconds", "total_seconds", "peak_memory_mb",
                "params", "grad_norm", "update_ratio", "train_loss", "device", "mfu", "export_seconds"):
        assert key in values, f"summary lacks {key}"

    for split in ("val", "test"):   # the evaluator scores it, on the split it is told
        graded = run_evaluate(REPO, data_dir, tmp_path / "out", tmp_path / f"eval-{split}", split)
        assert graded.returncode == 0, graded.stderr[-2000:]
        scored = json.loads((tmp_path / f"eval-{split}" / "result.json").read_text())
        assert scored["split"] == split and 0 < scored["val_bpb"] < 8, scored
        assert all(probe["ok"] for probe in scored["probes"].values()), scored["probes"]
        assert f"val_bpb:" in graded.stdout.split("\n---\n")[-1]


def test_a_diverging_run_fails_fast_with_exit_3_and_no_metric(tmp_path, data_dir):
    snapshot = patched_snapshot(tmp_path, LR="1e6", WARMUP_FRAC="0.0", GRAD_CLIP="1e9")
    proc = run_train(snapshot, data_dir, tmp_path / "out")
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"^FAIL: loss exploded at step \d+", proc.stdout, re.M)
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert "val_bpb" not in result and result["status"] == "diverged"


def test_the_knob_block_parses_and_every_choice_combination_has_whole_heads():
    """The researcher edits knobs within their spaces: each N_EMBD choice must split into
    whole heads of each HEAD_DIM choice, or some proposals would not even build."""
    sys.path.insert(0, str(REPO))
    from agent.target.knobs import parse_knobs
    knobs = {k.name: k for k in parse_knobs((REPO / "train" / "train.py").read_text())}
    assert {"N_LAYER", "N_EMBD", "HEAD_DIM", "LR", "OPTIMIZER", "BATCH_SIZE", "CONTEXT_LEN"} <= set(knobs)
    for width in knobs["N_EMBD"].choices:
        for head_dim in knobs["HEAD_DIM"].choices:
            assert width % head_dim == 0, (width, head_dim)
    assert all(k.contains(k.value) for k in knobs.values()), "a default lies outside its own search space"


MODEL_PROBE = """
import json, sys, torch
source = open("train/train.py").read().split("# ---------------------------------------------------------------- training loop")[0]
namespace = {"__name__": "__main__", "__file__": "train/train.py"}
sys.path.insert(0, "train")
exec(compile(source, "train/train.py", "exec"), namespace)   # the real file, up to its loop
model, x = namespace["model"], torch.randint(256, (3, namespace["context_len"]))
with namespace["autocast"]():
    logits = model(x)
loss = torch.nn.functional.cross_entropy(logits.float().view(-1, 256), x.view(-1))
import evaluate   # what the harness does with it: export, then load, audit and probe it
from pathlib import Path
path = evaluate.save_model(model, namespace["context_len"], "exported", precision=namespace["autocast"])
process = evaluate.ModelProcess.fork()   # the model in a process apart, as the evaluator runs it
scorer = evaluate.Scorer(process, process.load(Path(path)))
windows = torch.randint(256, (64, namespace["context_len"] + 1))
probe = evaluate.causality(scorer, windows, seed=3)
print("PROBE", json.dumps({"shape": list(logits.shape), "context": namespace["context_len"], "loss": loss.item(),
                           "causal": probe["ok"], "exported_context": scorer.context_len}))
"""


@pytest.mark.parametrize("knobs", [{}, {"N_EMBD": "64", "HEAD_DIM": "16", "N_LAYER": "1"},
                                   {"N_EMBD": "192", "HEAD_DIM": "64", "CONTEXT_LEN": "32"},
                                   {"OPTIMIZER": '"adamw"'}, {"OPTIMIZER": '"muon"'}])
def test_the_model_maps_bytes_to_256_logits_per_position(tmp_path, data_dir, knobs):
    snapshot = patched_snapshot(tmp_path, **knobs)
    env = {**os.environ, "NIGHTSHIFT_DATA": str(data_dir), "NIGHTSHIFT_OUT": str(tmp_path / "out")}
    proc = subprocess.run([sys.executable, "-c", MODEL_PROBE], cwd=snapshot, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    probe = json.loads(proc.stdout.split("PROBE ", 1)[1])
    assert probe["shape"] == [3, probe["context"], 256]
    assert probe["causal"] and probe["exported_context"] == probe["context"]   # no knob trips a probe
    # a fresh model predicts nearly uniformly: its loss starts at ln(256) = 5.55, not far from it
    assert abs(probe["loss"] - math.log(256)) < 0.5, probe


FAKE_DEVICE = """
import torch
torch.cuda.is_available = lambda: {cuda}
torch.backends.mps.is_available = lambda: {mps}
"""


@pytest.mark.parametrize("cuda, mps, expected", [(True, False, "cuda"), (False, True, "mps"), (True, True, "cuda")])
def test_an_accelerator_is_chosen_and_gets_its_own_sizes(tmp_path, data_dir, cuda, mps, expected):
    """This machine has no accelerator: a sitecustomize fakes one. train.py must pick it (cuda
    before mps), scale its sizes for it and print them before it first touches the device,
    which then fails here since this torch cannot drive it."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "sitecustomize.py").write_text(FAKE_DEVICE.format(cuda=cuda, mps=mps))
    source = (REPO / "train" / "train.py").read_text()
    value = lambda name: int(re.search(rf"^{name} = (\d+)", source, re.M).group(1))
    scale = re.search(r"^scale = (\{.*\})\[device\]", source, re.M).group(1)
    depth, width, context, batch = eval(scale)[expected]
    env = {**os.environ, "PYTHONPATH": str(fake), "NIGHTSHIFT_SEED": "1", "NIGHTSHIFT_BUDGET_S": "3",
           "NIGHTSHIFT_OUT": str(tmp_path / "out"), "NIGHTSHIFT_DATA": str(data_dir)}
    proc = subprocess.run([sys.executable, "train/train.py"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    header = re.search(r"^device: (\w+) \| bf16 matmuls: (\w+) \| layers (\d+) \| width (\d+) \| heads (\d+) \| "
                       r"context (\d+) \| batch (\d+)", proc.stdout, re.M)
    assert header, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert header.group(1) == expected and header.group(2) == "True"
    assert int(header.group(3)) == depth * value("N_LAYER") and int(header.group(4)) == width * value("N_EMBD")
    assert int(header.group(6)) == context * value("CONTEXT_LEN") and int(header.group(7)) == batch * value("BATCH_SIZE")
    assert int(header.group(4)) % int(header.group(5)) == 0
    if expected == "cuda":   # the CUDA sizes are Tensor-Core friendly: multiples of 64
        assert all(int(header.group(i)) % 64 == 0 for i in (4, 6, 7))
    assert proc.returncode != 0 and not (tmp_path / "out" / "result.json").exists()
