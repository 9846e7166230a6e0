"""What the harness assumes about a training script, checked from what its runs show.

The keep rule compares a candidate with the incumbent on the same seeds and measures noise
across seeds; both assume that a different seed gives a different run, and that a run
spends about its budget. A script that seeds itself (nanoGPT's 1337) or counts steps
instead of seconds breaks those assumptions silently, so they are checked, not assumed:

- `judge_budget`: from one run's duration and the steps it reports, whether it stopped at
  its wall-clock budget, stopped on its own after a step count (step-budgeted: allowed, and
  said; judged by its steps against the count the command sets and the incumbent's runs,
  so a loaded machine does not make a step count look like a wall clock), or ran past it;
- `observe_seeding`: from a commit's runs, whether the metric varies with the seed;
- `baseline_verdict`: after the first baseline, one line per check; `stop` is set when the
  loop must not go on (identical metrics on different seeds: every candidate would be a
  seed change, the trap the keep rule exists to avoid);
- `Verdict`: the lines `nightshift check` (agent.night.preflight) and `run` print.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from agent.night.outputs import human_bytes
from agent.program import Program
from agent.record.events import Role, RunFinished
from agent.record.provenance import read_provenance
from agent.record.state import LoopState
from agent.target.overrides import StepCount, step_count

STEP_BUDGET_FRACTION = 0.75   # a run that ends before this share of its budget stopped on its own


@dataclass(frozen=True)
class BudgetJudgement:
    kind: str                  # "wall_clock" | "step" | "over_budget"
    over_s: float | None       # seconds past the budget, when past it by more than the tolerance
    note: str                  # one sentence for provenance and the check


# The figures under which a run reports how far it trained: optimizer steps, else tokens.
STEP_METRICS = ("steps", "step", "iter", "iters", "iteration", "iterations", "global_step",
                "num_steps", "train_steps", "tokens", "train_tokens", "tokens_seen")
SAME_PACE = 0.15   # durations within this share of each other say nothing about the budget


def reported_steps(metrics: Mapping[str, Any]) -> float | None:
    """How far a run says it trained (its steps, else its tokens), from its metrics."""
    for name in STEP_METRICS:
        value = metrics.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def step_count_of(program: Program) -> StepCount | None:
    """How many steps a run of `program` takes, where its command or target (as in the
    checkout) says so: nanoGPT's --max_iters=2000, a config's max_steps = 500."""
    path = program.root / program.target
    try:
        source = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        source = ""
    return step_count(source, program.target, program.command)


def budget_tolerance_s(budget_s: float, grace_s: float) -> float:
    """How far past its budget a run may end before it is flagged: startup and the final
    evaluation take some seconds (10 s or a quarter of the budget), but never more than half
    the grace, past which the run is killed, so a script that overruns is flagged before it
    is killed."""
    return min(0.5 * grace_s, max(10.0, 0.25 * budget_s))


def judge_budget(duration_s: float | None, budget_s: float, grace_s: float, *,
                 steps: float | None = None, planned_steps: int | None = None,
                 peers: Iterable[tuple[float, float]] = ()) -> BudgetJudgement:
    """Whether a run stopped at its wall-clock budget, on its own after a step count, or ran
    past its budget. Judged by the steps the run reports where they tell: as many as the
    command or target sets (`planned_steps`), or as many as a run of the incumbent took
    (`peers`: (steps, duration)) in a clearly different time, is a step count, however long
    it took on a loaded machine. Otherwise by its wall clock: a run that ends well before
    its budget stopped on its own."""
    duration = duration_s or 0.0
    evidence = _step_evidence(duration, steps, planned_steps, peers)
    if duration > budget_s + budget_tolerance_s(budget_s, grace_s):
        over = round(duration - budget_s, 1)
        why = (f"step-budgeted ({evidence}), so a slower machine or a slower candidate takes longer"
               if evidence else "it does not stop at the budget (step-budgeted, or it ignores "
               "NIGHTSHIFT_BUDGET_S)")
        return BudgetJudgement("over_budget", over, (
            f"ran {duration:.0f} s, past its {budget_s:g} s budget by {over:g} s: {why}"))
    if evidence:
        return BudgetJudgement("step", None, (
            f"step-budgeted: {evidence}, for a {budget_s:g} s budget; it stops after a step count, not at the budget, so a slower machine makes it take "
            f"longer, not train less; allowed, but the budget does not bound its compute"))
    if duration < STEP_BUDGET_FRACTION * budget_s:
        return BudgetJudgement("step", None, (
            f"step-budgeted: finished in {duration:.1f} s of its {budget_s:g} s budget, so it stops "
            f"on its own (a step or epoch count), not at the budget; allowed, but the budget does "
            f"not bound its compute"))
    trained = f" and {steps:g} steps" if steps is not None else ""
    return BudgetJudgement("wall_clock", None, (
        f"wall clock: ran {duration:.1f} s{trained} for a {budget_s:g} s budget, so the number of "
        f"steps depends on the machine's speed"))


def _step_evidence(duration: float, steps: float | None, planned: int | None,
                   peers: Iterable[tuple[float, float]]) -> str:
    """Why a run's steps show a step count ("" when they do not)."""
    if steps is None:
        return ""
    if planned is not None and steps in (planned, planned + 1):   # a last step, or step 0 counted
        return f"{steps:g} steps in {duration:.1f} s, the count its command or target sets"
    for peer_steps, peer_duration in peers:
        if peer_steps == steps and abs(duration - peer_duration) > SAME_PACE * max(duration, peer_duration):
            return f"the same {steps:g} steps in {duration:.0f} s as another run in {peer_duration:.0f} s"
    return ""


@dataclass(frozen=True)
class SeedingObservation:
    kind: str                  # "varies" | "identical" | "unobserved"
    note: str


def observe_seeding(values: Mapping[int, float], metric: str) -> SeedingObservation:
    """Whether a commit's metric changed with the seed, from its successful runs."""
    if len(values) < 2:
        return SeedingObservation("unobserved", "not yet observed: fewer than two seeds of this "
                                                "commit have succeeded")
    seeds = ", ".join(str(s) for s in sorted(values))
    if len(set(values.values())) == 1:
        value = next(iter(values.values()))
        return SeedingObservation("identical", (
            f"observed identical: {metric} {value:.6g} on every seed ({seeds}); the script "
            f"ignores the seed"))
    return SeedingObservation("varies", f"observed to vary: {metric} differs across seeds {seeds}")


# ---- verdicts ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """One line of a verdict. `ok` None: nothing to judge (skipped, informational)."""

    name: str
    ok: bool | None
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "--  "}[self.ok]
        return f"{mark} {self.name}: {self.detail}"


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)
    stop: str | None = None    # why the loop must not go on (None: it may)

    def add(self, name: str, ok: bool | None, detail: str, fix: str = "") -> Check:
        check = Check(name, ok, detail, fix)
        self.checks.append(check)
        return check

    @property
    def problems(self) -> list[Check]:
        return [c for c in self.checks if c.ok is False]

    def lines(self) -> list[str]:
        lines = [c.line() for c in self.checks]
        if self.problems:
            lines.append(f"{len(self.problems)} problem{'s' if len(self.problems) > 1 else ''}:")
            lines += [f"  {i}. {c.name}: fix: {c.fix or c.detail}" for i, c in enumerate(self.problems, 1)]
        return lines


SEED_FIX = ("pass the seed to the script: put {seed} in command (e.g. --seed={seed}, or "
            "`--seed {seed}` for argparse scripts), or have it read NIGHTSHIFT_SEED; a script "
            "that seeds itself with a constant (torch.manual_seed(1337)) needs that constant "
            "replaced by the seed (see examples/nanogpt/program.md for a way without editing it)")
SEED_GIVEN_FIX = ("the command passes {seed}, yet the metric did not change: check that the "
                  "script uses that argument for every random number generator it has (python, "
                  "numpy, torch, its data order), and not a constant")
BUDGET_FIX = ("make it stop at the budget: if the script has a flag for its training time, pass "
              "{budget_s} to it, or have it read NIGHTSHIFT_BUDGET_S; a step-budgeted script: set "
              "budget to what a run takes (grace covers startup and the final evaluation), or "
              "lower its step count")


def budget_fix(program: Program, planned: StepCount | None) -> str:
    """BUDGET_FIX, naming the script's own step count where the command or target sets it."""
    if planned is None:
        return BUDGET_FIX
    where = planned.origin(program.target)
    return (f"the script runs a step count ({where}), not the budget: lower the count or the work "
            f"per step, or set budget to what a run of it takes (check gives the pace once it can "
            f"time the steps between two progress lines)")


@dataclass(frozen=True)
class StoppedEarly:
    """A run that `check` stopped because it could not finish inside budget + grace, or
    that was killed there (`killed`), with what its progress lines showed."""

    seed: int
    after_s: float
    sentence: str              # the estimate, as `RunLength.sentence` says it, or what was seen
    fix: str
    killed: bool = False       # killed at budget + grace (judged as usual, `sentence` added)


def judge_runs(verdict: Verdict, runs: list[RunFinished], program: Program, results_dir: Path,
               budget_s: float, *, planned: StepCount | None = None,
               stopped: StoppedEarly | None = None) -> None:
    """The run checks shared by `check` and the first baseline: metric found, seeds change
    the result, budget respected, nothing written outside the allowed places. `planned`: the
    run's step count as the command or target sets it; `stopped`: `check` stopped the
    first run early, so only the budget can be judged."""
    if stopped is not None and not stopped.killed:
        verdict.add("metric found", None, f"not known: seed {stopped.seed} was stopped after "
                    f"{stopped.after_s:.0f} s, before its end (see budget respected)")
        verdict.add("seeds change the result", None, "not known: no second seed was run once the "
                    "first showed that a run cannot finish in its budget")
        verdict.add("budget respected", False, f"seed {stopped.seed}: {stopped.sentence}, and "
                    f"grace {program.grace_s:g} s: every run would be killed at "
                    f"{budget_s + program.grace_s:g} s", stopped.fix)
        _judge_writes(verdict, runs, program, results_dir)
        return
    metric = program.metric
    ok = [r for r in runs if r.ok and r.metric is not None]
    failed = [r for r in runs if not r.ok and r.status.value != "timeout"]
    killed = [r for r in runs if r.status.value == "timeout"]
    if killed and not failed and not ok:
        verdict.add("metric found", None, f"not known: seed {killed[0].seed} was killed at budget + "
                    f"grace before it reported (see budget respected)")
    elif failed:
        worst = failed[0]
        verdict.add("metric found", False, f"seed {worst.seed}: {worst.status.value}: {worst.reason}",
                    _fix_for(worst, results_dir, budget_fix(program, planned)))
    else:
        values = ", ".join(f"{r.metric:.6g} (seed {r.seed})" for r in ok)
        verdict.add("metric found", True, f"{metric} {values}")
    by_seed = {r.seed: r.metric for r in ok}
    seeding = observe_seeding(by_seed, metric)
    if seeding.kind == "identical":
        verdict.add("seeds change the result", False, seeding.note,
                    SEED_GIVEN_FIX if "{seed}" in program.command else SEED_FIX)
    elif seeding.kind == "varies":
        spread = statistics.stdev(by_seed.values())
        verdict.add("seeds change the result", True, f"{seeding.note} (sd {spread:.4g})")
    else:
        verdict.add("seeds change the result", None, "cannot tell: fewer than two runs succeeded")
    timed = [r for r in runs if r.duration_s]
    judged = [(r, judge_budget(r.duration_s, budget_s, program.grace_s, steps=reported_steps(r.metrics),
                               planned_steps=planned.steps if planned else None,
                               peers=[(s, p.duration_s) for p in timed if p is not r
                                      and (s := reported_steps(p.metrics)) is not None]))
              for r in timed]
    over = [(r, j) for r, j in judged if j.kind == "over_budget"]
    timeouts = [r for r in runs if r.status.value == "timeout"]
    if timeouts:
        seen = f"; {stopped.sentence}" if stopped is not None and stopped.killed else ""
        verdict.add("budget respected", False, f"seed {timeouts[0].seed} was still running past "
                    f"budget + grace ({budget_s:g} s + {program.grace_s:g} s) and was killed{seen}",
                    budget_fix(program, planned))
    elif over:
        verdict.add("budget respected", False, over[0][1].note, budget_fix(program, planned))
    elif judged:
        kinds = {j.kind for _, j in judged}
        durations = ", ".join(f"{r.duration_s:.1f} s" for r, _ in judged)
        if kinds == {"step"}:
            verdict.add("budget respected", True, f"runs took {durations}; {judged[0][1].note}")
        else:
            verdict.add("budget respected", True, f"wall clock: runs took {durations} for a "
                        f"{budget_s:g} s budget")
    _judge_writes(verdict, runs, program, results_dir)
    _judge_progress(verdict, runs, program)


def _judge_writes(verdict: Verdict, runs: list[RunFinished], program: Program, results_dir: Path) -> None:
    records = [read_provenance(results_dir / Path(r.provenance).parent) for r in runs if r.provenance]
    outputs = [rec.get("outputs") for rec in records if rec and rec.get("outputs")]
    tampered = [r for r in runs if r.status.value == "tampered"]
    if tampered:
        verdict.add("nothing written outside the allowed places", False, tampered[0].reason,
                    "the script must not change protected files or the data folder; write "
                    "outputs to {out} ($NIGHTSHIFT_OUT) or next to itself")
        return
    changed = sorted({p for o in outputs for p in o.get("tracked_changed", []) + o.get("tracked_deleted", [])})
    if changed:
        verdict.add("nothing written outside the allowed places", False, (
            f"the run changed tracked files of the commit in its working directory: "
            f"{', '.join(changed[:5])} (its private copy; the snapshot and your checkout are "
            f"untouched, but the next run starts from the committed version)"),
            "write generated files elsewhere, or list them in keep: if they are outputs")
        return
    if not outputs:
        verdict.add("nothing written outside the allowed places", None, "no outputs recorded")
        return
    last = outputs[-1]
    kept = _listing({**_prefixed(last["kept"])})
    dropped = _listing(_prefixed(last["dropped"]))
    detail = f"writes only to $NIGHTSHIFT_OUT and its own working directory; kept: {kept or 'nothing'}"
    if dropped:
        detail += f"; dropped after each run (not in keep:): {dropped}"
    verdict.add("nothing written outside the allowed places", True, detail)


def _prefixed(folders: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    return {(f"$NIGHTSHIFT_OUT/{rel}" if label == "out" else rel): size
            for label, files in folders.items() for rel, size in files.items()}


def _listing(files: Mapping[str, int], limit: int = 4) -> str:
    items = [f"{rel} ({human_bytes(size)})" for rel, size in sorted(files.items(), key=lambda kv: -kv[1])]
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _fix_for(run: RunFinished, results_dir: Path, budget: str = BUDGET_FIX) -> str:
    status = run.status.value
    log = f"read {results_dir / run.log}" if run.log else "read the run's log"
    if status == "no_metric":
        return ("report the metric: write it to $NIGHTSHIFT_OUT/result.json, print `---` then "
                "`metric: value`, or set metric_pattern to a regex whose one group captures it "
                f"({log})")
    if status == "crash" and "No module named" in run.reason:
        return ("install the module for the interpreter the runs use (python in command is "
                f"Nightshift's own; see the interpreter line), or give an absolute path ({log})")
    if status == "timeout":
        return budget
    return f"{log}; fix the script or the command, then check again"


def baseline_verdict(state: LoopState, program: Program, results_dir: Path) -> Verdict:
    """The checks of the first baseline's runs (the base commit's reference runs)."""
    verdict = Verdict()
    runs = [r for r in state.runs if r.commit == state.base_commit and r.role == Role.REFERENCE]
    judge_runs(verdict, runs, program, results_dir, state.budget_s or program.budget_s,
               planned=step_count_of(program))
    seeding = next((c for c in verdict.checks if c.name == "seeds change the result"), None)
    if seeding is not None and seeding.ok is False:
        verdict.stop = (f"the baseline's seeds gave identical results: {seeding.detail}. Every "
                        f"candidate would be compared on one draw of the noise, so a seed change "
                        f"would pass for an improvement. Fix: {seeding.fix[0].lower() + seeding.fix[1:]}; then start a new "
                        f"tag (these runs all measured the same draw)")
    return verdict


_PLACED = {"elapsed": "on its own training clock", "steps": "on the steps it announced",
           "clock": "step for step against the incumbent's steps (it prints no training time)"}


def _judge_progress(verdict: Verdict, runs: list[RunFinished], program: Program) -> None:
    """Whether the harness reads the runs' progress: the curve early stopping compares."""
    curves = [r.curve for r in runs if r.ok]
    if not program.early_stop.enabled or not curves:
        return
    if all(curve is None for curve in curves):
        verdict.add("progress lines read", None, "none: early stopping never stops a run of this "
                    "script (it compares a candidate's training loss with the incumbent's as they "
                    "train)", "print `step N | loss X | elapsed Ys` lines as it trains, or give "
                    "metrics_pattern a loss group and a step or elapsed one")
        return
    read = [curve for curve in curves if curve is not None]
    placed = _PLACED.get(read[0].placed or "", "on the harness's clock")
    verdict.add("progress lines read", True, f"{min(len(c.points) for c in read)} points a run or more, "
                f"placed {placed}; early stopping compares them at "
                f"{', '.join(f'{c:.0%}' for c in program.early_stop.checkpoints)} of the budget")
