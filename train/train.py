"""
Nightshift's default research target: a small byte-level GPT trained for a fixed wall-clock
budget, scored in bits per byte (val_bpb, lower is better) on held-out Python source.
One file, top to bottom: knobs, run protocol, data, model, optimizer, loop, evaluation, summary.

    python train/train.py          # by hand: seed 0, 60 s, ./out, default data prepared on demand

The evaluation lives in prepare.py (protected); everything here is fair game.
"""
import time; t_script = time.time()   # total_seconds counts the imports too

import contextlib
import json
import math
import os
# Sleep, don't spin, between parallel regions: on a shared CPU a spinning OpenMP thread whose
# partner was preempted makes every matmul wait for it (measured 7x slower on 2 busy cores).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import random
import resource
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from prepare import evaluate_bpb, load_split

# ---------------------------------------------------------------- knobs
N_LAYER = 2                 # transformer blocks                        # search: int(1, 6)
N_EMBD = 96                 # residual stream width                     # search: choice(64, 96, 128, 192, 256)
N_HEAD = 4                  # attention heads (every choice divides N_EMBD)  # search: choice(1, 2, 4, 8)
MLP_RATIO = 4               # MLP hidden width = MLP_RATIO * N_EMBD     # search: int(2, 6)
CONTEXT_LEN = 64            # bytes of context per training window      # search: choice(32, 64, 128, 256, 512)
BATCH_SIZE = 16             # windows per optimizer step                # search: choice(8, 16, 32, 64, 128)
LR = 3e-3                   # peak learning rate (AdamW)                # search: log(1e-4, 3e-2)
WEIGHT_DECAY = 0.1          # decoupled, on matrices only               # search: float(0.0, 0.3)
BETA2 = 0.99                # AdamW second-moment decay                 # search: float(0.9, 0.999)
WARMUP_FRAC = 0.02          # fraction of the budget spent warming up   # search: float(0.0, 0.1)
WARMDOWN_FRAC = 0.4         # final fraction decaying linearly to 0     # search: float(0.0, 0.8)
GRAD_CLIP = 1.0             # max global grad norm                      # search: log(0.1, 10.0)
knobs = {k: v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, (int, float))}   # recorded in result.json

# ---------------------------------------------------------------- run protocol
SEED = int(os.environ.get("NIGHTSHIFT_SEED", "0"))
BUDGET_S = float(os.environ.get("NIGHTSHIFT_BUDGET_S", "60"))   # training only: no startup, no eval
OUT_DIR = os.environ.get("NIGHTSHIFT_OUT", "out")
SPLIT = os.environ.get("NIGHTSHIFT_SPLIT", "val")                # "test" only in replay
DATA_DIR = os.environ.get("NIGHTSHIFT_DATA")
if not DATA_DIR:                                                 # by hand: build the default data
    from prepare import prepare
    DATA_DIR = str(prepare())
LOG_EVERY = 100             # steps between progress lines
MAX_LOSS = 20.0             # a byte model starts at ln(256) = 5.5; far above that it has diverged

random.seed(SEED); np.random.seed(SEED); torch.manual_seed(SEED)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cuda":
    torch.set_float32_matmul_precision("high")   # TF32 for whatever autocast leaves in fp32
    autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16)
else:
    # every core this process may use (a sandbox may pin it to fewer than the machine has)
    torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    autocast = contextlib.nullcontext   # bf16 on CPU is slower, not faster

def write_result(result):
    """Atomically, so the harness never reads half a file."""
    os.makedirs(OUT_DIR, exist_ok=True)
    tmp = os.path.join(OUT_DIR, "result.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f, indent=2)
    os.replace(tmp, os.path.join(OUT_DIR, "result.json"))

# ---------------------------------------------------------------- data
train_data = load_split(DATA_DIR, "train")
offsets = torch.arange(CONTEXT_LEN + 1)

def get_batch():
    """Random windows of the training bytes; x and y overlap, shifted by one."""
    starts = torch.randint(len(train_data) - CONTEXT_LEN - 1, (BATCH_SIZE, 1))
    windows = train_data[starts + offsets].to(DEVICE, torch.long, non_blocking=True)
    return windows[:, :-1], windows[:, 1:]

# ---------------------------------------------------------------- model
class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(N_EMBD), nn.LayerNorm(N_EMBD)
        self.qkv = nn.Linear(N_EMBD, 3 * N_EMBD, bias=False)
        self.attn_out = nn.Linear(N_EMBD, N_EMBD, bias=False)
        self.fc = nn.Linear(N_EMBD, MLP_RATIO * N_EMBD, bias=False)
        self.mlp_out = nn.Linear(MLP_RATIO * N_EMBD, N_EMBD, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, N_HEAD, C // N_HEAD).transpose(1, 3).unbind(2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # fused kernel on CUDA
        x = x + self.attn_out(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_out(F.gelu(self.fc(self.norm2(x))))

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(256, N_EMBD)
        self.pos_emb = nn.Embedding(CONTEXT_LEN, N_EMBD)
        self.blocks = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.norm = nn.LayerNorm(N_EMBD)
        self.head = nn.Linear(N_EMBD, 256, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:   # GPT-2 init; residual projections shrunk so depth doesn't grow the stream
                std = 0.02 / math.sqrt(2 * N_LAYER) if name.endswith(("attn_out.weight", "mlp_out.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx):
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

model = GPT().to(DEVICE)
n_params = sum(p.numel() for p in model.parameters())
print(f"device: {DEVICE} | params: {n_params:,} | data: {DATA_DIR} | train bytes: {len(train_data):,}")

# ---------------------------------------------------------------- optimizer
# Weight decay on matrices only: decaying norms' gains and embeddings just fights the data.
matrices = [p for n, p in model.named_parameters() if p.dim() == 2 and "emb" not in n]
others = [p for n, p in model.named_parameters() if p.dim() != 2 or "emb" in n]
optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": WEIGHT_DECAY},
                               {"params": others, "weight_decay": 0.0}],
                              lr=LR, betas=(0.9, BETA2), fused=DEVICE == "cuda")

def lr_at(progress):
    """Time-based: linear warmup, flat, then linear warmdown to 0 at the end of the budget."""
    if progress < WARMUP_FRAC:
        return LR * progress / WARMUP_FRAC
    if progress > 1 - WARMDOWN_FRAC:
        return LR * max(0.0, 1 - progress) / WARMDOWN_FRAC
    return LR

# ---------------------------------------------------------------- training loop
step, train_time, grad_norm, update_ratio, loss_f = 0, 0.0, float("nan"), float("nan"), float("nan")
model.train()
while train_time < BUDGET_S:
    t0 = time.time()
    lr = lr_at(train_time / BUDGET_S)
    for group in optimizer.param_groups:
        group["lr"] = lr
    x, y = get_batch()
    with autocast():
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, 256), y.reshape(-1))
    loss_f = loss.item()   # also the sync point that makes the timing honest on CUDA
    if not math.isfinite(loss_f) or loss_f > MAX_LOSS:
        print(f"FAIL: loss exploded at step {step} (loss {loss_f})")
        write_result({"status": "diverged", "step": step, "train_loss": loss_f, "split": SPLIT,
                      "seed": SEED, "budget_s": BUDGET_S, "device": DEVICE})
        sys.exit(3)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP).item()
    measure = step % LOG_EVERY == 0   # update/weight ratio costs a copy: only on logging steps
    if measure:
        before = [p.detach().clone() for p in matrices]
    optimizer.step()
    if measure:   # mean over matrices of |dW| / |W|: how fast the weights move, per step
        update_ratio = sum(((p - b).norm() / b.norm()).item() for p, b in zip(matrices, before)) / len(matrices)
        print(f"step {step} | loss {loss_f:.4f} | lr {lr:.1e} | grad_norm {grad_norm:.3f} | "
              f"update_ratio {update_ratio:.1e} | elapsed {train_time:.1f}s", flush=True)
    step += 1
    train_time += time.time() - t0

# ---------------------------------------------------------------- evaluation
t_eval = time.time()
with autocast():
    val_bpb = evaluate_bpb(model, DATA_DIR, SPLIT, CONTEXT_LEN, DEVICE, batch_size=64)
eval_seconds = time.time() - t_eval

# ---------------------------------------------------------------- summary
tokens = step * BATCH_SIZE * CONTEXT_LEN
tokens_per_s = tokens / max(train_time, 1e-9)
mfu = None
if DEVICE == "cuda":   # PaLM's estimate: 6N per token for the weights plus attention's 12*L*T*d
    flops_per_token = 6 * n_params + 12 * N_LAYER * CONTEXT_LEN * N_EMBD
    peak = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12}   # dense bf16
    name = torch.cuda.get_device_name()
    peak_flops = next((v for k, v in peak.items() if k in name), None)
    mfu = flops_per_token * tokens_per_s / peak_flops if peak_flops else None
    peak_memory_mb = torch.cuda.max_memory_allocated() / 2**20
else:
    peak_memory_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: KiB
result = {
    "val_bpb": val_bpb, "split": SPLIT, "status": "ok" if math.isfinite(val_bpb) else "bad_metric",
    "steps": step, "tokens": tokens, "tokens_per_s": tokens_per_s,
    "train_seconds": train_time, "eval_seconds": eval_seconds, "total_seconds": time.time() - t_script,
    "peak_memory_mb": peak_memory_mb, "params": n_params, "device": DEVICE, "mfu": mfu,
    "train_loss": loss_f, "grad_norm": grad_norm, "update_ratio": update_ratio,
    "seed": SEED, "budget_s": BUDGET_S,
    "knobs": knobs,
}
write_result(result)
print("---")
for key, value in result.items():
    if key != "knobs":
        print(f"{key + ':':<16}{value:.6g}" if isinstance(value, float) else f"{key + ':':<16}{value}")
