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


def test_a_short_run_reports_a_finite_metric_and_a_summary(tmp_path, data_dir):
    proc = run_train(REPO, data_dir, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert math.isfinite(result["val_bpb"]) and 0 < result["val_bpb"] < 8
    assert result["split"] == "val" and result["status"] == "ok" and result["device"] == "cpu"
    assert result["steps"] > 0 and result["tokens"] > 0 and result["params"] > 0
    assert 3 <= result["train_seconds"] < result["total_seconds"] and result["mfu"] is None
    assert result["knobs"]["LR"] > 0 and math.isfinite(result["grad_norm"])
    assert re.search(r"^step 0 \| loss [\d.]+ \| lr \S+ \|.* elapsed [\d.]+s$", proc.stdout, re.M)
    summary = proc.stdout.split("\n---\n")[-1]
    values = dict(line.split(":", 1) for line in summary.strip().splitlines())
    assert float(values["val_bpb"]) == pytest.approx(result["val_bpb"], rel=1e-5)
    for key in ("steps", "tokens_per_s", "train_seconds", "total_seconds", "peak_memory_mb",
                "params", "grad_norm", "update_ratio", "train_loss", "device", "mfu"):
        assert key in values, f"summary lacks {key}"


def test_the_test_split_keeps_the_metric_name(tmp_path, data_dir):
    snapshot = patched_snapshot(tmp_path, N_LAYER="1", N_EMBD="64")   # smaller: this test checks names
    proc = run_train(snapshot, data_dir, tmp_path / "out", split="test")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["split"] == "test" and math.isfinite(result["val_bpb"])
    assert result["knobs"]["N_LAYER"] == 1


def test_a_diverging_run_fails_fast_with_exit_3_and_no_metric(tmp_path, data_dir):
    snapshot = patched_snapshot(tmp_path, LR="1e6", WARMUP_FRAC="0.0", GRAD_CLIP="1e9")
    proc = run_train(snapshot, data_dir, tmp_path / "out")
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"^FAIL: loss exploded at step \d+", proc.stdout, re.M)
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert "val_bpb" not in result and result["status"] == "diverged"
