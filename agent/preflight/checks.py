"""What the harness assumes about a training script, checked from what its runs show.

The keep rule compares a candidate with the incumbent on the same seeds and measures noise
across seeds; both assume that a different seed gives a different run, and that a run
spends about its budget. A script that seeds itself (nanoGPT's 1337) or counts steps
instead of seconds breaks those assumptions silently, so they are checked, not assumed:

- `judge_budget` (agent/run/budget.py): whether one run kept to its budget;
- `observe_seeding` (agent/run/seeding.py): whether a commit's metric varies with the seed;
- `baseline_verdict`: after the first baseline, one line per check; `stop` is set when the
  loop must not go on (identical metrics on different seeds: every candidate would be a
  seed change, the trap the keep rule exists to avoid);
- `Checklist`: the lines `nightshift check` (agent/preflight/check.py) and `run` print.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from agent.program import Program
from agent.record.events import Role, RunFinished
from agent.record.provenance import read_provenance
from agent.record.state import LoopState
from agent.run.budget import judge_budget, reported_steps, step_count_of
from agent.run.outputs import human_bytes
from agent.run.seeding import observe_seeding
from agent.target.overrides import StepCount
from sandbox import Status

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
class Checklist:
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


def judge_runs(verdict: Checklist, runs: list[RunFinished], program: Program, results_dir: Path,
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
    failed = [r for r in runs if not r.ok and r.status != Status.TIMEOUT]
    killed = [r for r in runs if r.status == Status.TIMEOUT]
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
    timeouts = [r for r in runs if r.status == Status.TIMEOUT]
    if timeouts:
        seen = f"; {stopped.sentence}" if stopped is not None and stopped.killed else ""
        verdict.add("budget respected", False, f"seed {timeouts[0].seed} was still running past "
                    f"budget + grace ({budget_s:g} s + {program.grace_s:g} s) and was killed{seen}",
                    budget_fix(program, planned))
    elif len(over) == 1 and len(judged) > 1:
        # A script that ignores its budget overruns on every run; one run past it beside runs
        # inside it is a slow start (the first run on a cold disk cache, a busy moment), and a
        # FAIL there would send a newcomer to fix a script that is fine. The integrity check
        # still compares every candidate's training step with the incumbent's.
        (slow, judgement), = over
        inside = ", ".join(f"seed {r.seed} ran {r.duration_s:.0f} s" for r, j in judged if j is not judgement)
        verdict.add("budget respected", None, f"seed {slow.seed} ran {slow.duration_s:.0f} s, "
                    f"{judgement.over_s:g} s past its {budget_s:g} s budget, but {inside}: a slow "
                    f"start (a cold disk cache, a busy moment), not a script that ignores its budget")
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


def _judge_writes(verdict: Checklist, runs: list[RunFinished], program: Program, results_dir: Path) -> None:
    records = [read_provenance(results_dir / Path(r.provenance).parent) for r in runs if r.provenance]
    outputs = [rec.outputs for rec in records if rec is not None and rec.outputs]
    tampered = [r for r in runs if r.status == Status.TAMPERED]
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
    status = run.status
    log = f"read {results_dir / run.log}" if run.log else "read the run's log"
    if status == Status.NO_METRIC:
        return ("report the metric: write it to $NIGHTSHIFT_OUT/result.json, print `---` then "
                "`metric: value`, or set metric_pattern to a regex whose one group captures it "
                f"({log})")
    if status == Status.CRASH and "No module named" in run.reason:
        return ("install the module for the interpreter the runs use (python in command is "
                f"Nightshift's own; see the interpreter line), or give an absolute path ({log})")
    if status == Status.TIMEOUT:
        return budget
    return f"{log}; fix the script or the command, then check again"


def baseline_verdict(state: LoopState, program: Program, results_dir: Path) -> Checklist:
    """The checks of the first baseline's runs (the base commit's reference runs)."""
    verdict = Checklist()
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


def _judge_progress(verdict: Checklist, runs: list[RunFinished], program: Program) -> None:
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
