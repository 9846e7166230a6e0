"""The real loop on a target with known effects: `python -m benchmarks.keep_rule.loop_nights [--drift] [--nights N]`.

Issue 29's regime, where a seed fixes the run (a GPU script): a tiny Python target, written
into a temporary git repository, whose metric (val_bpb, minimised) is

    LEVEL + Σ effect(knob) · knob + seed_effect(seed) + rerun jitter (+ drift)

with the knobs ALL_CAPS constants annotated `# search: choice(0, 1)`. seed_effect(seed) is a
deterministic function of the seed alone (sd 0.1), shared by every commit; the rerun jitter
(sd 0.005) is fresh in every run. Eight one-knob proposals (each sets one knob to 1): three
real wins (−0.30, −0.22, −0.15: positive progress 0.67 in all), one harmful change (+0.20)
and four nulls (0). The proposals go, in an order shuffled per night, through the real
`nightshift run` (the scripted researcher, `sandbox: local`, a 1-s budget the script does not
sleep through, every other setting the project's default), and the ledger is read back:

- keeps, by what they truly were (wins, nulls, harmful);
- runs by role, as agent/review/efficiency.py counts them (the figure `nightshift status` prints);
- true progress (the sum of the kept changes' known effects, positive = better), and per run;
- beside them the single-run rule on the same proposals, simulated with the same metric
  function (no loop): the baseline once on seed 0, then one run per candidate on seed 0, kept
  when it beats the best value recorded so far (autoresearch's rule); and the ratio of the two
  progress-per-run figures (issue 29's target: nightshift ≥ 0.67 of the single run's);
- and the sound floor (`sound_floor`): the fewest runs any rule owes on these proposals while
  it keeps the guarantees (two agreeing pairs a keep, each close in time, the record on fresh
  seeds), even one told which proposals win. Its ratio to the single run is the most a sound
  rule can reach on the night; nightshift's ratio to it is what a better rule could still win.

`--drift`: four INERT proposals join the eight (knobs the metric never reads), and each night
runs twice: steady, then with a metric that drifts with wall-clock time, `DRIFT · (now −
start) / night`, `night` being the steady night's length and DRIFT −0.3 (the machine speeds
up: later runs look better; `--drift-size`). It prints how many inert (and null) changes were
kept with and without drift, and the drift the night reached by its end (a night faster than
the steady one drifts less). The single run is simulated with the drift the loop's night
reached, its runs spread evenly over the night.

`--redraw`: the nulls redraw the seed's luck when on (the seed effect is drawn from the seed
and the null knobs' values): an edit that draws its random numbers in another order, as a new
layer's weights or another data order would. Such a null shares nothing of a seed with the
incumbent, so only a test on its own pairs can tell it from a win.

`--scale K`: each knob K times (copies with the same effect), a night of 8·K proposals of the
same mix: how the ratio grows as the runs spent once a night are shared by more candidates.

Each night takes about a minute on two busy cores (every run is a real process of the real
harness); `--nights N` runs N nights (different orders and seed effects) and sums them.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
LEVEL = 2.0
SEED_SD = 0.1
RERUN_SD = 0.005
DRIFT = -0.3          # metric units over the night: the machine speeds up, later runs look better

# name -> effect on val_bpb (negative = better, since it is minimised)
WINS = {"WIDER": -0.30, "WARMUP": -0.22, "NORM": -0.15}
HARMFUL = {"NO_DECAY": 0.20}
NULLS = {"TIE_EMBED": 0.0, "BIAS": 0.0, "SHUFFLE": 0.0, "GELU": 0.0}
INERT = {"LOG_EVERY": 0.0, "VERBOSE": 0.0, "CHECKPOINT": 0.0, "COLOUR": 0.0}   # never read
KIND = {**{k: "win" for k in WINS}, **{k: "harmful" for k in HARMFUL},
        **{k: "null" for k in NULLS}, **{k: "inert" for k in INERT}}
EFFECT = {**WINS, **HARMFUL, **NULLS, **INERT}

TARGET = '''\
"""A synthetic target with known effects (benchmarks/keep_rule/loop_nights.py)."""
import json, os, random, time
{knobs}
SALT = {salt}            # the night's seed effects
START = {start}          # the night's start stamp (epoch seconds)
NIGHT_S = {night_s}      # the expected night length (seconds)
DRIFT = {drift}          # how far the metric drifts over the night
seed = int(os.environ["NIGHTSHIFT_SEED"])
seed_effect = random.Random(f"{{SALT}}/{{seed}}"{redraw}).gauss(0.0, {seed_sd})
jitter = random.Random().gauss(0.0, {rerun_sd})
level = {level} + {formula}
drift = DRIFT * (time.time() - START) / NIGHT_S
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
    json.dump({{"val_bpb": level + seed_effect + jitter + drift}}, out)
'''

PROGRAM = '''\
---
target: target.py
protected: []
command: python target.py
prepare: null
budget: 1s
grace: 30s
sandbox: local
researcher: scripted
metric: val_bpb
---
A synthetic target with known effects: each knob is on (1) or off (0).
'''


def scaled(knobs: list[str], scale: int) -> list[str]:
    """`knobs`, and `scale - 1` copies of each (NAME_X2, ...) of the same kind and effect: a
    longer night of the same mix, over which the runs a night spends once (the baseline, the
    first win's pairs, the record's fresh seeds) are shared by more candidates."""
    if scale < 1:
        raise SystemExit(f"--scale must be at least 1, got {scale}")
    copies = [f"{name}_X{i}" for i in range(2, scale + 1) for name in knobs]
    for copy in copies:
        KIND[copy], EFFECT[copy] = KIND[copy.split("_X")[0]], EFFECT[copy.split("_X")[0]]
    return knobs + copies


def seed_effect(salt: int, seed: int, redrawn: str = "") -> float:
    """The seed's shift of the metric, as the target computes it (`redrawn`: the redrawing
    nulls' values, "/0101", under --redraw)."""
    return random.Random(f"{salt}/{seed}" + redrawn).gauss(0.0, SEED_SD)


def redrawing(knobs: list[str], redraw: bool) -> list[str]:
    """The knobs whose value redraws the seed's luck: the nulls, under --redraw."""
    return [name for name in knobs if redraw and KIND[name] == "null"]


def target_source(knobs: list[str], salt: int, start: float, night_s: float, drift: float,
                  redraw: bool = False) -> str:
    lines = "\n".join(f"{name} = 0{' ' * max(1, 14 - len(name))}# search: choice(0, 1)" for name in knobs)
    used = [name for name in knobs if KIND[name] != "inert"]
    formula = " + ".join(f"({EFFECT[name]!r}) * {name}" for name in used) or "0.0"
    keys = redrawing(knobs, redraw)
    redrawn = ' + "/" + ' + " + ".join(f"str({name})" for name in keys) if keys else ""
    return TARGET.format(knobs=lines, salt=salt, start=start, night_s=night_s, drift=drift, redraw=redrawn,
                         seed_sd=SEED_SD, rerun_sd=RERUN_SD, level=LEVEL, formula=formula)


def proposals(knobs: list[str], night: int) -> list[dict]:
    order = list(knobs)
    random.Random(f"order/{night}").shuffle(order)
    return [{"knobs": {name: 1}, "description": f"{name} on"} for name in order]


def write_repo(root: Path, source: str, script: list[dict], program: str = PROGRAM) -> Path:
    """A git repository holding `source` as target.py and `program`, the scripted researcher's
    proposals beside it (benchmarks/keep_rule/mix_nights.py writes its own program)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "target.py").write_text(source)
    (root / "program.md").write_text(program)
    (root / ".gitignore").write_text("results/\n")
    git = ["git", "-c", "user.name=Bench", "-c", "user.email=bench@localhost", "-C", str(root)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "the synthetic target"], check=True)
    (root.parent / "script.json").write_text(json.dumps(script))
    return root


def run_night(root: Path, experiments: int, timeout: float = 900) -> float:
    """`nightshift run` on the repository; its wall time in seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(PYTHONPATH=str(PROJECT), NIGHTSHIFT_DATA_ROOT=str(root.parent / "data"), COLUMNS="120")
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--tag", "bench", "--script",
                           str(root.parent / "script.json"), "--max-experiments", str(experiments)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"nightshift run exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.monotonic() - began


@dataclass
class Night:
    """What one night kept and spent, counted from its ledger."""

    keeps: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("win", "null", "harmful", "inert"), 0))
    proposed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("win", "null", "harmful", "inert"), 0))
    progress: float = 0.0            # true: − Σ effects kept (positive = better)
    runs: dict[str, int] = field(default_factory=dict)
    estimated: float | None = None   # the figure's estimate (the incumbent vs the baseline)
    wall_s: float = 0.0
    drift: float = 0.0               # how far the metric drifted by the night's end

    @property
    def total_runs(self) -> int:
        return sum(self.runs.values())

    def add(self, other: "Night") -> None:
        for mine, theirs in ((self.keeps, other.keeps), (self.proposed, other.proposed), (self.runs, other.runs)):
            for key, value in theirs.items():
                mine[key] = mine.get(key, 0) + value
        self.progress += other.progress
        self.estimated = (self.estimated or 0.0) + (other.estimated or 0.0)
        self.wall_s += other.wall_s
        self.drift += other.drift


def read_night(root: Path, wall_s: float) -> Night:
    """Keeps by their known effects and runs by share, from the night's ledger."""
    from agent.record.events import Direction, LoopStarted, Verdict
    from agent.record.ledger import read_events
    from agent.record.state import fold
    from agent.review.efficiency import calibration_seeds, night_efficiency

    events = list(read_events(root / "results" / "bench"))
    state = fold(events)
    started = next(e for e in events if isinstance(e, LoopStarted))
    night = Night(wall_s=wall_s)
    for experiment in state.experiments.values():
        name = experiment.description.split()[0]
        night.proposed[KIND[name]] += 1
        if experiment.verdict == Verdict.KEEP:
            night.keeps[KIND[name]] += 1
            night.progress -= EFFECT[name]
    figure = night_efficiency(state, started.program.get("direction", Direction.MINIMIZE),
                              calibration_seeds(started.program))
    night.runs, night.estimated = figure.counts(), figure.improvement
    return night


def single_run(knobs_in_order: list[str], salt: int, drift: float, redrawn: list[str] = ()) -> Night:
    """autoresearch's rule, simulated with the target's metric: the baseline once on seed 0,
    then each candidate once on seed 0, kept when it beats the best recorded value. With
    `drift` (what the loop's night reached by its end), run i of n sits at i/(n−1) of it."""
    jitter = random.Random(f"single/{salt}")
    n = len(knobs_in_order) + 1
    on: set[str] = set()

    def measure(knobs: set[str], i: int) -> float:
        key = "/" + "".join(str(int(name in knobs)) for name in redrawn) if redrawn else ""
        return (LEVEL + sum(EFFECT[k] for k in knobs) + seed_effect(salt, 0, key)
                + jitter.gauss(0.0, RERUN_SD) + drift * i / (n - 1))

    night = Night(runs={"candidates": n})
    best = measure(on, 0)
    for i, name in enumerate(knobs_in_order, start=1):
        night.proposed[KIND[name]] += 1
        value = measure(on | {name}, i)
        if value < best:
            best, on = value, on | {name}
            night.keeps[KIND[name]] += 1
            night.progress -= EFFECT[name]
    return night


def sound_floor(knobs_in_order: list[str], baseline: int | None = None) -> Night:
    """The fewest runs any rule owes on these proposals if it holds the guarantees issue 29
    keeps, even one told which proposals win (an oracle: it never runs a loser twice):

    - the first incumbent on `baseline` fresh seeds (the record's baseline level, and the
      seed-to-seed spread every later test rests on), and the last incumbent on them again
      when the night kept anything (its level for the record, on seeds that did not select it);
    - one candidate run for each discard (the single run's own price);
    - four runs for each keep: two candidate runs, because one pair cannot tell a win from
      an edit that redraws the seed's luck (docs/decisions.md, "A null that redraws the seed's
      luck"), and an incumbent run close in time to each of them, because a pair made minutes
      apart on a drifting machine measures the drift ("The real loop").

    Dropped from it, so that it stays a floor: the regime's re-run, the first pairing seed's
    incumbent run and every look a real rule needs before it knows. The runs count as
    "candidates" and "references"."""
    from agent.decide.decision import SeedPlan
    baseline = SeedPlan.baseline if baseline is None else baseline
    wins = sum(1 for name in knobs_in_order if KIND[name] == "win")
    night = Night(runs={"references": baseline * (2 if wins else 1) + 2 * wins,
                        "candidates": len(knobs_in_order) + wins})
    for name in knobs_in_order:
        night.proposed[KIND[name]] += 1
        if KIND[name] == "win":
            night.keeps["win"] += 1
            night.progress -= EFFECT[name]
    return night


def one_night(night: int, knobs: list[str], drift: float, night_s: float, workdir: Path,
              redraw: bool = False) -> tuple[Night, Night, Night]:
    """(nightshift, single run, sound floor) on the night's proposals."""
    salt = 1000 + night
    script = proposals(knobs, night)
    order = [next(iter(item["knobs"])) for item in script]
    root = workdir / f"night{night}-{'drift' if drift else 'steady'}" / "repo"
    write_repo(root, target_source(knobs, salt, time.time(), night_s, drift, redraw), script)
    wall = run_night(root, len(script))
    ours = read_night(root, wall)
    ours.drift = drift * wall / night_s          # how far the metric drifted by the night's end
    return ours, single_run(order, salt, ours.drift, redrawing(knobs, redraw)), sound_floor(order)


def figures(label: str, ours: Night, single: Night, floor: Night, nights: int) -> list[str]:
    def per_run(n: Night) -> float:
        return n.progress / n.total_runs if n.total_runs else 0.0

    keeps = lambda n: ", ".join(f"{k} {n.keeps[k]}/{n.proposed[k]}" for k in n.keeps if n.proposed[k])
    roles = ", ".join(f"{k} {v}" for k, v in ours.runs.items() if v)
    ratio = lambda a, b: per_run(a) / per_run(b) if per_run(b) > 0 else float("nan")
    return [
        f"{label} ({nights} night{'s' if nights != 1 else ''}, {ours.wall_s:.0f} s of loop)",
        f"  nightshift:  keeps {keeps(ours)}; {ours.total_runs} runs ({roles})",
        f"               true progress {ours.progress:.2f}, {per_run(ours):.4f} per run; "
        f"estimated (the figure) {ours.estimated or 0.0:+.2f}",
        f"  single run:  keeps {keeps(single)}; {single.total_runs} runs",
        f"               true progress {single.progress:.2f}, {per_run(single):.4f} per run",
        f"  sound floor: keeps {keeps(floor)}; {floor.total_runs} runs (an oracle told the wins, owing "
        f"what a keep needs: two pairs, each close in time; the record's fresh seeds)",
        f"               true progress {floor.progress:.2f}, {per_run(floor):.4f} per run",
        f"  progress per run, nightshift / single run: {ratio(ours, single):.2f}; "
        f"nightshift / sound floor: {ratio(ours, floor):.2f}; sound floor / single run: "
        f"{ratio(floor, single):.2f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drift", action="store_true", help="add four inert proposals and run each "
                        "night steady and with a metric that drifts with time")
    parser.add_argument("--drift-size", type=float, default=DRIFT, help="the drift over the "
                        f"steady night's length, metric units (default {DRIFT}: later runs look better)")
    parser.add_argument("--nights", type=int, default=1, help="nights to run (orders and seed effects differ)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the nights' repositories here")
    parser.add_argument("--redraw", action="store_true", help="the nulls redraw the seed's luck "
                        "(an edit that draws its random numbers in another order)")
    parser.add_argument("--scale", type=int, default=1, help="each knob this many times (copies "
                        "with the same effect): a night of 8 x SCALE proposals, the same mix")
    args = parser.parse_args(argv)
    knobs = scaled(list(WINS) + list(HARMFUL) + list(NULLS) + (list(INERT) if args.drift else []),
                   args.scale)
    with tempfile.TemporaryDirectory(prefix="loop_nights-") as tmp:
        workdir = args.keep or Path(tmp)
        totals = {"steady": (Night(), Night(), Night())}
        if args.drift:
            totals["drift"] = (Night(), Night(), Night())
        for night in range(args.nights):
            ours, single, floor = one_night(night, knobs, 0.0, 60.0, workdir, args.redraw)
            _add(totals["steady"], ours, single, floor)
            print(f"night {night} steady: {ours.total_runs} runs in {ours.wall_s:.0f} s, keeps {ours.keeps}", flush=True)
            if args.drift:
                ours, single, floor = one_night(night, knobs, args.drift_size, max(ours.wall_s, 1.0),
                                                workdir, args.redraw)
                _add(totals["drift"], ours, single, floor)
                print(f"night {night} drift:  {ours.total_runs} runs in {ours.wall_s:.0f} s, keeps {ours.keeps}", flush=True)
        print()
        for label, (ours, single, floor) in totals.items():
            print("\n".join(figures(label if args.drift else "known effects" + (
                ", the nulls redraw the seed's luck" if args.redraw else ""), ours, single, floor,
                args.nights)))
        if args.drift:
            steady, drifting = totals["steady"][0], totals["drift"][0]
            print(f"inert changes kept: {steady.keeps['inert']} of {steady.proposed['inert']} steady, "
                  f"{drifting.keeps['inert']} of {drifting.proposed['inert']} with drift (reached "
                  f"{drifting.drift / args.nights:+.2f} by a night's end on average) "
                  f"(nulls: {steady.keeps['null']} and {drifting.keeps['null']}; single run, inert: "
                  f"{totals['steady'][1].keeps['inert']} and {totals['drift'][1].keeps['inert']})")
    return 0


def _add(total: tuple[Night, ...], *nights: Night) -> None:
    for sum_, night in zip(total, nights):
        sum_.add(night)


if __name__ == "__main__":
    sys.exit(main())
