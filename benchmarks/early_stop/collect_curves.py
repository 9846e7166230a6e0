"""Paired learning curves of real train.py runs: the data benchmarks/early_stop/early_stop_replay.py replays.

    python -m benchmarks.early_stop.collect_curves OUT.jsonl [--pairs 60] [--budget 30s] [--per-seed 5]
                                        [--null-every 5] [--first-seed 1000] [--only BATCH_SIZE]

Every run goes through the harness itself: a throw-away copy of the bundled target, the local
sandbox, the training step then the protected evaluator, and the curve the harness reads live
from train.py's step lines (agent/run/live.py, recorded on the run's run_finished). One seed
at a time, as a night pairs them: the incumbent (train.py as it is) once, then `--per-seed`
candidates on the same seed, each a knob change of the kinds a night tries (learning rates,
schedule, width, depth, optimizer, regularisation, batch shape), cycling through CHANGES; every
`--null-every`-th candidate changes nothing that matters (a comment: the incumbent's code, so
the pair differs by the run-to-run jitter alone), for the replay's false-keep count. No run is
stopped early: every one runs its whole budget.

Each pair is appended to OUT as soon as its candidate finished (the replay's format: its
--help), so the file grows as the collection goes and a collection cut short keeps what it
measured; run it again with the same OUT and it skips the pairs already there. Progress, one
line per run, goes to stdout with the time left.

Run it on idle cores (2 CPU cores: a 30-s budget is about 40 s a run with start-up, export
and evaluation; the defaults, 60 pairs on 12 seeds, are 72 runs, about 50 minutes): load is
the noise here, and other work on the machine makes every run's steps slower by a different
amount.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


from agent.night.session import build_session
from agent.program import load_program, parse_duration
from agent.record.events import Direction, Role, RunFinished
from agent.run.observer import QuietObserver
from agent.target.knobs import knob_values, set_knobs
from tests.loop_helpers import project_repo

TARGET = "train/train.py"
NULL = "null: a comment line"
# What a night tries, one change each (values inside train.py's search spaces). Learning rate,
# schedule and width are where curves cross: a lower rate or a wider model is behind early and
# may be ahead at the end; a batch or context change cannot be paired (other steps, other loss).
CHANGES: list[tuple[str, dict]] = [
    ("LR 1e-2 -> 3e-3", {"LR": 3e-3}),
    ("N_EMBD 128 -> 192", {"N_EMBD": 192}),
    ("WARMDOWN_FRAC 0.6 -> 0.3", {"WARMDOWN_FRAC": 0.3}),
    ("MUON_LR 0.02 -> 0.05", {"MUON_LR": 0.05}),
    ("N_LAYER 2 -> 3", {"N_LAYER": 3}),
    ("EMBED_LR 0.2 -> 0.05", {"EMBED_LR": 0.05}),
    ("LR 1e-2 -> 2.5e-2", {"LR": 2.5e-2}),
    ("N_EMBD 128 -> 64", {"N_EMBD": 64}),
    ("WARMDOWN_FRAC 0.6 -> 0.8", {"WARMDOWN_FRAC": 0.8}),
    ("OPTIMIZER muon -> adamw", {"OPTIMIZER": "adamw"}),
    ("MUON_LR 0.02 -> 0.006", {"MUON_LR": 0.006}),
    ("WEIGHT_DECAY 0.1 -> 0.0", {"WEIGHT_DECAY": 0.0}),
    ("N_EMBD 128 -> 256", {"N_EMBD": 256}),
    ("WARMUP_FRAC 0.02 -> 0.08", {"WARMUP_FRAC": 0.08}),
    ("MLP_RATIO 4 -> 2", {"MLP_RATIO": 2}),
    ("EMBED_LR 0.2 -> 0.6", {"EMBED_LR": 0.6}),
    ("N_LAYER 2 -> 1", {"N_LAYER": 1}),
    ("BETA2 0.95 -> 0.99", {"BETA2": 0.99}),
    ("HEAD_DIM 64 -> 32", {"HEAD_DIM": 32}),
    ("GRAD_CLIP 1.0 -> 0.3", {"GRAD_CLIP": 0.3}),
    ("WEIGHT_DECAY 0.1 -> 0.3", {"WEIGHT_DECAY": 0.3}),
    ("BATCH_SIZE 64 -> 32", {"BATCH_SIZE": 32}),
    ("CONTEXT_LEN 64 -> 128", {"CONTEXT_LEN": 128}),
    # collected apart (`--only BATCH_SIZE`): whether a gap between batch sizes at equal training
    # time carries over as any other change's does (issue 40: a batch of 8 was never stopped)
    ("BATCH_SIZE 64 -> 8", {"BATCH_SIZE": 8}),
    ("BATCH_SIZE 64 -> 16", {"BATCH_SIZE": 16}),
    ("BATCH_SIZE 64 -> 128", {"BATCH_SIZE": 128}),
]


def plan(pairs: int, per_seed: int, null_every: int, first_seed: int,
         only: str | None = None) -> list[tuple[int, str]]:
    """(seed, change) of every pair, in the order they run (`only`: the changes whose name
    starts with it, the last three by default excluded as they are collected apart)."""
    names = [name for name, _ in CHANGES if name.startswith(only)] if only else \
        [name for name, _ in CHANGES[:-3]]
    if not names:
        raise SystemExit(f"--only {only!r} names no change; the changes: {', '.join(n for n, _ in CHANGES)}")
    out, changes = [], iter(range(10**6))
    for k in range(pairs):
        seed = first_seed + k // per_seed
        if null_every and (k + 1) % null_every == 0:
            out.append((seed, NULL))
        else:
            out.append((seed, names[next(changes) % len(names)]))
    return out


def source_of(change: str, incumbent: str) -> str:
    if change == NULL:
        return incumbent.replace("# ---------------------------------------------------------------- knobs",
                                 "# ---------------------------------------------------------------- knobs\n"
                                 "# (a comment: this candidate changes nothing that matters)", 1)
    values = dict(CHANGES)[change]
    assert all(name in knob_values(incumbent) for name in values), change
    return set_knobs(incumbent, values)


def run_record(run: RunFinished) -> dict:
    """One run as the replay reads it, with where its time went (what a stop would save)."""
    curve = run.curve
    metrics = run.metrics
    return {"final": run.metric, "status": run.status.value,
            "run_s": round(run.ended - run.started, 2) if run.started and run.ended else None,
            "train_s": metrics.get("train_seconds"), "export_s": metrics.get("export_seconds"),
            "eval_s": run.eval_duration_s, "steps": metrics.get("steps"),
            "batch_shape": curve.batch_shape if curve else None,
            "total_steps": curve.total_steps if curve else None,
            "points": [[p.fraction, p.step, p.loss, p.lr] for p in curve.points] if curve else []}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("out", type=Path, help="the pairs file to append to (JSON lines)")
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--budget", default="30s", help="each run's training budget")
    parser.add_argument("--per-seed", type=int, default=5, help="candidates paired on one incumbent run")
    parser.add_argument("--null-every", type=int, default=5, help="every n-th candidate is a null")
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--only", help="only the changes whose name starts with this (e.g. BATCH_SIZE)")
    parser.add_argument("--work", type=Path, help="where the throw-away repository goes (default: a temp dir)")
    args = parser.parse_args(argv)
    budget = parse_duration(args.budget)
    done = set()
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            if line.strip():
                pair = json.loads(line)
                done.add((pair["seed"], pair["change"]))
    todo = [(seed, change) for seed, change in plan(args.pairs, args.per_seed, args.null_every,
                                                     args.first_seed, args.only) if (seed, change) not in done]
    print(f"{len(todo)} pairs to run ({len(done)} already in {args.out}), {args.budget} each run")
    if not todo:
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="nightshift-curves-"))
    os.environ.setdefault("NIGHTSHIFT_DATA_ROOT", str(work / "data"))
    repo = project_repo(work / f"repo-{int(time.time())}", budget=args.budget, sandbox="local",
                        researcher="optuna", early_stop="off")
    session = build_session(load_program(repo / "program.md"), "curves", researcher="optuna",
                            sandbox="local", observer=QuietObserver())
    executor, workspace = session.loop.executor, session.loop.workspace
    base = workspace.head()
    incumbent_source = workspace.read(TARGET, base)
    started, runs_done, runs_total = time.monotonic(), 0, len(todo) + len({s for s, _ in todo})
    incumbent_runs: dict[int, RunFinished] = {}
    made = 0
    try:
        for seed, change in todo:
            if seed not in incumbent_runs:
                incumbent_runs[seed] = one(executor, base, seed, Role.REFERENCE, "incumbent")
                runs_done += 1
                progress(runs_done, runs_total, started)
            made += 1
            commit = workspace.commit_candidate(TARGET, source_of(change, incumbent_source), change,
                                                parent=base, name=f"c{made:03d}")
            candidate = one(executor, commit, seed, Role.CANDIDATE, change)
            runs_done += 1
            progress(runs_done, runs_total, started)
            inc = incumbent_runs[seed]
            if not (candidate.ok and inc.ok and candidate.curve and inc.curve):
                print(f"  (not written: {change} on seed {seed} did not end OK with a curve)")
                continue
            pair = {"seed": seed, "change": change, "null": change == NULL, "metric": "val_bpb",
                    "direction": Direction.MINIMIZE.value, "budget_s": budget,
                    "candidate": run_record(candidate), "incumbent": run_record(inc)}
            with open(args.out, "a") as out:
                out.write(json.dumps(pair) + "\n")
            done.add((seed, change))
    finally:
        session.close()
    print(f"{len(done)} pairs in {args.out}; replay them: python -m benchmarks.early_stop.early_stop_replay {args.out}")
    return 0


def one(executor, commit: str, seed: int, role: Role, what: str) -> RunFinished:
    run = executor.run(commit, seed, role, None)
    curve = run.curve
    print(f"  seed {seed} {what:<26} {run.status.value:<8} val_bpb "
          f"{run.metric if run.metric is not None else float('nan'):.4f}  "
          f"{(run.ended or 0) - (run.started or 0):5.1f} s, {len(curve.points) if curve else 0} curve points",
          flush=True)
    return run


def progress(done: int, total: int, started: float) -> None:
    spent = time.monotonic() - started
    left = spent / done * (total - done)
    print(f"    {done}/{total} runs, {spent / 60:.1f} min so far, about {left / 60:.0f} min to go", flush=True)


if __name__ == "__main__":
    sys.exit(main())
