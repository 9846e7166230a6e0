"""
Nightshift's default research target: a small byte-level GPT trained for a fixed wall-clock
budget, scored in bits per byte (val_bpb, lower is better) on held-out Python source.
One file, top to bottom: device, knobs, run protocol, data, model, optimizer, loop, export, summary.

    python train/train.py && python train/evaluate.py   # by hand: seed 0, 60 s, ./out, then its val_bpb

This script trains and saves the model; it never sees the validation split. The harness scores
the saved model with train/evaluate.py in a sandbox of its own (protected, like prepare.py's
data): everything here is fair game, and nothing here can change how it is measured.
"""
import time; t_script = time.time()   # total_seconds counts the imports too

import contextlib
import ctypes
import gc
import json
import math
import os
# Sleep, don't spin, between parallel regions: on a shared CPU a spinning OpenMP thread whose
# partner was preempted makes every op wait for it (measured 11x slower with both cores busy).
# On idle cores sleeping costs ~25% (a wake-up per op), which is why this file keeps ops few.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import random
import resource
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from evaluate import save_model
from prepare import load_split

# ---------------------------------------------------------------- device
device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
# The knobs below are written for 2 CPU cores, where a 60 s budget wants a ~0.5M-parameter
# model. An accelerator needs far bigger steps to be busy, so there the size knobs are
# multiplied by these factors: depth, width, context, batch (CUDA: 2 layers x 128 wide x 64
# bytes x 64 windows become 8 x 512 x 512 x 128, ~25M parameters and 65k tokens a step, an
# autoresearch-class model for a 5-minute H100 run; every size is a multiple of 64 there).
# A knob is still set once, on its own line, and an edit to it changes the model on every
# device; the factors are not knobs because on any one machine they would only be another
# name for the size knobs. lr_scale follows the usual width rule for Adam (lr ~ 1/sqrt(width)).
# The CUDA and MPS sizes are untested guesses.
scale = {"cpu": (1, 1, 1, 1), "mps": (2, 2, 4, 2), "cuda": (4, 4, 8, 2)}[device]
lr_scale = 1 / math.sqrt(scale[1])

# ---------------------------------------------------------------- knobs
N_LAYER = 2                 # transformer blocks (x scale[0])            # search: int(1, 6)
N_EMBD = 128                # residual stream width (x scale[1])        # search: choice(64, 128, 192, 256)
HEAD_DIM = 64               # per-head width; heads = N_EMBD // HEAD_DIM # search: choice(16, 32, 64)
MLP_RATIO = 4               # MLP hidden width = MLP_RATIO * N_EMBD     # search: int(2, 6)
CONTEXT_LEN = 64            # bytes of context per window (x scale[2])  # search: choice(32, 64, 128, 256)
BATCH_SIZE = 64             # windows per optimizer step (x scale[3])   # search: choice(8, 16, 32, 64, 128)
OPTIMIZER = "muon"          # for the block matrices                    # search: choice("adamw", "muon")
MUON_LR = 0.02              # peak Muon lr of the blocks, if muon       # search: log(0.003, 0.1)
LR = 1e-2                   # peak AdamW lr: head (+ blocks if adamw)   # search: log(1e-4, 3e-2)
EMBED_LR = 0.2              # peak AdamW lr of the embedding            # search: log(1e-3, 1.0)
WEIGHT_DECAY = 0.1          # decoupled, on matrices only               # search: float(0.0, 0.3)
BETA2 = 0.95                # AdamW second-moment decay                 # search: float(0.9, 0.999)
WARMUP_FRAC = 0.02          # fraction of the budget spent warming up   # search: float(0.0, 0.1)
WARMDOWN_FRAC = 0.6         # final fraction decaying linearly to 0     # search: float(0.0, 0.8)
GRAD_CLIP = 1.0             # max global grad norm                      # search: log(0.1, 10.0)
knobs = {k: v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, (int, float, str))}   # recorded in result.json
n_layer, n_embd, context_len, batch_size = (k * s for k, s in zip((N_LAYER, N_EMBD, CONTEXT_LEN, BATCH_SIZE), scale))
n_head, lr_peak = max(1, n_embd // HEAD_DIM), LR * lr_scale

# ---------------------------------------------------------------- run protocol
SEED = int(os.environ.get("NIGHTSHIFT_SEED", "0"))
BUDGET_S = float(os.environ.get("NIGHTSHIFT_BUDGET_S", "60"))   # training only: no startup, no eval
OUT_DIR = os.environ.get("NIGHTSHIFT_OUT", "out")
DATA_DIR = os.environ.get("NIGHTSHIFT_DATA")   # in a night: the training split only
if not DATA_DIR:                                                 # by hand: build the default data
    from prepare import prepare
    DATA_DIR = str(prepare())
# Progress lines go out on the clock, not on steps: the harness reads them while the run trains
# and compares a candidate's curve with its incumbent's at 25/50/75% of the budget (early
# stopping), which needs a point every few percent whatever the step rate (on 2 CPU cores a
# 60 s budget holds ~300 steps). Each line's loss is the mean over the steps since the last one.
PROGRESS_EVERY = 0.02       # share of the budget between progress lines
LOG_EVERY = 100             # steps between update-ratio measurements (a copy of every matrix)
MAX_LOSS = 20.0             # a byte model starts at ln(256) = 5.5; far above that it has diverged

random.seed(SEED); np.random.seed(SEED); torch.manual_seed(SEED)
if device == "cuda":
    torch.set_float32_matmul_precision("high")   # TF32 for whatever autocast leaves in fp32
if device == "cpu":
    # every core this process may use (a sandbox may pin it to fewer than the machine has)
    torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    with contextlib.suppress(OSError, AttributeError):   # glibc only
        # Activations are MBs, which glibc hands back to the OS on free and page-faults in again
        # on every step; keep them in the heap instead (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD).
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 * 2**20); libc.mallopt(-1, 2**30)
# bf16 matmuls: the accelerators' native speed; on CPUs with native bf16 they run at 2.2x the
# fp32 rate (measured), elsewhere they are emulated and slower than fp32.
cpu_flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
bf16 = device != "cpu" or "avx512_bf16" in cpu_flags or "amx_bf16" in cpu_flags
autocast = lambda: torch.autocast(device, dtype=torch.bfloat16, enabled=bf16)
# The attention kernel wants bf16 on CUDA (flash) but is faster in fp32 on CPU (measured).
attention_precision = (lambda: torch.autocast("cpu", enabled=False)) if device == "cpu" else contextlib.nullcontext
print(f"device: {device} | bf16 matmuls: {bf16} | layers {n_layer} | width {n_embd} | heads {n_head} | "
      f"context {context_len} | batch {batch_size} | lr {lr_peak:.2e}", flush=True)

def write_result(result):
    """Atomically, so the harness never reads half a file."""
    os.makedirs(OUT_DIR, exist_ok=True)
    tmp = os.path.join(OUT_DIR, "result.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f, indent=2)
    os.replace(tmp, os.path.join(OUT_DIR, "result.json"))

# ---------------------------------------------------------------- data
train_data = load_split(DATA_DIR, "train")
offsets = torch.arange(context_len + 1)

def get_batch():
    """Random windows of the training bytes; x and y overlap, shifted by one."""
    starts = torch.randint(len(train_data) - context_len - 1, (batch_size, 1))
    windows = train_data[starts + offsets].to(device, torch.long, non_blocking=True)
    return windows[:, :-1], windows[:, 1:]

# ---------------------------------------------------------------- model
class RMSNorm(torch.autograd.Function):
    """x / rms(x), no gain. F.rms_norm has no fused CPU kernel: autograd differentiates it op by
    op, and on CPU every op is a thread wake-up; this backward is three ops (3.4x faster, measured)."""
    @staticmethod
    def forward(ctx, x):
        rstd = torch.rsqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(x.size(-1)).add_(1e-6))
        y = x * rstd
        ctx.save_for_backward(y, rstd)
        return y

    @staticmethod
    def backward(ctx, grad):
        y, rstd = ctx.saved_tensors
        return torch.addcmul(grad, y, (grad * y).mean(-1, keepdim=True), value=-1).mul_(rstd)

# RMSNorm: as good as LayerNorm for transformers and cheaper; the compiled CUDA path fuses F.rms_norm itself
norm = RMSNorm.apply if device == "cpu" else lambda x: F.rms_norm(x, (x.size(-1),), eps=1e-6)

def rotary(n, dim):
    """RoPE tables: position enters attention as a rotation of q and k, so scores depend on
    relative distance only, and no position embedding competes for the residual stream."""
    angles = torch.outer(torch.arange(n).float(), 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim))
    cos, sin = angles.cos().repeat(1, 2), angles.sin()
    return cos[:, None, None], torch.cat((-sin, sin), dim=-1)[:, None, None]   # (n, 1, 1, dim): broadcast over (B, T, 2, H, dim)

def apply_rotary(x, cos, sin):
    """Rotate each pair (x[i], x[i + dim/2]) by its angle: x*cos + (-x2, x1)*sin, sign folded into sin."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((x2, x1), dim=-1) * sin

class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.attn_out = nn.Linear(n_embd, n_embd, bias=False)
        self.fc = nn.Linear(n_embd, MLP_RATIO * n_embd, bias=False)
        self.mlp_out = nn.Linear(MLP_RATIO * n_embd, n_embd, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        # split/unbind, not slicing: their backward concatenates, slicing's zero-fills a full-size gradient
        qk, v = self.qkv(norm(x)).float().view(B, T, 3, n_head, C // n_head).split([2, 1], dim=2)
        q, k = norm(apply_rotary(qk, cos, sin)).transpose(1, 3).unbind(2)   # q and k together; QK-norm: bounded logits, stable at high LR
        v = v.squeeze(2).transpose(1, 2)
        with attention_precision():   # flash kernel: bf16 on CUDA, fp32 on CPU (its bf16 one is slower)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_out(y.transpose(1, 2).reshape(B, T, C))
        # ReLU^2: as good as GELU/SwiGLU per FLOP at this scale (modded-nanogpt), two matrices not three
        return x + self.mlp_out(F.relu(self.fc(norm(x))).square())

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(256, n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.head = nn.Linear(n_embd, 256, bias=False)
        cos, sin = rotary(context_len, n_embd // n_head)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            # Residual projections start at zero: every block begins as the identity, so the
            # stream (and its gradient) has the same scale at any depth from step 0.
            if name.endswith(("attn_out.weight", "mlp_out.weight")):
                nn.init.zeros_(p)
            elif name == "tok_emb.weight":
                nn.init.normal_(p, std=1.0)   # normed right away: only directions matter
            else:
                nn.init.normal_(p, std=n_embd ** -0.5 if "head" not in name else 0.02)

    def forward(self, idx):
        T = idx.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        x = norm(self.tok_emb(idx))
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(norm(x))

model = GPT().to(device)
n_params = sum(p.numel() for p in model.parameters())
print(f"params: {n_params:,} | data: {DATA_DIR} | train bytes: {len(train_data):,}")
# CUDA: compiled (fused norms, rotary and MLP; shapes fixed). CPU: compiling costs 24 s of a 60 s
# budget (3 s with a warm cache, which a changed shape loses) to save ~27% per step: it does not pay.
compiled = torch.compile(model, dynamic=False) if device == "cuda" else model

# ---------------------------------------------------------------- optimizer
# The block matrices take OPTIMIZER; the embedding and the head always take AdamW (Muon is
# for hidden matrices: an embedding row is updated only when its byte occurs).
hidden = [p for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2]
matrices = hidden + [model.head.weight]   # weight-decayed; decaying the embedding just fights the data

class Muon(torch.optim.Optimizer):
    """Nesterov momentum, then the update orthogonalised by a quintic Newton-Schulz iteration
    (Keller Jordan, 2024): every direction of a matrix moves at the same rate, so rare
    directions learn as fast as the dominant ones. Matrices of one shape are stacked and
    orthogonalised together: a few batched matmuls, not hundreds of small ones."""
    def __init__(self, params, lr, momentum=0.95, weight_decay=0.0):
        groups = [{"params": [p for p in params if p.shape == shape]} for shape in sorted({p.shape for p in params})]
        super().__init__(groups, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params, momentum = group["params"], group["momentum"]
            grads = torch.stack([p.grad for p in params])
            buf = self.state[params[0]].setdefault("momentum", torch.zeros_like(grads))
            buf.lerp_(grads, 1 - momentum)
            X = grads.lerp_(buf, momentum).to(torch.bfloat16 if bf16 else torch.float32)
            rows, cols = params[0].shape
            if rows > cols:
                X = X.mT
            X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
            for _ in range(5):   # X <- aX + (bA + cA^2)X, A = XX^T: all singular values to ~1, fast
                A = X @ X.mT
                X = torch.baddbmm(X, torch.baddbmm(A, A, A, beta=-4.7750, alpha=2.0315), X, beta=3.4445)
            if rows > cols:
                X = X.mT
            torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])
            torch._foreach_add_(params, X.to(params[0].dtype).unbind(0), alpha=-group["lr"] * max(1, rows / cols) ** 0.5)

# beta2 0.95 forgets stale second moments faster than 0.999, which short, high-LR runs need.
adam = dict(betas=(0.9, BETA2), eps=1e-10, fused=True)   # fused: one kernel, on CPU too
# The embedding's input is one-hot and its output is normed: a row moves only when its byte
# occurs and only its direction counts, so it takes a far larger step than the head can.
embedding = {"params": [model.tok_emb.weight], "lr": EMBED_LR * lr_scale, "weight_decay": 0.0}
if OPTIMIZER == "muon":
    optimizers = [Muon(hidden, lr=MUON_LR, weight_decay=WEIGHT_DECAY),
                  torch.optim.AdamW([{"params": [model.head.weight], "weight_decay": WEIGHT_DECAY}, embedding], lr=lr_peak, **adam)]
else:
    optimizers = [torch.optim.AdamW([{"params": matrices, "weight_decay": WEIGHT_DECAY}, embedding], lr=lr_peak, **adam)]
for opt in optimizers:
    for group in opt.param_groups:
        group["peak_lr"] = group["lr"]

def lr_scale_at(progress):
    """Time-based: linear warmup, flat, then linear warmdown to 0 at the end of the budget."""
    if progress < WARMUP_FRAC:
        return progress / WARMUP_FRAC
    if progress > 1 - WARMDOWN_FRAC:
        return max(0.0, 1 - progress) / WARMDOWN_FRAC
    return 1.0

# ---------------------------------------------------------------- training loop
step, train_time, grad_norm, update_ratio, loss_f = 0, 0.0, float("nan"), float("nan"), float("nan")
norm_t = torch.tensor(float("nan"))
next_line, loss_sum, loss_steps = 0.0, 0.0, 0   # when the next progress line is due; its loss so far

def progress_line(last_step):
    """`step N | loss X | ... | elapsed Ys`: what the harness reads as the run's curve. The lr is
    the schedule's at `elapsed` (not the last step's, set when it began): two runs on one
    schedule then print the same lr at the same share of the budget, whatever their step times."""
    print(f"step {last_step} | loss {loss_sum / loss_steps:.4f} | lr {lr_peak * lr_scale_at(train_time / BUDGET_S):.1e} | grad_norm {grad_norm:.3f} | "
          f"update_ratio {update_ratio:.1e} | batch {batch_size} | context {context_len} | elapsed {train_time:.1f}s", flush=True)

model.train()
while train_time < BUDGET_S:
    t0 = time.time()
    lr_mult = lr_scale_at(train_time / BUDGET_S)
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = group["peak_lr"] * lr_mult
    x, y = get_batch()
    with autocast():
        logits = compiled(x)
    loss = F.cross_entropy(logits.float().view(-1, 256), y.reshape(-1))
    loss_f = loss.item()   # the one sync per step: it makes the timing honest on an accelerator
    if not math.isfinite(loss_f) or loss_f > MAX_LOSS:
        print(f"FAIL: loss exploded at step {step} (loss {loss_f})")
        write_result({"status": "diverged", "step": step, "train_loss": loss_f,
                      "seed": SEED, "budget_s": BUDGET_S, "device": device})
        sys.exit(3)
    loss.backward()
    norm_t = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    measure = step % LOG_EVERY == 0   # update/weight ratio costs a copy and syncs: only every LOG_EVERY steps
    if measure:
        before = [p.detach().clone() for p in matrices]
    for opt in optimizers:
        opt.step()
    model.zero_grad(set_to_none=True)
    if measure:   # |dW| / |W| over all matrices as one vector (zero-initialised ones have |W| = 0)
        grad_norm = norm_t.item()
        update_ratio = math.sqrt(sum((p - b).square().sum().item() for p, b in zip(matrices, before))
                                 / sum(b.square().sum().item() for b in before))
    if step == 0:   # everything allocated from here on is transient: the collector only stalls
        gc.collect(); gc.freeze(); gc.disable()
    train_time += time.time() - t0
    loss_sum, loss_steps = loss_sum + loss_f, loss_steps + 1
    if train_time >= next_line:
        progress_line(step)
        loss_sum, loss_steps = 0.0, 0
        next_line = (math.floor(train_time / (PROGRESS_EVERY * BUDGET_S)) + 1) * PROGRESS_EVERY * BUDGET_S
    step += 1
if loss_steps:
    progress_line(step - 1)   # the end of the curve: the mean loss of the last steps
grad_norm = norm_t.item()   # the last step's, for the summary

# ---------------------------------------------------------------- export
# The harness scores the model, not this script: save_model writes it as an exported graph
# (with its precision) to $NIGHTSHIFT_OUT/model.pt2, and train/evaluate.py computes val_bpb.
t_export = time.time()
save_model(model, context_len, OUT_DIR, precision=autocast)
export_seconds = time.time() - t_export

# ---------------------------------------------------------------- summary
tokens = step * batch_size * context_len
tokens_per_s = tokens / max(train_time, 1e-9)
flops_per_s = 6 * n_params * tokens_per_s   # weights only: the figure docs/train.md compares with a matmul peak
mfu = None
if device == "cuda":   # PaLM's estimate: 6N per token for the weights plus attention's 12*L*T*d
    flops_per_token = 6 * n_params + 12 * n_layer * context_len * n_embd
    peak = {"H100 PCIe": 756e12, "H100 NVL": 835e12, "H100": 989e12, "H200": 989e12, "B200": 2250e12,
            "A100": 312e12, "L4": 121e12}   # dense bf16 spec sheets; the first name contained wins
    name = torch.cuda.get_device_name()
    peak_flops = next((v for k, v in peak.items() if k in name), None)
    mfu = flops_per_token * tokens_per_s / peak_flops if peak_flops else None
    peak_memory_mb = torch.cuda.max_memory_allocated() / 2**20
else:
    peak_memory_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)   # bytes on macOS, KiB on Linux
result = {
    "status": "ok",
    "steps": step, "tokens": tokens, "tokens_per_s": tokens_per_s, "flops_per_s": flops_per_s,
    "train_seconds": train_time, "export_seconds": export_seconds, "total_seconds": time.time() - t_script,
    "peak_memory_mb": peak_memory_mb, "params": n_params, "device": device, "mfu": mfu,
    "train_loss": loss_f, "grad_norm": grad_norm, "update_ratio": update_ratio,
    "seed": SEED, "budget_s": BUDGET_S,
    "knobs": knobs,
}
write_result(result)
print("---")
for key, value in result.items():
    if key != "knobs":
        print(f"{key + ':':<16}{value:.6g}" if isinstance(value, float) else f"{key + ':':<16}{value}")
