"""A real night's mix, counted in run time: `python -m benchmarks.keep_rule.mix_nights`.

Issue 40's benchmark. A real night is mostly losers (autoresearch's two-day run kept about 20
of 700 changes), and what a rule costs is run time, not runs: a loser stopped at a quarter of
its budget costs a quarter. So the target here prints a loss curve over a real wall-clock
budget (the bundled train.py's `step N | loss X | elapsed Ys` lines), which early stopping
reads as it would a real script's, and its metric has known effects:

    final = LEVEL + Σ effect(knob)·knob + the seed's luck + the run's own luck

Each proposal turns one knob on. The mix, per 40 proposals (`--proposals N` scales it):
3 wins (1, 2 and 0.5 seed sds; the 1-sd one behind until late, a curve that crosses), 12
nulls (4 of which redraw the seed's luck, as an edit that draws its random numbers in
another order does) and 25 losers from slight (0.25 sd) to divergent (20 sd). The loss
curve carries the seed's luck from the start, the run's own luck growing as it trains, the
effect as a gap that narrows toward its final size, and point noise.

Two regimes (`--regime`): `seeded`, where a seed fixes the run (a GPU script: the seed's luck
is shared by every commit on it, a re-run differs by 0.05 sd), and `wallclock`, where seeds
share nothing (a wall-clock budget on shared cores: all of a run's luck is its own).

Each night goes through the real `nightshift run` (scripted researcher, local sandbox, the
defaults otherwise) and is read back from its ledger. Printed side by side, per regime:

- nightshift: keeps by kind, the wins of at least one seed sd kept, the run time it spent
  (agent/review/efficiency.py's figure: a stopped run by the seconds it ran), its true
  progress (the known effects it kept) and progress per run-second;
- the single-run rule on the same proposals (autoresearch's: the baseline once, each
  candidate once on seed 0, kept when it beats the best so far), simulated with the same
  metric, each run as long as the night's median full run;
- the sound floor: an oracle told the wins, owing what a keep needs (two pairs, each close
  in time; the baseline on fresh seeds, and again for the record) and a full run per loser.

Issue 40's targets: where a seed fixes the run, progress per run-second at least 1.0 of the
single run's with no null or harmful keep; where seeds share nothing, wins of at least one
sd kept with probability 0.8, no false keep, and at least 0.7 of the single run's progress per
run-second. A night of 40 proposals takes about 6-10 minutes of wall time on 2 cores.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT))

from benchmarks.keep_rule.loop_nights import run_night, write_repo  # noqa: E402

LEVEL = 2.0
SD = 0.1              # one run's spread across seeds, metric units (val_bpb, minimised)
RERUN_SD = 0.005      # seeded: a re-run of one seed
HEAD = 1.5            # how far above its final value a curve starts
POINT_SD = 0.02       # each printed loss's own noise
REGIMES = ("seeded", "wallclock")
KINDS = ("win", "null", "loser")


@dataclass(frozen=True)
class Proposal:
    knob: str
    kind: str             # win | null | loser
    effect: float         # on the final metric, metric units (negative: better)
    lead: float = 0.0     # an extra early gap that is gone by the end (a curve that crosses)
    redraws: bool = False   # a null that redraws the seed's luck


def mix(count: int) -> list[Proposal]:
    """The night's proposals, in the mix of 40 scaled to `count` (at least one of each win)."""
    scale = count / 40
    wins = [Proposal("WIN_A", "win", -1.0 * SD, lead=3.0 * SD), Proposal("WIN_B", "win", -2.0 * SD),
            Proposal("WIN_C", "win", -0.5 * SD)]
    nulls = [Proposal(f"NULL_{i}", "null", 0.0, redraws=i % 3 == 0) for i in range(max(1, round(12 * scale)))]
    losers = max(1, count - len(wins) - len(nulls))
    # from 0.25 sd to 20 sd, evenly in log: most losers are slight, a few diverge
    sizes = [0.25 * (80 ** (i / max(1, losers - 1))) for i in range(losers)]
    return wins + nulls + [Proposal(f"LOSER_{i}", "loser", size * SD) for i, size in enumerate(sizes)]


TARGET = '''\
"""A synthetic training script with known effects (benchmarks/keep_rule/mix_nights.py)."""
import json, os, random, time
{knobs}
REGIME = "{regime}"
SALT = {salt}
seed = int(os.environ["NIGHTSHIFT_SEED"])
budget = float(os.environ.get("NIGHTSHIFT_BUDGET_S", "2"))
effect = {effect}
lead = {lead}
redrawn = {redrawn}
if REGIME == "seeded":      # the seed fixes the run: its luck is every commit's on that seed
    luck = random.Random(f"{{SALT}}/{{seed}}/{{redrawn}}").gauss(0.0, {sd})
    own = random.Random().gauss(0.0, {rerun_sd})
else:                       # seeds share nothing: all of the run's luck is its own
    luck, own = 0.0, random.Random().gauss(0.0, {sd})
final = {level} + effect + luck + own
points = random.Random()
start, step = time.monotonic(), 0
while (elapsed := time.monotonic() - start) < budget:
    left = 1.0 - elapsed / budget
    loss = final + {head} * left ** 2 + (effect + lead) * left - own * left + points.gauss(0.0, {point_sd})
    print(f"step {{step}} | loss {{loss:.4f}} | elapsed {{elapsed:.2f}}s", flush=True)
    step += 1
    time.sleep(budget / 40)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
    json.dump({{"val_bpb": final}}, out)
'''

PROGRAM = '''\
---
target: target.py
protected: []
command: python target.py
prepare: null
budget: {budget}s
grace: 30s
sandbox: local
researcher: scripted
metric: val_bpb
---
A synthetic training script with known effects: each knob is on (1) or off (0).
'''


def target_source(proposals: list[Proposal], regime: str, salt: int) -> str:
    knobs = "\n".join(f"{p.knob} = 0{' ' * max(1, 14 - len(p.knob))}# search: choice(0, 1)" for p in proposals)
    effect = " + ".join(f"({p.effect!r}) * {p.knob}" for p in proposals if p.effect) or "0.0"
    lead = " + ".join(f"({p.lead!r}) * {p.knob}" for p in proposals if p.lead) or "0.0"
    redraw = [p.knob for p in proposals if p.redraws]
    redrawn = " + ".join(f"str({k})" for k in redraw) if redraw else '""'
    return TARGET.format(knobs=knobs, regime=regime, salt=salt, effect=effect, lead=lead, redrawn=redrawn,
                         sd=SD, rerun_sd=RERUN_SD, level=LEVEL, head=HEAD, point_sd=POINT_SD)


@dataclass
class Tally:
    """What a rule kept and spent over one or more nights."""

    proposed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    keeps: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    big_wins: int = 0          # wins of at least one sd proposed
    big_kept: int = 0          # and kept
    progress: float = 0.0      # − Σ effects kept, in seed sds (positive = better)
    run_s: float = 0.0
    runs: int = 0
    stopped: int = 0

    def add(self, other: "Tally") -> None:
        for mine, theirs in ((self.proposed, other.proposed), (self.keeps, other.keeps)):
            for key, value in theirs.items():
                mine[key] += value
        for name in ("big_wins", "big_kept", "progress", "run_s", "runs", "stopped"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def count(self, proposal: Proposal, kept: bool) -> None:
        self.proposed[proposal.kind] += 1
        big = proposal.kind == "win" and -proposal.effect >= SD
        self.big_wins += big
        if kept:
            self.keeps[proposal.kind] += 1
            self.big_kept += big
            self.progress -= proposal.effect / SD

    @property
    def per_run_s(self) -> float:
        return self.progress / self.run_s if self.run_s else 0.0


def read_night(root: Path, proposals: list[Proposal]) -> tuple[Tally, float]:
    """nightshift's tally, and the median seconds of its full runs (ok, not stopped)."""
    from agent.record.events import Verdict
    from agent.record.ledger import read_events
    from agent.record.state import fold
    from agent.review.efficiency import night_efficiency, recorded_calibration

    folder = root / "results" / "bench"
    state = fold(read_events(folder))
    by_knob = {p.knob: p for p in proposals}
    tally = Tally()
    for experiment in state.experiments.values():
        tally.count(by_knob[experiment.description.split()[0]], experiment.verdict == Verdict.KEEP)
    figure = night_efficiency(state, "minimize", recorded_calibration(folder))
    tally.run_s, tally.runs, tally.stopped = figure.run_s, figure.runs, figure.stopped
    full = [r.duration_s for r in state.runs if r.ok and r.duration_s and r.run_id not in state.early_stops]
    return tally, statistics.median(full)


def single_run(proposals: list[Proposal], regime: str, salt: int, run_s: float) -> Tally:
    """autoresearch's rule with the target's metric: the baseline once, each candidate once,
    on seed 0, kept when it beats the best value so far; each run `run_s` long."""
    rng = random.Random(f"single/{regime}/{salt}")
    on: list[Proposal] = []

    def measure(knobs: list[Proposal]) -> float:
        redrawn = "".join("1" if p in knobs else "0" for p in proposals if p.redraws)
        luck = random.Random(f"{salt}/0/{redrawn}").gauss(0.0, SD) if regime == "seeded" else 0.0
        own = rng.gauss(0.0, RERUN_SD if regime == "seeded" else SD)
        return LEVEL + sum(p.effect for p in knobs) + luck + own

    tally = Tally(runs=len(proposals) + 1, run_s=(len(proposals) + 1) * run_s)
    best = measure(on)
    for proposal in proposals:
        value = measure(on + [proposal])
        kept = value < best
        if kept:
            best, on = value, on + [proposal]
        tally.count(proposal, kept)
    return tally


def sound_floor(proposals: list[Proposal], run_s: float, baseline: int = 2) -> Tally:
    """The fewest full runs a rule owes that holds the guarantees, even one told which
    proposals win (benchmarks/keep_rule/loop_nights.py's `sound_floor`): the baseline on
    fresh seeds, again for the record; a run per loser; four runs per keep."""
    wins = sum(1 for p in proposals if p.kind == "win")
    runs = baseline * (2 if wins else 1) + 2 * wins + len(proposals) + wins
    tally = Tally(runs=runs, run_s=runs * run_s)
    for proposal in proposals:
        tally.count(proposal, proposal.kind == "win")
    return tally


def one_night(night: int, regime: str, count: int, budget: float, workdir: Path) -> tuple[Tally, Tally, Tally, float]:
    """(nightshift, single run, sound floor, the night's wall seconds)."""
    salt = 5000 + night
    proposals = mix(count)
    random.Random(f"order/{night}").shuffle(proposals)
    script = [{"knobs": {p.knob: 1}, "description": f"{p.knob} on"} for p in proposals]
    root = write_repo(workdir / f"{regime}-{night}" / "repo", target_source(proposals, regime, salt), script,
                      program=PROGRAM.format(budget=budget))
    wall = run_night(root, len(proposals), timeout=3600)
    ours, full_s = read_night(root, proposals)
    return ours, single_run(proposals, regime, salt, full_s), sound_floor(proposals, full_s), wall


def figures(regime: str, nights: int, ours: Tally, single: Tally, floor: Tally, wall: float) -> list[str]:
    def keeps(t: Tally) -> str:
        return ", ".join(f"{k} {t.keeps[k]}/{t.proposed[k]}" for k in KINDS)

    def ratio(a: Tally, b: Tally) -> str:
        return f"{a.per_run_s / b.per_run_s:.2f}" if b.per_run_s > 0 else "n/a"

    big = f"{ours.big_kept}/{ours.big_wins}"
    return [
        f"{regime}: {nights} night(s), {wall:.0f} s of wall time",
        f"  nightshift:  keeps {keeps(ours)} (wins >= 1 sd: {big}); {ours.runs} runs, {ours.stopped} stopped "
        f"early, {ours.run_s:.0f} s of run time",
        f"               progress {ours.progress:+.2f} sd, {ours.per_run_s * 1000:.2f} sd per 1000 run-s",
        f"  single run:  keeps {keeps(single)}; {single.runs} runs, {single.run_s:.0f} s",
        f"               progress {single.progress:+.2f} sd, {single.per_run_s * 1000:.2f} sd per 1000 run-s",
        f"  sound floor: keeps {keeps(floor)}; {floor.runs} runs, {floor.run_s:.0f} s (an oracle told the wins)",
        f"               progress {floor.progress:+.2f} sd, {floor.per_run_s * 1000:.2f} sd per 1000 run-s",
        f"  progress per run-second, nightshift / single run: {ratio(ours, single)}; "
        f"nightshift / sound floor: {ratio(ours, floor)}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--regime", choices=(*REGIMES, "both"), default="both")
    parser.add_argument("--nights", type=int, default=1, help="nights a regime (orders and luck differ)")
    parser.add_argument("--proposals", type=int, default=40, help="proposals a night (default 40)")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds a run trains (default 2)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the nights' repositories here")
    args = parser.parse_args(argv)
    if args.proposals < 5:
        parser.error(f"--proposals must be at least 5 (three wins, a null, a loser), got {args.proposals}")
    regimes = REGIMES if args.regime == "both" else (args.regime,)
    with tempfile.TemporaryDirectory(prefix="mix_nights-") as tmp:
        workdir = args.keep or Path(tmp)
        for regime in regimes:
            totals, wall = (Tally(), Tally(), Tally()), 0.0
            for night in range(args.nights):
                *tallies, night_wall = one_night(night, regime, args.proposals, args.budget, workdir)
                for total, tally in zip(totals, tallies):
                    total.add(tally)
                wall += night_wall
                print(f"{regime} night {night}: {night_wall:.0f} s, keeps {tallies[0].keeps}", flush=True)
            print("\n".join(figures(regime, args.nights, *totals, wall)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
