"""Train a small model from a YAML config, Lightning-CLI style.
(Imitation for Nightshift's tests: the shape of a LightningCLI script, a YAML config,
--key overrides, `Epoch N: ... val_loss=X` progress lines and checkpoints under
lightning_logs/, but no torch and no model: the loss is made up.)

    python train.py fit --config configs/base.yaml [--seed_everything N]
                        [--trainer.max_time SECONDS] [--trainer.default_root_dir DIR]
"""
import argparse
import math
import os
import random
import time

import yaml

parser = argparse.ArgumentParser()
parser.add_argument("subcommand", choices=["fit", "validate"])
parser.add_argument("--config", required=True)
parser.add_argument("--seed_everything", type=int)
parser.add_argument("--trainer.max_time", dest="max_time", type=float)
parser.add_argument("--trainer.default_root_dir", dest="root")
args = parser.parse_args()

with open(args.config) as fh:
    cfg = yaml.safe_load(fh)
seed = cfg["seed_everything"] if args.seed_everything is None else args.seed_everything
max_time = cfg["trainer"]["max_time"] if args.max_time is None else args.max_time
root = args.root or cfg["trainer"]["default_root_dir"]
random.seed(seed)
print(f"Seed set to {seed}")
print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")

model, opt = cfg["model"], cfg["optimizer"]
floor = (0.9 + 0.3 * abs(math.log10(float(opt["lr"]) / 1e-3)) + 2.0 * abs(opt["weight_decay"] - 0.05)
         + 0.2 / model["n_layer"] + (0.05 if model["activation"] == "relu" else 0.0))
noise = random.gauss(0, 0.01)
start = time.time()
epoch = 0
for epoch in range(cfg["trainer"]["max_epochs"]):
    time.sleep(0.01)
    val_loss = floor + (2.3 - floor) * math.exp(-epoch / 20) + noise
    print(f"Epoch {epoch}: 100%|##########| 10/10 [00:00<00:00, v_num=0, train_loss={val_loss - 0.05:.3f}, val_loss={val_loss:.3f}]")
    if max_time is not None and time.time() - start >= max_time:
        print("Time limit reached. Signaling Trainer to stop.")
        break
folder = os.path.join(root, "lightning_logs", "version_0")
os.makedirs(os.path.join(folder, "checkpoints"), exist_ok=True)
with open(os.path.join(folder, "checkpoints", f"epoch={epoch}-step={10 * (epoch + 1)}.ckpt"), "wb") as fh:
    fh.write(b"\0" * 1_100_000)
with open(os.path.join(folder, "hparams.yaml"), "w") as fh:
    yaml.safe_dump(cfg, fh)
print("`Trainer.fit` stopped.")
