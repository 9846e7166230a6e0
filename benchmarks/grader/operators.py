"""The operators that exports of standard models use: the catalogue behind the evaluator's
list of operators (train/schema.py ALLOWED_OPERATORS).

    python -m benchmarks.grader.operators [--data-dir DIR]

Each model of the catalogue is exported the way train.py ends, with evaluate.save_model, and
the operators are read from the archive's graph (models/model.json, higher-order bodies
included): what the evaluator is asked to call. The bundled train.py is exported at its
default knobs and at other knob values (a real run with a budget of 0 s: its model, untrained),
beside small standard layers: nanoGPT-style blocks, MLPs with relu, gelu, silu and tanh,
LayerNorm and RMSNorm, embeddings, scaled_dot_product_attention and hand-written attention
with masks (einsum, grouped-query, qk-norm), rotary embeddings, conv1d, dropout in eval,
autocast to bf16, torch.cond, a small mixture of experts, a recurrence.

Prints the operators of each model, their union, and how it compares with the list: an
operator the catalogue uses that is not listed would be refused in a user's night
(tests/train/test_operators.py fails first); one listed that no model uses is there by a
reason written beside it in schema.py. It prints; it never asserts.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "train"))
import evaluate  # noqa: E402

V, D, T = 256, 32, 16   # bytes, a small width, a small context: the operators, not the sizes, matter


# ---------------------------------------------------------------- standard layers

class Mlp(nn.Module):
    def __init__(self, activation: Callable) -> None:
        super().__init__()
        self.emb, self.fc, self.out, self.activation = nn.Embedding(V, D), nn.Linear(D, 4 * D), nn.Linear(4 * D, V), activation

    def forward(self, idx):
        return self.out(self.activation(self.fc(self.emb(idx))))


class Gated(nn.Module):
    """SwiGLU and GLU: a gate times a value."""

    def __init__(self, gate: Callable) -> None:
        super().__init__()
        self.emb, self.fc, self.out, self.gate = nn.Embedding(V, D), nn.Linear(D, 8 * D, bias=False), nn.Linear(4 * D, V), gate

    def forward(self, idx):
        a, b = self.fc(self.emb(idx)).chunk(2, dim=-1)
        return self.out(self.gate(a) * b)


class Normed(nn.Module):
    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.emb, self.norm, self.head = nn.Embedding(V, D), norm, nn.Linear(D, V)

    def forward(self, idx):
        return self.head(self.norm(self.emb(idx)))


class HandRmsNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(D))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.gain


class Positions(nn.Module):
    """GPT-2's learned positions, tied input and output embeddings, a logit soft-cap."""

    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos, self.head = nn.Embedding(V, D), nn.Embedding(T, D), nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return 30 * torch.tanh(self.head(x) / 30)


class Attention(nn.Module):
    """One attention layer over embeddings: `kind` picks how the scores are made and masked."""

    def __init__(self, kind: str, heads: int = 2) -> None:
        super().__init__()
        self.kind, self.heads = kind, heads
        self.emb, self.qkv, self.proj, self.head = nn.Embedding(V, D), nn.Linear(D, 3 * D), nn.Linear(D, D), nn.Linear(D, V)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))   # nanoGPT's mask
        slopes = torch.tensor([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)])
        self.register_buffer("slopes", slopes.view(1, heads, 1, 1))

    def forward(self, idx):
        x = self.emb(idx)
        B, L, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, L, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.kind == "sdpa causal":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.kind == "sdpa mask":
            mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            if self.kind == "masked_fill":        # nanoGPT without flash attention
                att = att.masked_fill(self.bias[:, :, :L, :L] == 0, float("-inf"))
                att = F.softmax(att, dim=-1)
            elif self.kind == "alibi":           # distance penalties, an additive mask, a stable softmax by hand
                position = torch.arange(L, device=x.device)
                distance = (position[None, :] - position[:, None]).clamp(max=0).float()
                att = att + self.slopes * distance
                att = torch.where(torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1), -torch.inf, att)
                att = (att - att.amax(-1, keepdim=True)).exp()
                att = att / att.sum(-1, keepdim=True)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, L, C)
        return self.head(self.proj(y))


class Rotary(nn.Module):
    """Rotary embeddings: tables made in forward (arange, outer, cos, sin) and rotated halves."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.head = nn.Embedding(V, D), nn.Linear(D, V)

    def forward(self, idx):
        x = self.emb(idx)
        inverse = 1.0 / (10000 ** (torch.arange(0, D, 2, device=x.device).float() / D))
        angles = torch.outer(torch.arange(x.shape[1], device=x.device).float(), inverse)
        cos, sin = angles.cos()[None], angles.sin()[None]
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        return self.head(rotated)


class CausalConv(nn.Module):
    """conv1d made causal by left padding, and by padding both sides and slicing."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.conv, self.padded, self.head = (nn.Embedding(V, D), nn.Conv1d(D, D, 3), nn.Conv1d(D, D, 3, padding=2),
                                                       nn.Linear(D, V))

    def forward(self, idx):
        x = self.emb(idx).transpose(1, 2)
        x = self.conv(F.pad(x, (2, 0))) + self.padded(x)[..., :-2]
        return self.head(x.transpose(1, 2))


class Mixer(nn.Module):
    """A running mean over the past (cumsum), as the evaluator's own tests' models do."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.head = nn.Embedding(V, D), nn.Linear(D, V)

    def forward(self, idx):
        x = self.emb(idx)
        return self.head(torch.cumsum(x, dim=1) / torch.arange(1, x.shape[1] + 1)[None, :, None])


class Recurrence(nn.Module):
    """A linear recurrence over time (an exponential moving average, as state-space and
    RWKV-style layers have), unrolled by the export: a state started at zeros, a step per byte."""

    def __init__(self, like: bool) -> None:
        super().__init__()
        self.like = like
        self.emb, self.head, self.decay = nn.Embedding(V, D), nn.Linear(D, V), nn.Parameter(torch.zeros(D))

    def forward(self, idx):
        x = self.emb(idx)
        decay = torch.sigmoid(self.decay)
        state = torch.zeros_like(x[:, 0]) if self.like else torch.zeros(x.shape[0], D, device=x.device)
        outputs = []
        for t in range(x.shape[1]):
            state = decay * state + (1 - decay) * x[:, t]
            outputs.append(state)
        return self.head(torch.stack(outputs, dim=1))


class Branch(nn.Module):
    """torch.cond over two subgraphs, the predicate read from a weight."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.head = nn.Embedding(V, D), nn.Linear(D, V)

    def forward(self, idx):
        h = self.emb(idx)
        return self.head(torch.cond(self.head.bias.sum() > 0, lambda x: x * 2, lambda x: x - 1, (h,)))


class HandLayerNorm(nn.Module):
    def forward(self, x):
        return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)


class QkNorm(nn.Module):
    """Attention logits bounded by normalizing q and k (F.normalize), a learned temperature."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.qk, self.head = nn.Embedding(V, D), nn.Linear(D, 2 * D), nn.Linear(D, V)
        self.temperature = nn.Parameter(torch.tensor(10.0))

    def forward(self, idx):
        x = self.emb(idx)
        q, k = (F.normalize(t, dim=-1) for t in self.qk(x).chunk(2, dim=-1))
        return self.head(F.scaled_dot_product_attention(q * self.temperature, k, x, is_causal=True, scale=1.0))


class Einsum(nn.Module):
    """Attention written with einsum, masked by an additive -inf triangle (torch.full, triu)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.qkv, self.head = nn.Embedding(V, D), nn.Linear(D, 3 * D), nn.Linear(D, V)

    def forward(self, idx):
        q, k, v = self.qkv(self.emb(idx)).chunk(3, dim=-1)
        L = idx.shape[1]
        mask = torch.full((L, L), float("-inf"), device=idx.device).triu(1)
        att = (torch.einsum("bid,bjd->bij", q, k) / math.sqrt(D) + mask).softmax(-1)
        return self.head(torch.einsum("bij,bjd->bid", att, v))


class GroupedQuery(nn.Module):
    """Grouped-query attention: fewer key and value heads, shared by repeat_interleave or
    expand, and native (enable_gqa)."""

    def __init__(self, native: bool = False) -> None:
        super().__init__()
        self.native = native
        self.emb, self.q, self.kv, self.head = nn.Embedding(V, D), nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, V)

    def forward(self, idx):
        x = self.emb(idx)
        B, L, C = x.shape
        q = self.q(x).view(B, L, 4, C // 4).permute(0, 2, 1, 3)
        k, v = (t.view(B, L, 2, C // 4).transpose(1, 2) for t in self.kv(x).chunk(2, dim=-1))
        if self.native:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k = k.repeat_interleave(2, dim=1)
            v = v[:, :, None].expand(B, 2, 2, L, C // 4).reshape(B, 4, L, C // 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(y.permute(0, 2, 1, 3).flatten(2))


class Experts(nn.Module):
    """A mixture of experts: a router's top 2 of 4, softmax-weighted, gathered."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.router, self.head = nn.Embedding(V, D), nn.Linear(D, 4), nn.Linear(D, V)
        self.experts = nn.ModuleList(nn.Linear(D, D) for _ in range(4))

    def forward(self, idx):
        x = self.emb(idx)
        weights, chosen = self.router(x).topk(2, dim=-1)
        outputs = torch.stack([expert(x) for expert in self.experts], dim=-2)   # (B, T, 4, D)
        picked = outputs.gather(-2, chosen[..., None].expand(*chosen.shape, D))
        return self.head((picked * weights.softmax(-1)[..., None]).sum(-2))


class Highway(nn.Module):
    """A gated residual (t * h + (1 - t) * x) and log-probabilities for logits."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.gate, self.h, self.head = nn.Embedding(V, D), nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, V)

    def forward(self, idx):
        x = self.emb(idx)
        t = torch.sigmoid(self.gate(x))
        return F.log_softmax(self.head(t * F.relu(self.h(x)) + (1 - t) * x), dim=-1)


class NanoBlock(nn.Module):
    """nanoGPT's Block: LayerNorm, causal self-attention (sdpa), GELU MLP, dropout, residuals."""

    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.c_fc, self.mlp_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        B, L, C = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, L, 2, C // 2).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
        x = x + self.drop(self.c_proj(y.transpose(1, 2).contiguous().view(B, L, C)))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))))


class NanoGpt(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe, self.drop = nn.Embedding(V, D), nn.Embedding(T, D), nn.Dropout(0.1)
        self.blocks = nn.ModuleList(NanoBlock() for _ in range(2))
        self.ln_f, self.lm_head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


# name: (the model, the precision save_model exports it in)
CATALOGUE: dict[str, Callable[[], tuple[nn.Module, Callable | None]]] = {
    "mlp relu": lambda: (Mlp(F.relu), None),
    "mlp relu squared": lambda: (Mlp(lambda x: F.relu(x).square()), None),
    "mlp gelu": lambda: (Mlp(F.gelu), None),
    "mlp gelu tanh": lambda: (Mlp(lambda x: F.gelu(x, approximate="tanh")), None),
    "mlp silu": lambda: (Mlp(F.silu), None),
    "mlp tanh": lambda: (Mlp(torch.tanh), None),
    "swiglu": lambda: (Gated(F.silu), None),
    "glu sigmoid": lambda: (Gated(torch.sigmoid), None),
    "layernorm": lambda: (Normed(nn.LayerNorm(D)), None),
    "rmsnorm": lambda: (Normed(nn.RMSNorm(D)), None),
    "rmsnorm by hand": lambda: (Normed(HandRmsNorm()), None),
    "layernorm by hand": lambda: (Normed(HandLayerNorm()), None),
    "positions, tied, soft-capped": lambda: (Positions(), None),
    "attention sdpa causal": lambda: (Attention("sdpa causal"), None),
    "attention sdpa mask": lambda: (Attention("sdpa mask"), None),
    "attention masked_fill": lambda: (Attention("masked_fill"), None),
    "attention alibi by hand": lambda: (Attention("alibi"), None),
    "attention qk-norm": lambda: (QkNorm(), None),
    "attention einsum, -inf mask": lambda: (Einsum(), None),
    "grouped-query attention": lambda: (GroupedQuery(), None),
    "grouped-query attention, native": lambda: (GroupedQuery(native=True), None),
    "rotary": lambda: (Rotary(), None),
    "conv1d": lambda: (CausalConv(), None),
    "cumsum mixer": lambda: (Mixer(), None),
    "recurrence from zeros": lambda: (Recurrence(like=False), None),
    "recurrence from zeros_like": lambda: (Recurrence(like=True), None),
    "cond": lambda: (Branch(), None),
    "mixture of experts": lambda: (Experts(), None),
    "highway gate, log-softmax": lambda: (Highway(), None),
    "nanogpt": lambda: (NanoGpt(), None),
    "nanogpt bf16": lambda: (NanoGpt(), bf16),
    "attention masked_fill bf16": lambda: (Attention("masked_fill"), bf16),
}

# train.py's knobs for its other exports: name -> {knob line: new value}, or a source edit
TRAIN_VARIANTS: dict[str, dict[str, str]] = {
    "train.py": {},
    "train.py 1 layer": {"N_LAYER": "1"},
    "train.py 4 layers, 64 wide": {"N_LAYER": "4", "N_EMBD": "64"},
    "train.py head_dim 16": {"HEAD_DIM": "16"},
    "train.py 192 wide, head_dim 32": {"N_EMBD": "192", "HEAD_DIM": "32"},
    "train.py mlp 2, context 32": {"MLP_RATIO": "2", "CONTEXT_LEN": "32"},
    "train.py context 256": {"CONTEXT_LEN": "256", "BATCH_SIZE": "8"},
    "train.py adamw": {"OPTIMIZER": '"adamw"'},
}
# train.py as it runs where the CPU has native bf16 (autocast on), and as on CUDA (F.rms_norm)
TRAIN_EDITS: dict[str, list[tuple[str, str]]] = {
    "train.py bf16": [(r"^bf16 = .*$", "bf16 = True")],
    "train.py rms_norm (the CUDA path)": [(r'^norm = RMSNorm.apply if device == "cpu" else ', "norm = ")],
}


def operators_of(path: Path) -> set[str]:
    """The targets of every node of the archive's graph, higher-order bodies included, as
    the evaluator reads them (`torch.ops.aten.linear.default` -> `aten.linear.default`)."""
    with zipfile.ZipFile(path) as archive:
        model = json.loads(archive.read(next(n for n in archive.namelist() if n.endswith("models/model.json"))))
    found: set[str] = set()

    def walk(graph: dict) -> None:
        for node in graph["nodes"]:
            found.add(node["target"].removeprefix("torch.ops."))
            for item in node["inputs"]:
                if "as_graph" in item["arg"]:
                    walk(item["arg"]["as_graph"]["graph"])
    walk(model["graph_module"]["graph"])
    return found


def standard_operators(work: Path, names=None) -> dict[str, set[str]]:
    """{model name: the operators of its export} for the standard layers."""
    found = {}
    for name in names or CATALOGUE:
        torch.manual_seed(0)
        model, precision = CATALOGUE[name]()
        path = evaluate.save_model(model, T, work / re.sub(r"\W+", "-", name),
                                   **({"precision": precision} if precision else {}))
        found[name] = operators_of(path)
    return found


# Runs train.py once per variant in this one process (torch imported once): budget 0, so its
# model is built and exported untrained, the loop skipped.
_DRIVER = """
import contextlib, io, json, os, re, runpy, sys
sys.path.insert(0, sys.argv[1])
found = {}
for name, source, out in json.loads(sys.stdin.read()):
    path = os.path.join(out, "train.py")
    os.makedirs(out, exist_ok=True)
    open(path, "w").write(source)
    os.environ.update(NIGHTSHIFT_OUT=out, NIGHTSHIFT_BUDGET_S="0", NIGHTSHIFT_SEED="0")
    with contextlib.redirect_stdout(io.StringIO()):
        runpy.run_path(path, run_name="__main__")
"""


def train_py_operators(work: Path, data_dir: Path, names=None) -> dict[str, set[str]]:
    """{variant: the operators of train.py's export at those knobs}."""
    original = (REPO / "train" / "train.py").read_text()
    jobs = []
    for name in names or [*TRAIN_VARIANTS, *TRAIN_EDITS]:
        source = original
        for knob, value in TRAIN_VARIANTS.get(name, {}).items():
            source, n = re.subn(rf"^{knob} = \S+", f"{knob} = {value}", source, flags=re.M)
            assert n == 1, f"knob {knob} is not in train.py"
        for pattern, replacement in TRAIN_EDITS.get(name, []):
            source, n = re.subn(pattern, replacement, source, flags=re.M)
            assert n == 1, f"{pattern!r} is not in train.py"
        jobs.append((name, source, str(work / re.sub(r"\W+", "-", name))))
    env = {**os.environ, "NIGHTSHIFT_DATA": str(data_dir), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _DRIVER, str(REPO / "train")], input=json.dumps(jobs), env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"train.py's exports failed:\n{done.stderr[-3000:]}")
    return {name: operators_of(Path(out) / evaluate.ARTIFACT) for name, _, out in jobs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="prepared data for train.py (default: prepare.py's)")
    args = parser.parse_args()
    import prepare
    from schema import ALLOWED_HIGHER_ORDER, ALLOWED_OPERATORS
    listed = ALLOWED_OPERATORS | {f"higher_order.{name}" for name in ALLOWED_HIGHER_ORDER}
    with tempfile.TemporaryDirectory(prefix="nightshift-operators-") as tmp:
        found = {**train_py_operators(Path(tmp), args.data_dir or prepare.prepare()),
                 **standard_operators(Path(tmp))}
    for name, operators in found.items():
        print(f"{name}: {', '.join(sorted(operators))}")
    used = set().union(*found.values())
    print(f"\n{len(used)} operators used by {len(found)} exports, torch {torch.__version__}:")
    for operator in sorted(used):
        print(f"  {operator}{'' if operator in listed else '   NOT ON THE LIST'}")
    unused = sorted(set(ALLOWED_OPERATORS) - used)
    print(f"\nlisted: {len(ALLOWED_OPERATORS)}; used by no model of the catalogue: {len(unused)}"
          + (f" ({', '.join(unused)})" if unused else ""))


if __name__ == "__main__":
    main()
