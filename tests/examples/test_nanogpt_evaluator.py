"""examples/nanogpt/evaluate.py, the example's evaluator, against a stand-in of nanoGPT's
model.py (its GPTConfig / GPT interface, real torch): it scores the checkpoint on the fixed
windows, as nanoGPT's own loss would on them, and refuses a checkpoint that is not data."""
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

PROJECT = Path(__file__).resolve().parents[2]

MODEL = '''
from dataclasses import dataclass
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 65
    n_embd: int = 8


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size)

    def forward(self, idx, targets=None):
        logits = self.lm_head(torch.cumsum(self.wte(idx), dim=1))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss
'''


@pytest.fixture
def checkout(tmp_path):
    repo = tmp_path / "nanoGPT"
    (repo / "data" / "shakespeare_char").mkdir(parents=True)
    (repo / "model.py").write_text(MODEL)
    shutil.copy(PROJECT / "examples" / "nanogpt" / "evaluate.py", repo / "evaluate.py")
    rng = np.random.default_rng(0)
    rng.integers(0, 65, 5000, dtype=np.uint16).tofile(repo / "data" / "shakespeare_char" / "val.bin")
    sys.path.insert(0, str(repo))
    try:
        import model   # the stand-in, as evaluate.py imports it
        torch.manual_seed(0)
        gpt = model.GPT(model.GPTConfig())
    finally:
        sys.path.remove(str(repo))
        sys.modules.pop("model", None)
    out = tmp_path / "out"
    out.mkdir()
    state = {f"_orig_mod.{k}": v for k, v in gpt.state_dict().items()}   # as torch.compile names them
    torch.save({"model": state, "model_args": {"block_size": 16, "vocab_size": 65, "n_embd": 8},
                "iter_num": 500, "best_val_loss": torch.tensor(4.1), "config": {"batch_size": 12}},
               out / "ckpt.pt")
    return repo, out, gpt


def evaluate(repo: Path, out: Path, env_out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NIGHTSHIFT_OUT": str(env_out)}
    return subprocess.run([sys.executable, "evaluate.py", str(out), "--tokens", "1700"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)


def test_it_scores_the_checkpoint_on_fixed_windows_of_val(checkout, tmp_path):
    repo, out, gpt = checkout
    (tmp_path / "eval").mkdir()
    done = evaluate(repo, out, tmp_path / "eval")
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "eval" / "result.json").read_text())
    val = np.fromfile(repo / "data" / "shakespeare_char" / "val.bin", dtype=np.uint16).astype(np.int64)
    n = 1700 // 17
    starts = np.arange(n) * (len(val) - 17) // (n - 1)
    batch = torch.from_numpy(np.stack([val[s:s + 17] for s in starts]))
    with torch.no_grad():
        _, loss = gpt(batch[:, :-1].contiguous(), batch[:, 1:].contiguous())
    assert result == {"val_loss": pytest.approx(float(loss), rel=1e-5), "iter_num": 500}
    assert f"val_loss: {result['val_loss']:.6f}" in done.stdout.split("---")[-1]
    assert result["val_loss"] > math.log(65) * 0.5      # an untrained model on 65 symbols: no free lunch


def test_a_checkpoint_that_is_not_data_is_refused(checkout, tmp_path):
    repo, out, _ = checkout

    import argparse   # any object pickled by reference: loading it would import and run code

    torch.save({"model": {}, "model_args": {}, "payload": argparse.Namespace(lr=1)}, out / "ckpt.pt")
    done = evaluate(repo, out, tmp_path)
    assert done.returncode != 0 and "Weights only load failed" in done.stderr
