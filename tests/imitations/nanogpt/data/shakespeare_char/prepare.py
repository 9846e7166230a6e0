"""
Prepare the Shakespeare dataset for character-level language modeling.
(Imitation: writes made-up tokens instead of downloading tinyshakespeare.)
Will save train.bin, val.bin containing the ids, and meta.pkl containing the
encoder and decoder and some other related info.
"""
import os
import pickle
import random

rng = random.Random(0)
here = os.path.dirname(__file__)
chars = sorted(set("abcdefghijklmnopqrstuvwxyz ,.;:!?\n"))
for split, n in (("train", 20_000), ("val", 2_000)):
    with open(os.path.join(here, f"{split}.bin"), "wb") as f:
        f.write(bytes(rng.randrange(len(chars)) for _ in range(n)))
with open(os.path.join(here, "meta.pkl"), "wb") as f:
    pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars))}, f)
print(f"vocab size: {len(chars)}")
