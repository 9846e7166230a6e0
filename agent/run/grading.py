"""The grader apart: what each step of a run may see, and the evaluation step's spec.

A run of a program with `evaluate:` is two sandboxed steps (cluster.execute): training runs the
candidate's commit and sees only the training split; evaluation runs the program's evaluator
over a snapshot holding the protected files alone (never the target), sees the training
step's out folder read-only and the split it scores, and computes the metric.

The splits come from the prepared data's meta.json (`"splits": {"train": "train.bin", ...}`,
written by the bundled prepare.py): the files of the splits a step may not see are laid over
with watched tripwires (sandbox.tripwire), and so are the sources the held-out splits were
cut from (`"held_out_sources"`: the standard-library packages of the default corpus in every
Python installation, a corpus's val and test files). Data without that declaration is shown
whole, and the run's provenance says so.

Where the evaluator's windows lie is drawn from a secret (train/evaluate.py `Draw`): one per
results folder (a night's tag and its resumes; a replay's or an ablation's own), made here
with os.urandom, kept in that folder (hidden from every run) with mode 0600, and handed to the
evaluation step alone as NIGHTSHIFT_EVAL_SECRET. Never to the training step, a log, the
ledger or a researcher.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Mapping

from agent.workspace.repo import remove_snapshot
from sandbox import RunSpec
from sandbox.digest import digest_files
from sandbox.protocol import HeldOut, HiddenFile
from sandbox.trees import read_only_tree

TRAINING_SEES = ("train",)
SECRET_VARIABLE = "NIGHTSHIFT_EVAL_SECRET"   # train/evaluate.py reads it (SECRET_VARIABLE there too)
SECRET_FILE = "evaluation-secret"
_SECRET = re.compile(r"[0-9a-f]{64}\Z")


def evaluation_secret(folder: Path) -> str:
    """The secret the evaluation steps of the runs recorded in `folder` draw their windows
    from (64 hex digits): read where an earlier invocation left it (a resumed night keeps its
    windows), else drawn now with os.urandom and written with mode 0600, never replacing one
    that is there (two harnesses of one tag are refused by its lock; a half-written file, left
    by a kill before any run used it, is drawn again)."""
    path = Path(folder) / SECRET_FILE
    if path.is_file() and _SECRET.match(path.read_text().strip()):
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = os.urandom(32).hex()
    staging = path.with_name(f".{SECRET_FILE}.{os.getpid()}")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, secret.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(staging, path)
    return secret


def measurement_note(evaluate: str | None, edits: str, target: str) -> tuple[bool | None, str]:
    """How the metric is made, said plainly for `check` and the start of `run`: (True, ...)
    when an evaluation step measures it apart, (None, ...) with what the researcher could
    bend when the metric is the training script's own."""
    if evaluate:
        return True, (f"measured apart: `{evaluate}` scores what training leaves, in a sandbox of "
                      f"its own that holds only the protected files (never {target})")
    if edits == "knobs":
        return None, ("the training script reports its own metric; edits are limited to the "
                      "knobs' values, so the researcher cannot rewrite how it is measured (unless a "
                      "knob itself changes the evaluation); `evaluate:` would measure it apart")
    return None, (f"the metric comes from code the researcher may edit ({target}, no evaluate:): an "
                  f"LLM researcher can change how it is measured, and a bent number passes the keep "
                  f"rule like a real one. Add `evaluate:` (a protected command that scores the "
                  f"training outputs) or `edits: knobs`")


def hidden_files(meta: Mapping, visible: tuple[str, ...]) -> tuple[HiddenFile, ...]:
    """The files of every declared split not in `visible`, as the sandbox hides them."""
    splits = meta.get("splits") if isinstance(meta, Mapping) else None
    if not isinstance(splits, Mapping):
        return ()
    return tuple(HiddenFile(str(name), str(split)) for split, name in sorted(splits.items())
                 if split not in visible and isinstance(name, str))


def held_out(meta: Mapping) -> HeldOut:
    """Where else the held-out bytes lie (prepare.py's `held_out_sources`), hidden from both
    steps: training must not see them, and the evaluator has no need to."""
    sources = meta.get("held_out_sources") if isinstance(meta, Mapping) else None
    if not isinstance(sources, Mapping):
        return HeldOut()
    strings = lambda key: tuple(str(x) for x in sources.get(key) or () if isinstance(x, str))   # noqa: E731
    return HeldOut(units=strings("units"), paths=strings("paths"), siblings=bool(sources.get("siblings")))


def evaluation_sees(split: str) -> tuple[str, ...]:
    """The evaluation step scores `split` and samples the training split (the leak probe);
    the other held-out split stays hidden (research never sees test, a replay never val)."""
    return ("train", split)


def splits_note(meta: Mapping) -> str:
    """For provenance: how the splits were kept apart."""
    splits = meta.get("splits") if isinstance(meta, Mapping) else None
    if not isinstance(splits, Mapping):
        return "the data declares no splits (meta.json has no 'splits'): every step sees all of it"
    sources = held_out(meta)
    where = (f"; the held-out bytes' sources are tripwires too ({', '.join(sources.units)} of every "
             f"Python installation{f', {len(sources.paths)} more files' if sources.paths else ''})"
             if sources.units or sources.paths else "")
    return (f"training sees {', '.join(s for s in splits if s in TRAINING_SEES)}; "
            f"the evaluation sees the split it scores and train; the others are tripwires{where}")


def evaluator_snapshot(snapshots_dir: Path, commit_snapshot: Path, protected: tuple[str, ...]) -> Path:
    """A read-only folder holding the protected files of `commit_snapshot` alone, made once
    per set of contents (the gate keeps protected files equal across a night's commits)."""
    digests = digest_files(commit_snapshot, protected)
    name = "evaluator-" + hashlib.sha256(repr(sorted(digests.items())).encode()).hexdigest()[:12]
    dest = Path(snapshots_dir) / name
    if (dest / ".nightshift-complete").exists():
        return dest
    staging = Path(snapshots_dir) / f".{name}.partial"
    if staging.exists():
        remove_snapshot(staging)
    staging.mkdir(parents=True)
    for rel in protected:
        source = Path(commit_snapshot) / rel
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True)
        elif source.is_file():
            shutil.copy2(source, target)
    (staging / ".nightshift-complete").write_text(name)
    read_only_tree(staging)
    if dest.exists():
        remove_snapshot(dest)
    staging.rename(dest)
    return dest


def evaluation_spec(train: RunSpec, *, command: str, snapshot: Path, meta: Mapping,
                    deadline_s: float, secret: str) -> RunSpec:
    """The evaluation step of the run whose training step is `train`: same seed, data, limits
    and environment, and the secret its windows are drawn from (which `train` never carries);
    the evaluator's snapshot; its own out folder and deadline; the training outputs read-only;
    the split it scores and train visible, the rest hidden (the held-out sources stay hidden
    too, as `train` has them)."""
    out_dir = train.out_dir.parent / "eval" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(
        train, command=command, snapshot_dir=snapshot, out_dir=out_dir, budget_s=deadline_s,
        grace_s=0.0, metric_required=True, metrics_pattern=None, result_file="result.json",
        hidden=hidden_files(meta, evaluation_sees(train.split)), train_out_dir=train.out_dir,
        env={**train.env, SECRET_VARIABLE: secret})
