"""Score a nanoGPT checkpoint on fixed windows of the validation split, with nanoGPT's own
model.py: an evaluator for program.md's `evaluate:`, so the metric is measured apart from the
training run (docs/integrity.md). Put it at the root of your nanoGPT checkout, commit it, and
list it in `protected:` with model.py.

    python evaluate.py OUT_DIR [--data data/shakespeare_char] [--tokens 65536]

OUT_DIR holds the `ckpt.pt` training wrote (`--out_dir={out}` in the command; with
`--always_save_checkpoint=True` it is the model of the last evaluation, the one whose
`val loss` line the script printed). The score is the mean cross-entropy over every position
of non-overlapping windows of block_size + 1 tokens, evenly spaced over all of val.bin: the
same windows for every run, unlike train.py's estimate from random batches. It prints the
`---` summary Nightshift reads (`val_loss: ...`) and writes result.json to $NIGHTSHIFT_OUT.
"""
import argparse
import json
import os

import numpy as np
import torch

from model import GPT, GPTConfig   # nanoGPT's own, protected: the evaluator builds the model


def windows(data: np.ndarray, block: int, tokens: int) -> torch.Tensor:
    span = block + 1
    n = min(tokens, len(data)) // span
    if n == 0:
        raise SystemExit(f"the split has {len(data)} tokens, fewer than block_size + 1 = {span}")
    starts = np.arange(n) * (len(data) - span) // max(n - 1, 1)
    return torch.from_numpy(np.stack([data[s:s + span].astype(np.int64) for s in starts]))


@torch.no_grad()
def score(model: GPT, batch: torch.Tensor, size: int = 64) -> float:
    total, count = 0.0, 0
    for i in range(0, len(batch), size):
        chunk = batch[i:i + size]
        inputs, targets = chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()   # nanoGPT views them
        _, loss = model(inputs, targets)   # with targets: logits at every position
        total += loss.item() * chunk[:, 1:].numel()
        count += chunk[:, 1:].numel()
    return total / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="the folder holding ckpt.pt ({train_out} in program.md)")
    parser.add_argument("--data", default="data/shakespeare_char", help="the folder holding val.bin")
    parser.add_argument("--tokens", type=int, default=65536, help="tokens of val.bin scored")
    args = parser.parse_args()
    torch.manual_seed(0)
    # weights_only: a checkpoint is data; unpickling anything else would run code
    checkpoint = torch.load(os.path.join(args.out_dir, "ckpt.pt"), map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**checkpoint["model_args"]))
    state = {k.removeprefix("_orig_mod."): v for k, v in checkpoint["model"].items()}   # torch.compile's names
    model.load_state_dict(state)
    model.eval()
    val = np.memmap(os.path.join(args.data, "val.bin"), dtype=np.uint16, mode="r")
    loss = score(model, windows(val, model.config.block_size, args.tokens))
    result = {"val_loss": loss, "iter_num": int(checkpoint.get("iter_num", -1))}
    if os.environ.get("NIGHTSHIFT_OUT"):
        with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as fh:
            json.dump(result, fh)
    print("---")
    print(f"val_loss: {loss:.6f}")
    print(f"iter_num: {result['iter_num']}")


if __name__ == "__main__":
    main()
