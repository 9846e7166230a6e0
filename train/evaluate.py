"""The harness's evaluator for Nightshift's default target: it scores a trained model that it
did not write, with code the researcher cannot change. Protected (digested around every run).

    python train/evaluate.py                 # by hand: scores out/model.pt2 on the val split

Two halves, one per side of the fence:

- `save_model(model, context_len, out_dir, precision)` runs at the end of train.py, in the
  candidate's process: it exports the trained model as a graph (`torch.export`, the
  ExportedProgram format) to `$NIGHTSHIFT_OUT/model.pt2`. A graph of tensor operations and
  its weights: evaluating it runs none of the candidate's Python.
- `main()` is the evaluation step, run by the harness after training in a sandbox of its own
  (its own process and deadline; it sees this file and prepare.py, the training step's out
  folder read-only, and the data folder with the evaluation split; never train.py). It loads
  the graph with pickle refused, audits it, probes it, scores it, and writes
  `$NIGHTSHIFT_OUT/result.json`:

  val_bpb             bits per byte on the fixed windows of the split (`windows()`): the metric
  train_bpb           the same on a fixed sample of the training split, and
  generalization_gap  val_bpb - train_bpb: a model that has seen the evaluation bytes closes
                      this gap far more than any honest change can (the harness compares it
                      with the incumbent's; docs/integrity.md)
  probes              {"artifact", "shape", "causality"}: each {"ok": bool, "detail": str}
  fingerprint         per-window bits per byte on 128 fixed windows: two seeds of one commit
                      give different models, so near-identical fingerprints mean the script
                      ignores its seed (the harness compares them with the incumbent's)

A model that fails a probe gets no val_bpb; the harness gives the run the probe's verdict
(bad_artifact, lookahead). The exit code is 0 whenever the evaluator could judge the model.
"""
from __future__ import annotations

import contextlib
import json
import math
import operator
import os
# As in train.py: sleep, don't spin, between parallel regions (a spinning OpenMP thread whose
# partner was preempted makes every op wait for it on a shared CPU; measured 11x slower).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import pickle
import sys
import time
import zipfile
from pathlib import Path

import torch
import torch.nn.functional as F

from prepare import EVAL_BYTES, load_split, prepare

ARTIFACT = "model.pt2"
VOCAB = 256                      # byte-level: logits over 256 values
TRAIN_SAMPLE_BYTES = EVAL_BYTES // 8   # the training split's sample for the generalization gap
PROBE_WINDOWS = 256              # windows whose suffix is changed for the causality probe
FINGERPRINT_WINDOWS = 128
LOOKAHEAD_TOLERANCE = 1e-3       # nats: a causal model's prefix log-probs move by ~0 (measured 0.0)
# Windows per call when the graph takes any batch size: on CPU small batches stay in cache
# (2016 windows of 64 bytes: 0.91 s at 32, 1.00 s at 64, 1.28 s at 256, measured on 2 cores).
SCORING_BATCH = {"cpu": 32}
ALLOWED_HIGHER_ORDER = {"wrap_with_autocast", "wrap_with_set_grad_enabled", "cond", "while_loop",
                        "map_impl", "invoke_subgraph"}
DENIED_ATEN = {"from_file", "_print"}   # reads a file, writes the log: not part of a model


class Rejected(Exception):
    """The artifact cannot be evaluated; the message says why, for the run's reason."""


# ---------------------------------------------------------------- the training side

def save_model(model: torch.nn.Module, context_len: int, out_dir: str | os.PathLike,
               precision=contextlib.nullcontext) -> Path:
    """Export `model` (int64 byte windows (B, context_len) -> logits (B, context_len, 256)) to
    out_dir/model.pt2 for the evaluator, inside `precision` (an autocast context, so the graph
    computes as training did). The batch size is left free where the model allows it."""
    class Scored(torch.nn.Module):   # the precision becomes part of the graph
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            with precision():
                return self.inner(idx)

    device = next(model.parameters()).device
    example = (torch.zeros(2, context_len, dtype=torch.long, device=device),)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            try:
                batch = torch.export.Dim("batch", min=1, max=1 << 16)
                program = torch.export.export(Scored(model), example, dynamic_shapes=({0: batch},))
            except Exception:   # a model written for one batch size: the evaluator uses that one
                program = torch.export.export(Scored(model), example)
    finally:
        model.train(was_training)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ("tmp-" + ARTIFACT)
    torch.export.save(program, tmp)
    os.replace(tmp, out / ARTIFACT)
    return out / ARTIFACT


# ---------------------------------------------------------------- loading, refusing pickle

@contextlib.contextmanager
def no_pickle():
    """While loading: torch.load only in weights_only mode, and no pickle at all elsewhere. The
    export format can carry pickled tensors and constants, and unpickling runs code."""
    def refuse(*_args, **_kwargs):
        raise Rejected("it holds pickled data (unpickling runs code); save it with save_model")

    saved = (pickle.loads, pickle.load, torch.load, getattr(torch._C, "_pickle_load_obj", None))
    real_load = torch.load
    pickle.loads = pickle.load = refuse
    torch.load = lambda *args, **kwargs: real_load(*args, **{**kwargs, "weights_only": True})
    if saved[3] is not None:
        torch._C._pickle_load_obj = refuse
    try:
        yield
    finally:
        pickle.loads, pickle.load, torch.load = saved[:3]
        if saved[3] is not None:
            torch._C._pickle_load_obj = saved[3]


def load_model(path: Path):
    """The exported program at `path`, audited, or Rejected saying why not."""
    if not path.is_file():
        raise Rejected(f"no model at {path.name}: train.py must end with save_model(model, ...) "
                       f"(train/evaluate.py), which writes $NIGHTSHIFT_OUT/{ARTIFACT}")
    if not zipfile.is_zipfile(path):
        raise Rejected(f"{path.name} is not an exported program (not a zip archive)")
    _refuse_pickled_entries(path)
    try:
        with no_pickle():
            program = torch.export.load(str(path))
    except Rejected:
        raise
    except Exception as error:
        raise Rejected(f"{path.name} cannot be loaded: {type(error).__name__}: {_short(error)}") from None
    audit(program)
    return program


def _refuse_pickled_entries(path: Path) -> None:
    """Name the reason before loading: an archive whose weights or constants are pickled."""
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if not name.endswith("_config.json"):
                continue
            try:
                config = json.loads(archive.read(name)).get("config", {})
            except (ValueError, AttributeError):
                raise Rejected(f"{path.name}: {name} is not a valid payload config") from None
            pickled = [key for key, meta in config.items() if isinstance(meta, dict) and meta.get("use_pickle")]
            if pickled:
                raise Rejected(f"{path.name} holds pickled tensors ({', '.join(pickled[:3])}): unpickling "
                               f"runs code, so it is not loaded; save the model with save_model")


def audit(program) -> None:
    """Only tensor arithmetic: no file access, no printing, no randomness, no state kept
    between calls (a model that remembers its inputs could tell a probe from a score)."""
    signature = program.graph_signature
    if signature.buffers_to_mutate or getattr(signature, "user_inputs_to_mutate", None):
        raise Rejected("the graph changes its own buffers or inputs when called (a stateful model)")
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op in ("call_module", "call_method"):
                raise Rejected(f"the graph calls Python ({node.op} {node.target}), not only operators")
            if node.op == "call_function" and not _allowed(node):
                raise Rejected(f"the graph uses {node.target}, which is not model arithmetic "
                               f"(file access, printing, randomness or a custom operator)")


def _allowed(node: torch.fx.Node) -> bool:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        namespace, name = target.namespace, target._schema.name.split("::")[-1]
        if namespace not in ("aten", "prims") or name in DENIED_ATEN:
            return False
        return torch.Tag.nondeterministic_seeded not in target.tags or _no_randomness(node)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name() in ALLOWED_HIGHER_ORDER
    return getattr(target, "__module__", None) in ("_operator", "operator", "math") or target in (
        operator.getitem, math.floor, math.ceil)


def _no_randomness(node: torch.fx.Node) -> bool:
    """An op that can draw random numbers but does not here: attention or dropout with
    probability 0, or dropout outside training."""
    arguments = node.target._schema.arguments
    given = {a.name: a.default_value for a in arguments if a.has_default_value()}
    given |= dict(zip((a.name for a in arguments), node.args)) | dict(node.kwargs)
    if given.get("train") is False:
        return True
    probability = given.get("dropout_p", given.get("p"))
    return isinstance(probability, (int, float)) and probability == 0 and (
        "dropout_p" in given or "p" in given)


# ---------------------------------------------------------------- scoring

def windows(data: torch.Tensor, context_len: int, budget: int = EVAL_BYTES) -> torch.Tensor:
    """The fixed evaluation set: n = min(budget, len) // (context_len + 1) non-overlapping
    windows of context_len + 1 bytes, evenly spaced over the whole split (first at the start,
    last at the end). Every target position of every window is scored."""
    span = context_len + 1
    n = min(budget, len(data)) // span
    if n == 0:
        raise ValueError(f"the split has {len(data)} bytes, fewer than context_len+1={span}")
    starts = torch.arange(n) * (len(data) - span) // max(n - 1, 1)
    return data[starts[:, None] + torch.arange(span)].long()


class Scorer:
    """Calls the graph on batches of windows it accepts (any size, or the one it was made for)."""

    def __init__(self, program) -> None:
        self.module = program.module()
        (placeholder,) = [n for n in program.graph.nodes if n.op == "placeholder"
                          and n.name in set(program.graph_signature.user_inputs)] or [None]
        shape = getattr(placeholder.meta.get("val"), "shape", None) if placeholder else None
        if shape is None or len(shape) != 2 or placeholder.meta["val"].dtype != torch.long:
            raise Rejected("the model must take one int64 tensor of byte windows (B, T); "
                           f"it takes {_describe_inputs(program)}")
        self.context_len = int(shape[1])
        self.batch = shape[0] if isinstance(shape[0], int) else None
        tensors = list(program.state_dict.values()) + list(program.constants.values())
        self.device = next((t.device for t in tensors if isinstance(t, torch.Tensor)),
                           torch.device("cpu"))

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, 256) as float32 on the CPU; Rejected for any other output."""
        step = self.batch or SCORING_BATCH.get(self.device.type, 512)
        parts = []
        for i in range(0, len(x), step):
            chunk = x[i:i + step]
            pad = step - len(chunk) if self.batch else 0
            if pad:   # a graph made for one batch size: fill the last batch, drop the filler
                chunk = torch.cat([chunk, chunk[:1].expand(pad, -1)])
            try:
                out = self.module(chunk.to(self.device))
            except Exception as error:
                raise Rejected(f"calling the model failed: {type(error).__name__}: {_short(error)}") from None
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (len(chunk), self.context_len, VOCAB):
                shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise Rejected(f"the model returned {shape}, expected logits of shape (B, T, 256) = "
                               f"{(len(chunk), self.context_len, VOCAB)}")
            parts.append(out[:len(chunk) - pad].float().cpu())
        return torch.cat(parts)

    def bits_per_byte(self, data: torch.Tensor) -> tuple[float, torch.Tensor]:
        """(mean bits per byte over `data`'s windows, bits per byte of each window)."""
        per_window = []
        for i in range(0, len(data), 1024):
            chunk = data[i:i + 1024]
            nll = F.cross_entropy(self.logits(chunk[:, :-1]).reshape(-1, VOCAB), chunk[:, 1:].reshape(-1),
                                  reduction="none").double()
            per_window.append(nll.view(len(chunk), -1).mean(1) / math.log(2))
        per_window = torch.cat(per_window)
        return float(per_window.mean()), per_window


def causality(scorer: Scorer, val: torch.Tensor, seed: int) -> dict:
    """Change every byte after a random cut in each of some windows: the predictions before
    the cut must not move. Original and changed windows share each call, so the arithmetic is
    the same for both; the cut points come from fresh randomness, unknown to the model."""
    rng = torch.Generator().manual_seed(seed)
    count = min(PROBE_WINDOWS, len(val))
    picked = torch.randperm(len(val), generator=rng)[:count]
    x = val[picked, :-1]
    donor = val[torch.randint(len(val), (count,), generator=rng), :-1]
    T = x.shape[1]
    cuts = torch.randint(1, T, (count,), generator=rng)
    after = torch.arange(T)[None, :] >= cuts[:, None]
    changed = torch.where(after, donor, x)
    same = changed.eq(x) & after
    changed = torch.where(same, (changed + 1) % VOCAB, changed)   # every byte after the cut differs
    logp = torch.log_softmax(scorer.logits(torch.cat([x, changed])), dim=-1)
    before = (~after)[:, :, None]
    moved = ((logp[:count] - logp[count:]).abs() * before).amax(dim=(1, 2))
    worst = int(moved.argmax())
    detail = (f"{count} windows, the bytes after a random position changed: predictions before it "
              f"moved by at most {float(moved[worst]):.3g} nats")
    if float(moved[worst]) > LOOKAHEAD_TOLERANCE:
        leaking = int((moved > LOOKAHEAD_TOLERANCE).sum())
        return {"ok": False, "detail": f"{detail} (tolerance {LOOKAHEAD_TOLERANCE:g}) in {leaking} of "
                f"{count} windows, e.g. position < {int(cuts[worst])} of {T}: the model sees bytes "
                f"it predicts"}
    return {"ok": True, "detail": detail}


def evaluate(artifact: Path, data_dir: Path, split: str, seed: int) -> dict:
    """The evaluation's result.json (probes, and the figures when every probe passed)."""
    t0 = time.time()
    probes: dict[str, dict] = {}
    result = {"split": split, "probes": probes, "probe_seed": seed}
    try:
        program = load_model(artifact)
        scorer = Scorer(program)
        probes["artifact"] = {"ok": True, "detail": f"{artifact.name}: an exported graph taking "
                              f"(B, {scorer.context_len}) bytes, audited: operators only"}
        val = windows(load_split(data_dir, split), scorer.context_len)
        sample = scorer.logits(val[:2, :-1])
        if not torch.isfinite(sample).all():
            raise Rejected("the model's logits are not finite")
        probes["shape"] = {"ok": True, "detail": f"logits (B, {scorer.context_len}, {VOCAB}), finite"}
        probes["causality"] = causality(scorer, val, seed)
        if not probes["causality"]["ok"]:
            return result
        val_bpb, per_window = scorer.bits_per_byte(val)
        train_bpb, _ = scorer.bits_per_byte(windows(load_split(data_dir, "train"), scorer.context_len,
                                                    TRAIN_SAMPLE_BYTES))
    except Rejected as rejected:
        failed = "artifact" if "artifact" not in probes else "shape"
        probes[failed] = {"ok": False, "detail": str(rejected)}
        return result
    picks = torch.linspace(0, len(per_window) - 1, min(FINGERPRINT_WINDOWS, len(per_window))).long()
    result.update(val_bpb=val_bpb, train_bpb=train_bpb, generalization_gap=val_bpb - train_bpb,
                  fingerprint=[round(float(v), 5) for v in per_window[picks]],
                  context_len=scorer.context_len, windows=len(val), eval_seconds=time.time() - t0)
    return result


def main() -> int:
    out = Path(os.environ.get("NIGHTSHIFT_OUT", "out-eval"))
    train_out = Path(os.environ.get("NIGHTSHIFT_TRAIN_OUT", "out"))
    split = os.environ.get("NIGHTSHIFT_SPLIT", "val")
    data_dir = Path(os.environ.get("NIGHTSHIFT_DATA") or prepare())
    torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    seed = int.from_bytes(os.urandom(4), "little")
    result = evaluate(train_out / ARTIFACT, data_dir, split, seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json.tmp").write_text(json.dumps(result, indent=2))
    os.replace(out / "result.json.tmp", out / "result.json")
    for name, probe in result["probes"].items():
        print(f"probe {name}: {'ok' if probe['ok'] else 'FAILED'}: {probe['detail']}")
    print("---")
    for key in ("val_bpb", "train_bpb", "generalization_gap", "eval_seconds"):
        if key in result:
            print(f"{key + ':':<20}{result[key]:.6g}")
    return 0


def _describe_inputs(program) -> str:
    shapes = [tuple(n.meta["val"].shape) if hasattr(n.meta.get("val"), "shape") else n.name
              for n in program.graph.nodes if n.op == "placeholder"
              and n.name in set(program.graph_signature.user_inputs)]
    return ", ".join(map(str, shapes)) or "no inputs"


def _short(error: BaseException, limit: int = 300) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[:limit] + " ..."


if __name__ == "__main__":
    sys.exit(main())
