"""Paired learning curves of real nanoGPT runs, step-budgeted and seeded: where load is not
the noise. The same pairs file as benchmarks/early_stop/collect_curves.py, for benchmarks/early_stop/early_stop_replay.py.

    python -m benchmarks.early_stop.collect_nanogpt_curves NANOGPT_CHECKOUT OUT.jsonl [--pairs 15]
                                                [--per-seed 5] [--iters 250] [--text FILE]

A throw-away repository holds nanoGPT's own train.py, model.py, configurator.py, the
shakespeare_char config and data preparation from NANOGPT_CHECKOUT (karpathy/nanoGPT), and
examples/nanogpt/program.md as shipped, but for `--iters` iterations instead of 500 (with
eval_interval and lr_decay_iters to match, so the last evaluation is the run's metric). Every
run goes through the harness: the local sandbox, the seed through program.md's {seed} file,
the curve read live from nanoGPT's `iter N: loss X` lines through its metrics_pattern.
One thread a run (the example's OMP_NUM_THREADS=1): a run is a function of its seed, whatever
else the machine does, which the incumbent's repeat on the first seed shows (printed).

The text: NANOGPT_CHECKOUT/data/shakespeare_char/input.txt when it is there, else `--text`,
else the Python standard library's sources (the same bytes on every machine with this Python;
no download: a run has no network).

Curves are written on steps: a fraction is the step over the incumbent's last step, as the
night compares a script that prints steps but no training time (agent/night/early_stops.py's
`aligned`). Candidates are knob edits of the config file, the example's knobs; every
`--null-every`-th changes nothing that matters (a comment).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path


from agent.night.session import build_session
from agent.program import load_program
from agent.record.curves import Curve
from agent.record.events import Role, RunFinished
from agent.target.knobs import set_knobs
from agent.run.observer import QuietObserver
from benchmarks.early_stop.collect_curves import one, progress, run_record
from tests.loop_helpers import PROJECT, make_repo, set_front_matter

TARGET = "config/train_shakespeare_char.py"
FILES = ("train.py", "model.py", "configurator.py", TARGET, "data/shakespeare_char/prepare.py")
NULL = "null: a comment line"
# One change each, inside the example's search spaces; the first is the night of issue 29's
# kind of loser (the learning rate at the bottom of its range).
CHANGES: list[tuple[str, dict]] = [
    ("learning_rate 1e-3 -> 1e-4", {"learning_rate": 1e-4}),
    ("learning_rate 1e-3 -> 3e-4", {"learning_rate": 3e-4}),
    ("n_layer 6 -> 4", {"n_layer": 4}),
    ("dropout 0.2 -> 0.0", {"dropout": 0.0}),
    ("learning_rate 1e-3 -> 3e-3", {"learning_rate": 3e-3}),
    ("beta2 0.99 -> 0.95", {"beta2": 0.95}),
    ("warmup_iters 100 -> 10", {"warmup_iters": 10}),
    ("n_layer 6 -> 8", {"n_layer": 8}),
    ("min_lr 1e-4 -> 1e-5", {"min_lr": 1e-5}),
    ("dropout 0.2 -> 0.3", {"dropout": 0.3}),
    ("learning_rate 1e-3 -> 1e-2", {"learning_rate": 1e-2}),
    ("warmup_iters 100 -> 250", {"warmup_iters": 250}),
]


def standard_library_text(limit: int = 1_000_000) -> str:
    """The first `limit` characters of the standard library's sources, in a fixed order."""
    root, chunks, total = Path(sysconfig.get_paths()["stdlib"]), [], 0
    for path in sorted(root.glob("*.py")):
        if total >= limit:
            break
        chunks.append(path.read_text(errors="replace"))
        total += len(chunks[-1])
    return "".join(chunks)[:limit]


def nanogpt_repo(root: Path, checkout: Path, iters: int, text: Path | None) -> Path:
    program = (PROJECT / "examples" / "nanogpt" / "program.md").read_text()
    program = program.replace("--max_iters=500 --lr_decay_iters=500",
                              f"--max_iters={iters} --lr_decay_iters={iters} --eval_interval={iters}")
    assert f"--max_iters={iters}" in program, "examples/nanogpt/program.md's command changed"
    program = set_front_matter(program, sandbox="local", researcher="optuna", early_stop="off")
    files = {name: (checkout / name).read_text() for name in FILES}
    repo = make_repo(root, {**files, "program.md": program,
                            ".gitignore": "*.bin\n*.pkl\ninput.txt\nresults/\n"})
    given = checkout / "data" / "shakespeare_char" / "input.txt"
    source = given if given.exists() else text
    corpus = source.read_text() if source else standard_library_text()
    (repo / "data" / "shakespeare_char" / "input.txt").write_text(corpus)
    subprocess.run([sys.executable, "data/shakespeare_char/prepare.py"], cwd=repo, check=True,
                   capture_output=True)
    return repo


def plan(pairs: int, per_seed: int, null_every: int, first_seed: int) -> list[tuple[int, str]]:
    out, changes = [], iter(range(10**6))
    for k in range(pairs):
        seed = first_seed + k // per_seed
        null = null_every and (k + 1) % null_every == 0
        out.append((seed, NULL if null else CHANGES[next(changes) % len(CHANGES)][0]))
    return out


def on_steps(record: dict, curve: Curve | None, total: int) -> dict:
    """A run's record with its curve placed by steps over the incumbent's `total`."""
    placed = curve.on_steps(total) if curve else None
    return {**record, "total_steps": total,
            "points": [[p.fraction, p.step, p.loss, p.lr] for p in placed.points] if placed else []}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("checkout", type=Path, help="a karpathy/nanoGPT checkout")
    parser.add_argument("out", type=Path, help="the pairs file to write (JSON lines)")
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--per-seed", type=int, default=5)
    parser.add_argument("--null-every", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--iters", type=int, default=250, help="iterations a run (the example: 500)")
    parser.add_argument("--text", type=Path, help="the text to train on, without input.txt in the checkout")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="nightshift-nanogpt-"))
    os.environ.setdefault("NIGHTSHIFT_DATA_ROOT", str(work / "data"))
    repo = nanogpt_repo(work / "nanoGPT", args.checkout, args.iters, args.text)
    program = load_program(repo / "program.md")
    session = build_session(program, "curves", researcher="optuna", sandbox="local",
                            observer=QuietObserver())
    executor, workspace = session.loop.executor, session.loop.workspace
    base = workspace.head()
    config = workspace.read(TARGET, base)
    todo = plan(args.pairs, args.per_seed, args.null_every, args.first_seed)
    started, runs_done = time.monotonic(), 0
    runs_total = len(todo) + len({s for s, _ in todo}) + 1
    incumbent_runs: dict[int, RunFinished] = {}
    args.out.write_text("")
    try:
        for k, (seed, change) in enumerate(todo):
            if seed not in incumbent_runs:
                incumbent_runs[seed] = one(executor, base, seed, Role.REFERENCE, "incumbent")
                runs_done += 1
                progress(runs_done, runs_total, started)
                if k == 0:       # the same seed again: does the seed fix the run?
                    again = one(executor, base, seed, Role.REFERENCE, "incumbent, same seed again")
                    runs_done += 1
                    print(f"  a repeat of seed {seed}: {again.metric} against {incumbent_runs[seed].metric}"
                          f" (difference {again.metric - incumbent_runs[seed].metric:+.6f})", flush=True)
            source = config + "\n# (a comment: this candidate changes nothing that matters)\n" \
                if change == NULL else set_knobs(config, dict(CHANGES)[change], path=TARGET,
                                                 declared=program.knobs)
            commit = workspace.commit_candidate(TARGET, source, change, parent=base, name=f"c{k:03d}")
            candidate = one(executor, commit, seed, Role.CANDIDATE, change)
            runs_done += 1
            progress(runs_done, runs_total, started)
            inc = incumbent_runs[seed]
            if not (candidate.ok and inc.ok and candidate.curve and inc.curve):
                print(f"  (not written: {change} on seed {seed} did not end OK with a curve)")
                continue
            total = inc.curve.points[-1].step
            pair = {"seed": seed, "change": change, "null": change == NULL, "metric": program.metric,
                    "direction": program.direction, "budget_s": program.budget_s,
                    "candidate": on_steps(run_record(candidate), candidate.curve, total),
                    "incumbent": on_steps(run_record(inc), inc.curve, total)}
            with open(args.out, "a") as out:
                out.write(json.dumps(pair) + "\n")
    finally:
        session.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"pairs in {args.out}; replay them: python -m benchmarks.early_stop.early_stop_replay {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
