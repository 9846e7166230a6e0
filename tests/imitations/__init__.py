"""Small imitations of real training repositories, for end-to-end tests of examples/.

Each folder has the shape of a real project (its files, flags, outputs and habits) but is
pure Python with no downloads and no real training: a run takes well under a second, and
its metric is a fixed function of the knobs plus seed noise. `files(name)` returns a
folder's files for `tests.loop_helpers.make_repo`.

- `nanogpt/`: karpathy/nanoGPT — train.py with module-level defaults, configurator.py
  (config files and --key=value), config/train_shakespeare_char.py, data read from
  data/shakespeare_char/train.bin (git-ignored), `step N: train loss A, val loss B` in
  stdout, a checkpoint in out_dir, torch.manual_seed(1337 + seed_offset) (a stand-in
  torch.py provides manual_seed only);
- `hf_trainer/`: a Hugging Face Trainer script — argument dataclasses with
  field(default=...), --seed and --output_dir flags, all_results.json and
  checkpoint-N/ in the output dir;
- `yaml_config/`: a Lightning-style script — configs/base.yaml, --seed_everything,
  --trainer.max_time (a wall-clock budget), `val_loss=` in its progress lines.
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent


def files(name: str) -> dict[str, str]:
    """Relative path -> text of every file of imitation `name`."""
    root = HERE / name
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}
