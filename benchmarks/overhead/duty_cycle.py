"""Duty cycle: the share of worker time spent in runs, serial vs overlapped proposals, at 1, 2,
4 and 8 workers; and the wall time to decide the same candidates at 1 vs 4 workers.

    python -m benchmarks.overhead.duty_cycle [--run-s 6] [--think-s 0.6] [--workers 1 2 4 8]
    python -m benchmarks.overhead.duty_cycle --speedup [--candidates 20] [--run-s 3]
    RAY_ADDRESS=host:port python -m benchmarks.overhead.duty_cycle --cluster ray --workers 3

The real loop (ledger, git workspace, snapshots, the local sandbox, the keep rule, the
scheduler) runs sleep-based training scripts (each run sleeps `--run-s` and prints a noisy
metric, so nothing competes for the cores) and a researcher that thinks `--think-s` seconds
per proposal (a delaying researcher: the stand-in for an LLM's latency). Utilisation is read
from the ledger afterwards (`agent.record.views.utilisation`: time inside runs over workers x
wall time). Serial means `overlap: false` (the researcher is asked only when nothing runs);
overlapped means `overlap: true` (a proposal is prepared while runs train). Dispatch is the
median time from a run's run_started (the harness hands it to a worker) to its process
starting, and back from the process's end to its run_finished: on Ray it includes scheduling
the task and shipping the snapshot and results. Prints figures, never asserts.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


from agent.night.loop import StopRules
from agent.night.session import build_session
from agent.program import load_program
from agent.record.events import Prediction
from agent.record.views import utilisation
from agent.researchers.base import Proposal, ResearchContext, Researcher
from agent.run.observer import QuietObserver
from agent.target.knobs import set_knobs
from tests.loop_helpers import make_repo

SCRIPT = '''\
import json, os, random, time
WIDTH = 64          # a knob that changes nothing   # search: int(1, 100000)
time.sleep(float(os.environ["NIGHTSHIFT_BUDGET_S"]))
value = 2.0 + random.SystemRandom().gauss(0.0, 0.02)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as f:
    json.dump({"val_bpb": value}, f)
'''

PROGRAM = '''\
---
target: sleepy.py
protected: []
command: python sleepy.py
prepare: null
budget: {run_s}s
grace: 30s
seeds: {{baseline: 2, screen: 1, max: 4}}
sandbox: local
researcher: optuna
metric: val_bpb
---
Sleep-based runs whose knob does nothing.
'''


class DelayingResearcher(Researcher):
    """Thinks `think_s` seconds, then proposes a new value of a knob that does nothing."""

    name = "delaying"

    def __init__(self, think_s: float) -> None:
        self.think_s = think_s

    def propose(self, context: ResearchContext) -> Proposal:
        time.sleep(self.think_s)
        value = 64 + context.experiment_index
        return Proposal(source=set_knobs(context.incumbent_source, {"WIDTH": value}),
                        description=f"WIDTH -> {value}", hypothesis="it changes nothing",
                        prediction=Prediction("same", 0.0, (-0.05, 0.05), 0.8, "a no-op"))


def night(tmp: Path, name: str, *, workers: int, overlap: bool, run_s: float, think_s: float,
          candidates: int, cluster: str = "local") -> dict:
    repo = make_repo(tmp / name, {"sleepy.py": SCRIPT, "program.md": PROGRAM.format(run_s=run_s)})
    program = load_program(repo / "program.md", {"workers": workers, "overlap": overlap,
                                                 "cluster": cluster})
    session = build_session(program, "bench", researcher="optuna", sandbox="local",
                            observer=QuietObserver())
    session.loop.researcher = DelayingResearcher(think_s)
    started = time.monotonic()
    session.loop.run(StopRules(max_experiments=candidates))
    wall = time.monotonic() - started
    session.close()
    state = session.loop.state
    use = utilisation(state)
    runs = len(state.runs)
    events = list(session.loop.ledger.events())
    started = {e.run_id: e.time for e in events if e.kind == "run_started"}
    out = [r.started - _epoch(started[r.run_id]) for r in state.runs if r.started]
    back = [_epoch(r.time) - r.ended for r in state.runs if r.ended]
    # The steady state: from the first candidate's proposal to the last one's. Before it the
    # first baseline's seeds cannot fill every worker (candidates wait for its verdict), after
    # it the night drains; each edge is about one run long, whatever the night's length.
    proposed = [_epoch(e.time) for e in events if e.kind == "experiment_proposed"]
    steady = None
    if len(proposed) > 1:
        first, last = min(proposed), max(proposed)
        inside = sum(max(0.0, min(r.ended, last) - max(r.started, first))
                     for r in state.runs if r.started and r.ended)
        steady = inside / (len(session.loop.workers.slots) * (last - first))
    return {"share": use.share, "steady": steady, "wall": wall, "runs": runs,
            "overhead": (use.capacity_s - use.busy_s) / runs if runs else None,
            "per_run": statistics.median(r.duration_s or 0 for r in state.runs),
            "dispatch": statistics.median(out) if out else None,
            "return": statistics.median(back) if back else None}


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-s", type=float, default=6.0, help="seconds each run sleeps")
    parser.add_argument("--think-s", type=float, default=0.6, help="seconds per proposal")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--per-worker", type=int, default=6, help="candidates per worker")
    parser.add_argument("--speedup", action="store_true",
                        help="instead: wall time for the same candidates at 1 vs 4 workers")
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--cluster", default="local", help="local, or ray (at $RAY_ADDRESS)")
    parser.add_argument("--overlap-only", action="store_true",
                        help="skip the serial nights (the slow half at many workers)")
    args = parser.parse_args()
    load = Path("/proc/loadavg").read_text().split()[0]
    with tempfile.TemporaryDirectory() as tmp:
        if args.speedup:
            walls = {}
            for workers in (1, 4):
                r = night(Path(tmp), f"s{workers}", workers=workers, overlap=True,
                          run_s=args.run_s, think_s=args.think_s, candidates=args.candidates)
                walls[workers] = r["wall"]
                print(f"{workers} worker(s): {args.candidates} candidates decided in {r['wall']:.1f} s "
                      f"({r['runs']} runs of {args.run_s:g} s, busy {r['share']:.0%})", flush=True)
            print(f"speed-up 4 vs 1 workers: {walls[1] / walls[4]:.2f}x (load average {load} at start)")
            return
        print(f"runs of {args.run_s:g} s, a researcher thinking {args.think_s:g} s per proposal, "
              f"{args.per_worker} candidates per worker; load average {load} at start")
        print(f"cluster {args.cluster}")
        print("busy share of worker time over the whole night, and in its steady state (first to "
              "last proposal)")
        print(f"{'workers':>8} {'serial':>8} {'overlap':>8} {'steady':>8}   idle worker-s per run, "
              f"dispatch, return (overlap)")
        for workers in args.workers:
            row = {}
            for overlap in ((True,) if args.overlap_only else (False, True)):
                row[overlap] = night(Path(tmp), f"w{workers}-{overlap}", workers=workers,
                                     overlap=overlap, run_s=args.run_s, think_s=args.think_s,
                                     candidates=args.per_worker * workers, cluster=args.cluster)
            r = row[True]
            serial = f"{row[False]['share']:>8.1%}" if False in row else f"{'-':>8}"
            steady = f"{r['steady']:>8.1%}" if r["steady"] is not None else f"{'-':>8}"
            print(f"{workers:>8} {serial} {r['share']:>8.1%} {steady}   "
                  f"{r['overhead']:.2f} s, {r['dispatch']:.2f} s, {r['return']:.2f} s", flush=True)


if __name__ == "__main__":
    main()
