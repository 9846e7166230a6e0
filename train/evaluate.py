"""The harness's evaluator for Nightshift's default target: it scores a trained model that it
did not write, with code the researcher cannot change. Protected (digested around every run).

    python train/evaluate.py                 # by hand: scores out/model.pt2 on the val split

Two halves, one per side of the fence:

- `save_model(model, context_len, out_dir, precision)` runs at the end of train.py, in the
  candidate's process: it exports the trained model as a graph (`torch.export`, the
  ExportedProgram format) to `$NIGHTSHIFT_OUT/model.pt2`. A graph of tensor operations and
  its weights: evaluating it runs none of the candidate's Python.
- `main()` is the evaluation step, run by the harness after training in a sandbox of its own
  (its own process and deadline; it sees the protected files, the training step's out
  folder read-only, and the data folder with the evaluation split; never train.py). The
  artifact is hostile input: it is read and run in a process apart (model_process.py), where
  artifact.py validates it against a strict schema, graph.py runs its graph with an
  interpreter of our own (torch's loader never reads it) and guard.py refuses any code the
  read or the model would run; this process sends it windows and receives logits, probes the
  model, scores it, and writes `$NIGHTSHIFT_OUT/result.json`:

  val_bpb             bits per byte on windows of the split drawn from the night's secret
                      (`Draw`; never a public rule): the metric
  train_bpb           the same on a sample of the training split drawn the same way, and
  generalization_gap  val_bpb - train_bpb: a model that has seen the evaluation bytes closes
                      this gap far more than any honest change can (the harness compares it
                      with the incumbent's; docs/integrity.md)
  probes              {"artifact", "shape", "causality", "memorization"}: each {"ok": bool,
                      "detail": str}; a failure while scoring is "scoring", a refusal "guard"
  memorization_gain   how much better the scored windows score than the same text at fresh
  memorization_p      offsets, and how likely an honest model leans that far (the probe)
  fingerprint         per-window bits per byte on 128 windows drawn from the secret (the same
                      for every run of the night): two seeds of one commit
                      give different models, so near-identical fingerprints mean the script
                      ignores its seed (the harness compares them with the incumbent's)

A model that fails a probe gets no val_bpb; the harness gives the run the probe's verdict
(bad_artifact, lookahead, leak for memorization). The exit code is 0 whenever the evaluator
could judge the model.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
# As in train.py: sleep, don't spin, between parallel regions (a spinning OpenMP thread whose
# partner was preempted makes every op wait for it on a shared CPU; measured 11x slower).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from model_process import GuardRefusal, Loaded, ModelProcess, keep_freed_memory
from prepare import EVAL_BYTES, load_split, prepare
from schema import Rejected

ARTIFACT = "model.pt2"
VOCAB = 256                      # byte-level: logits over 256 values
TRAIN_SAMPLE_BYTES = EVAL_BYTES // 8   # the training split's sample for the generalization gap
PROBE_WINDOWS = 256              # windows whose suffix is changed for the causality probe
FINGERPRINT_WINDOWS = 128
SECRET_VARIABLE = "NIGHTSHIFT_EVAL_SECRET"   # hex; set by the harness for the evaluation step alone
LOOKAHEAD_TOLERANCE = 1e-3       # nats: a causal model's prefix log-probs move by ~0 (measured 0.0)
# Windows per call when the graph takes any batch size: on CPU small batches stay in cache
# (2016 windows of 64 bytes: 0.91 s at 32, 1.00 s at 64, 1.28 s at 256, measured on 2 cores).
SCORING_BATCH = {"cpu": 32}
DEADLINE_MARGIN_S = 5.0          # left of the step's deadline to end a hung model and write the result
# Memorization: the scored windows scored again at fresh offsets (the same text, another cut).
# For an honest model the fresh cut is as often better as worse (both are arbitrary places in
# the text); one that has stored the scored windows (were the secret known), or their answers
# keyed by their prefixes, scores those better on every window it stored, by far. Flagged when the differences
# lean to "fresh is worse" so far that an honest model would do it with probability under
# MEMORIZATION_P (Wilcoxon's signed-rank test: the windows whose two cuts differ most count
# most, and no assumption is made on how far apart they score), and by MEMORIZATION_TOLERANCE
# on average, each window's difference clipped so a few far off (a shift onto a repeated
# line) do not decide it. 1024 windows, not 512: at 512 a lookup of 10 % of the windows (+0.13 to
# +0.18 bits per byte on average, three times the tolerance) was never flagged (p 2e-3 to 1e-4),
# and one of 30 % carried by a model trained for 26 steps passed at p 5e-6 (CI, a loaded machine);
# at 1024 the 30 % lookup gives p < 1e-22 and the 10 % one 2e-9 to 3e-6 (tests/train's models, 3
# seeds each). The cost: 16 more calls of 32 windows besides the 104 of an evaluation.
MEMORIZATION_WINDOWS = 1024
MEMORIZATION_TOLERANCE = 0.05    # bits per byte
MEMORIZATION_P = 1e-6
MEMORIZATION_CLIP = 2.0          # bits per byte


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


# ---------------------------------------------------------------- where the windows lie

@dataclass(frozen=True)
class Draw:
    """Where the windows the evaluator scores lie: drawn from the night's secret, never by a
    public rule. A model that stored the windows a fixed rule picks (or the gap's training
    sample, to set its generalization gap where it likes) would know what is scored; none can
    know or learn these. The harness draws the secret once per tag, keeps it where no run can
    read it, and hands it to the evaluation step alone (NIGHTSHIFT_EVAL_SECRET:
    agent/run/grading.py).

    The same windows for every run of the night, whatever its seed: a candidate and its
    incumbent are scored on the same windows, so their paired difference keeps its low noise,
    and one run's seed-to-seed spread stays the model's own: drawn per run, it was 0.009 to
    0.010 bits per byte against 0.002 to 0.003 per night (six seeds of train.py,
    benchmarks/grader/windows.py), a noise the keep rule would have had to see through."""

    secret: bytes
    given: bool = True           # False: fresh randomness (by hand, no secret given)

    @classmethod
    def from_environment(cls, environ: dict) -> "Draw":
        text = environ.get(SECRET_VARIABLE, "")
        if text:
            return cls(bytes.fromhex(text) if _is_hex(text) else text.encode())
        return cls(os.urandom(32), given=False)

    def generator(self, purpose: str) -> torch.Generator:
        """A generator of its own for each purpose ("val", "train", "fingerprint")."""
        digest = hashlib.sha256(self.secret + b"\0" + purpose.encode()).digest()
        return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def window_starts(length: int, context_len: int, budget: int, rng: torch.Generator) -> torch.Tensor:
    """Where the windows start: n = min(budget, length) // (context_len + 1) of them, one in each
    of n equal strata of the split, at an offset inside its stratum drawn from `rng`. Stratified,
    so the whole split stays covered and the score's variance stays that of evenly spaced
    windows; never overlapping. A split shorter than the budget is tiled: every byte scored."""
    span = context_len + 1
    n = min(budget, length) // span
    if n == 0:
        raise ValueError(f"the split has {length} bytes, fewer than context_len+1={span}")
    edges = torch.arange(n + 1) * length // n        # stratum i is [edges[i], edges[i + 1]), >= span bytes
    room = edges[1:] - edges[:-1] - span + 1          # where a window may start inside its stratum
    return edges[:-1] + (torch.rand(n, generator=rng, dtype=torch.float64) * room).long()


def windows(data: torch.Tensor, context_len: int, budget: int, rng: torch.Generator) -> torch.Tensor:
    """The windows of context_len + 1 bytes at `window_starts`. Every target position of every
    window is scored."""
    return _cut(data, window_starts(len(data), context_len, budget, rng), context_len + 1)


def _cut(data: torch.Tensor, starts: torch.Tensor, span: int) -> torch.Tensor:
    return data[starts[:, None] + torch.arange(span)].long()


def _is_hex(text: str) -> bool:
    return len(text) % 2 == 0 and all(c in "0123456789abcdefABCDEF" for c in text)


# ---------------------------------------------------------------- scoring

class Scorer:
    """Calls the model on batches of windows it accepts (any size, or the one it was made for)."""

    def __init__(self, model: Callable[[torch.Tensor], torch.Tensor], shape: Loaded) -> None:
        self.module = model
        self.batch, self.context_len = shape.batch, shape.context_len
        self.most = shape.max_batch   # a free batch size the export bounded
        self.device = shape.device

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, 256) as float32 on the CPU; Rejected for any other output.

        Every call gets the same kind of input: `step` windows (the last batch filled up, the
        filler dropped), in storage of their own. A view of the caller's tensor would tell the
        model where it was called from (a scored batch's rows are T + 1 bytes apart, a probe's
        T) and let it read each window's target byte beyond its end."""
        step = self.batch or min(SCORING_BATCH.get(self.device, 512), self.most or 1 << 30)
        parts = []
        for i in range(0, len(x), step):
            chunk = x[i:i + step]
            pad = step - len(chunk)
            if pad:
                chunk = torch.cat([chunk, chunk[:1].expand(pad, -1)])
            try:
                out = self.module(chunk.clone(memory_format=torch.contiguous_format))
                if not isinstance(out, torch.Tensor) or tuple(out.shape) != (step, self.context_len, VOCAB):
                    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                    raise Rejected(f"the model returned {shape}, expected logits of shape (B, T, 256) = "
                                   f"{(step, self.context_len, VOCAB)}")
                parts.append(out[:step - pad].float().cpu())
            except Rejected:
                raise
            except Exception as error:
                raise Rejected(f"calling the model failed: {type(error).__name__}: {_short(error)}") from None
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


def load_model(path: Path):
    """The artifact at `path` as a graph.Model in this process, validated and bound under the
    guard, or Rejected (by hand and in tests; `evaluate` runs the model in a process apart)."""
    import artifact
    from guard import Guard
    with Guard(readable=[Path(path)]):
        return artifact.read(Path(path))


def memorization(scorer: Scorer, data: torch.Tensor, starts: torch.Tensor, per_window: torch.Tensor,
                 seed: int) -> dict:
    """Some of the scored windows (at `starts`, scored `per_window`) again, each moved by a fresh
    random offset (1 to context_len bytes): mostly the same text, cut elsewhere. An honest model
    scores them like the scored ones; a model fitted to the scored windows (a lookup of their
    answers, keyed by their prefixes: were the secret known) scores those far better. The
    offsets are fresh each evaluation, so the model cannot know them. Paired per window, so the
    check needs no incumbent."""
    span = scorer.context_len + 1
    rng = torch.Generator().manual_seed(seed ^ 0x5EED)
    count = min(MEMORIZATION_WINDOWS, len(starts))
    picked = torch.randperm(len(starts), generator=rng)[:count]
    shift = torch.randint(1, span, (count,), generator=rng)
    moved = starts[picked] + shift
    moved = torch.where(moved + span <= len(data), moved, (starts[picked] - shift).clamp(min=0))
    _, fresh = scorer.bits_per_byte(_cut(data, moved, span))
    difference = (fresh - per_window[picked]).clamp(-MEMORIZATION_CLIP, MEMORIZATION_CLIP)
    worse, better = int((difference > 0).sum()), int((difference < 0).sum())
    mean, chance = float(difference.mean()), signed_rank_test(difference)
    detail = (f"{count} of the windows moved by a fresh offset: worse on {worse}, better on {better}, "
              f"{mean:+.3f} bits per byte on average (each clipped to ±{MEMORIZATION_CLIP:g}); "
              f"an honest model leans that far with probability {chance:.1g}")
    figures = {"mean": round(mean, 5), "p": chance, "worse": worse, "better": better}
    if mean > MEMORIZATION_TOLERANCE and chance < MEMORIZATION_P:
        return {"ok": False, "detail": f"{detail}: the model knows the scored windows, not the text "
                f"(flagged past {MEMORIZATION_TOLERANCE} bits per byte and probability {MEMORIZATION_P:g})",
                **figures}
    return {"ok": True, "detail": detail, **figures}


def signed_rank_test(difference: torch.Tensor) -> float:
    """One-sided p-value of Wilcoxon's signed-rank test that `difference` leans positive, by the
    normal approximation (hundreds of windows); zeros dropped, ties ranked by their average."""
    d = difference[difference != 0].double()
    n = len(d)
    if n == 0:
        return 1.0
    magnitude = d.abs()
    order = magnitude.argsort()
    ranks = torch.empty(n, dtype=torch.float64)
    ranks[order] = torch.arange(1, n + 1, dtype=torch.float64)
    for value in magnitude[order][:-1][magnitude[order].diff() == 0].unique():   # ties: average rank
        tied = magnitude == value
        ranks[tied] = ranks[tied].mean()
    positive = float(ranks[d > 0].sum())
    z = (positive - n * (n + 1) / 4) / math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return 0.5 * math.erfc(z / math.sqrt(2))


def evaluate(artifact_path: Path, data_dir: Path, split: str, seed: int, *, draw: Draw | None = None,
             model: ModelProcess | None = None) -> dict:
    """The evaluation's result.json (probes, and the figures when every probe passed).

    `draw` says where the scored windows lie (default: fresh randomness); `seed` seeds the
    probes' own randomness (fresh each evaluation). The model runs in `model`, a process apart
    (by default one forked here); it reads the artifact under the guard, and this process sends
    it windows and scores what comes back. A refusal by the guard is the probe "guard"; a model
    process that crashes, hangs past the deadline or fails is the probe of the stage it was in,
    and a model that fails once its shape has passed fails "scoring", so a probe that passed is
    never recorded as failed. Nothing of the draw is written: no secret, no window's place."""
    t0 = time.time()
    draw = draw or Draw.from_environment({})
    probes: dict[str, dict] = {}
    result = {"split": split, "probes": probes, "probe_seed": seed,
              "windows_drawn": "from the night's secret" if draw.given else "fresh (no secret given)"}
    stage = "artifact"
    with model or ModelProcess.fork() as process:
        held_out, train = load_split(data_dir, split), load_split(data_dir, "train")   # here, never there
        try:
            scorer = Scorer(process, process.load(artifact_path))
            probes["artifact"] = {"ok": True, "detail": f"{artifact_path.name}: an exported graph taking "
                                  f"(B, {scorer.context_len}) bytes, validated and bound: operators only, "
                                  f"run in a process apart"}
            stage = "shape"
            T, span = scorer.context_len, scorer.context_len + 1
            starts = window_starts(len(held_out), T, EVAL_BYTES, draw.generator("val"))
            val = _cut(held_out, starts, span)
            if not torch.isfinite(scorer.logits(val[:2, :-1])).all():
                raise Rejected("the model's logits are not finite")
            probes["shape"] = {"ok": True, "detail": f"logits (B, {T}, {VOCAB}), finite"}
            stage = "scoring"
            probes["causality"] = causality(scorer, val, seed)
            if not probes["causality"]["ok"]:
                return result
            val_bpb, per_window = scorer.bits_per_byte(val)
            probes["memorization"] = memorization(scorer, held_out, starts, per_window, seed)
            result.update(memorization_gain=probes["memorization"]["mean"],
                          memorization_p=probes["memorization"]["p"])
            if not probes["memorization"]["ok"]:
                return result
            train_bpb, _ = scorer.bits_per_byte(windows(train, T, TRAIN_SAMPLE_BYTES, draw.generator("train")))
            _, fingerprint = scorer.bits_per_byte(windows(held_out, T, FINGERPRINT_WINDOWS * span,
                                                          draw.generator("fingerprint")))
        except Exception as error:   # Rejected from the model process, or what scoring its logits raised
            detail = str(error) if isinstance(error, Rejected) else f"{type(error).__name__}: {_short(error)}"
            probes["guard" if isinstance(error, GuardRefusal) else stage] = {"ok": False, "detail": detail}
            return result
    result.update(val_bpb=val_bpb, train_bpb=train_bpb, generalization_gap=val_bpb - train_bpb,
                  fingerprint=[round(float(v), 5) for v in fingerprint],
                  context_len=scorer.context_len, windows=len(val), eval_seconds=time.time() - t0)
    return result


def main() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # The step's deadline is its budget (the harness gives the evaluation budget + grace, no
    # grace of its own); a model that has not answered by then, less a margin, is ended.
    budget = os.environ.get("NIGHTSHIFT_BUDGET_S")
    deadline = time.monotonic() + float(budget) - DEADLINE_MARGIN_S if budget else None
    # First, before anything here computes: a process whose OpenMP threads have run cannot
    # fork a child that uses them (model_process.py), and nothing of the data is read yet.
    model = ModelProcess.fork(threads=cores, deadline=deadline)
    keep_freed_memory()   # the scorer's logits are MBs too
    out = Path(os.environ.get("NIGHTSHIFT_OUT", "out-eval"))
    train_out = Path(os.environ.get("NIGHTSHIFT_TRAIN_OUT", "out"))
    split = os.environ.get("NIGHTSHIFT_SPLIT", "val")
    data_dir = Path(os.environ.get("NIGHTSHIFT_DATA") or prepare())
    torch.set_num_threads(cores)
    seed = int.from_bytes(os.urandom(4), "little")
    result = evaluate(train_out / ARTIFACT, data_dir, split, seed, draw=Draw.from_environment(os.environ),
                      model=model)
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


def _short(error: BaseException, limit: int = 300) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[:limit] + " ..."


if __name__ == "__main__":
    sys.exit(main())
