"""Train a small byte-level language model from a YAML config, LightningCLI-style.

    python train.py fit --config configs/base.yaml [--seed_everything N]
                        [--trainer.max_time SECONDS] [--trainer.default_root_dir DIR]

The YAML file holds every setting; the flags override its keys, as LightningCLI's do. The
model reads `model.context` bytes and predicts the next one (an embedding, `model.n_layer`
hidden layers, 256 logits); it trains with AdamW on the Python standard library's own sources
(no download) until `trainer.max_epochs` or `trainer.max_time` seconds, whichever comes
first, and prints Lightning's progress line per epoch (`Epoch N: ... val_loss=X`). The
run's folder gets lightning_logs/version_0/ with hparams.yaml, metrics.csv and a checkpoint.
"""
import argparse
import csv
import math
import os
import sysconfig
import time

import torch
import yaml

parser = argparse.ArgumentParser()
parser.add_argument("subcommand", choices=["fit"])
parser.add_argument("--config", required=True)
parser.add_argument("--seed_everything", type=int)
parser.add_argument("--trainer.max_time", dest="max_time", type=float)
parser.add_argument("--trainer.default_root_dir", dest="root")
args = parser.parse_args()

with open(args.config) as handle:
    cfg = yaml.safe_load(handle)
if args.seed_everything is not None:
    cfg["seed_everything"] = args.seed_everything
if args.max_time is not None:
    cfg["trainer"]["max_time"] = args.max_time
if args.root is not None:
    cfg["trainer"]["default_root_dir"] = args.root
model_cfg, opt_cfg, data_cfg, trainer_cfg = cfg["model"], cfg["optimizer"], cfg["data"], cfg["trainer"]
torch.manual_seed(cfg["seed_everything"])
print(f"Seed set to {cfg['seed_everything']}")


def standard_library_text(limit: int, skip: int = 0) -> bytes:
    root, chunks, total = sysconfig.get_paths()["stdlib"], [], 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "test", "tests", "__pycache__"))
        for name in sorted(files):
            if name.endswith(".py") and total < skip + limit:
                with open(os.path.join(folder, name), "rb") as handle:
                    chunks.append(handle.read())
                total += len(chunks[-1])
    return b"".join(chunks)[skip: skip + limit]


context = model_cfg["context"]
train = torch.tensor(list(standard_library_text(data_cfg["train_bytes"])), dtype=torch.long)
val = torch.tensor(list(standard_library_text(data_cfg["val_bytes"], data_cfg["train_bytes"])), dtype=torch.long)
val_x = val.unfold(0, context, 1)[:-1]
val_y = val[context:]

activation = {"gelu": torch.nn.GELU, "relu": torch.nn.ReLU}[model_cfg["activation"]]
layers = [torch.nn.Embedding(256, 32), torch.nn.Flatten(), torch.nn.Linear(32 * context, model_cfg["hidden"]), activation()]
for _ in range(model_cfg["n_layer"] - 1):
    layers += [torch.nn.Linear(model_cfg["hidden"], model_cfg["hidden"]), activation()]
# Lightning's trainer.accelerator: auto takes the GPU when there is one, cpu keeps the CPU.
device = "cuda" if trainer_cfg.get("accelerator", "auto") in ("auto", "gpu", "cuda") and torch.cuda.is_available() else "cpu"
train, val_x, val_y = train.to(device), val_x.to(device), val_y.to(device)
model = torch.nn.Sequential(*layers, torch.nn.Linear(model_cfg["hidden"], 256)).to(device)
print(f"accelerator: {device}")
optimizer = torch.optim.AdamW(model.parameters(), lr=float(opt_cfg["lr"]),
                              weight_decay=float(opt_cfg["weight_decay"]), betas=tuple(opt_cfg["betas"]))

folder = os.path.join(trainer_cfg["default_root_dir"], "lightning_logs", "version_0")
os.makedirs(os.path.join(folder, "checkpoints"), exist_ok=True)
rows, start, step, epoch = [], time.time(), 0, 0
batches = trainer_cfg["limit_train_batches"]
for epoch in range(trainer_cfg["max_epochs"]):
    model.train()
    for _ in range(batches):
        at = torch.randint(0, len(train) - context - 1, (data_cfg["batch_size"],), device=device)
        x = train[at[:, None] + torch.arange(context, device=device)]
        loss = torch.nn.functional.cross_entropy(model(x), train[at + context])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
    model.eval()
    with torch.no_grad():
        val_loss = torch.nn.functional.cross_entropy(model(val_x), val_y).item()
    rows.append({"epoch": epoch, "step": step, "train_loss": loss.item(), "val_loss": val_loss})
    print(f"Epoch {epoch}: 100%|##########| {batches}/{batches} [v_num=0, train_loss={loss.item():.3f}, "
          f"val_loss={val_loss:.3f}]", flush=True)
    if not math.isfinite(val_loss):
        break
    if trainer_cfg["max_time"] is not None and time.time() - start >= trainer_cfg["max_time"]:
        print("Time limit reached. Signaling Trainer to stop.")
        break
torch.save(model.state_dict(), os.path.join(folder, "checkpoints", f"epoch={epoch}-step={step}.ckpt"))
with open(os.path.join(folder, "hparams.yaml"), "w") as handle:
    yaml.safe_dump(cfg, handle)
with open(os.path.join(folder, "metrics.csv"), "w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
print("`Trainer.fit` stopped.")
