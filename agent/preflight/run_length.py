"""How long a run will take, read from its progress lines while it goes.

A step-budgeted script (nanoGPT's `max_iters`, a Trainer's `max_steps`) runs for as many
steps as it is told, however long they take; on a slow machine a run can need hours where
the budget allows minutes, and the harness only finds out when it kills it at budget +
grace. `RunLengthWatch` reads the run's lines as they arrive (`sandbox.progress`: nanoGPT's
iteration lines, the bundled step lines, `metrics_pattern`, tqdm bars), times the steps on
the harness's own clock, and with the run's step count (a tqdm bar's total, else the
command's flag or the target's setting: `agent.target.overrides.step_count`) estimates
the whole run. It says the run is hopeless as soon as even that estimate, less a margin for
a noisy start, ends past budget + grace: `nightshift check` then stops the run and says
why; `run` warns once at the start of the night (`LengthWarnings`).

A script that is given the budget (`{budget_s}` in the command) is trusted to stop at it:
its step count is then an upper bound, never a reason to stop it.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from agent.run.plan import RunPlan
from agent.target.overrides import StepCount, command_flags
from sandbox.progress import ProgressReader

# A run is stopped on an estimate only when it is clearly past the deadline: by MARGIN_EARLY
# from a first stretch of steps, by MARGIN_SETTLED from a longer one. A stretch counts from
# MIN_WINDOW_S or a share of the deadline, whichever is longer: a few slow steps on a machine
# busy for a moment must not stop a run that would have fit.
MIN_WINDOW_S, MIN_WINDOW_SHARE = 2.0, 0.05
SETTLED_S, SETTLED_SHARE = 20.0, 0.15
MARGIN_EARLY, MARGIN_SETTLED = 3.0, 1.25


@dataclass(frozen=True)
class RunLength:
    """An estimate of one run's length from the steps timed so far."""

    seconds_per_step: float
    steps: int               # the whole run's steps
    steps_done: int
    elapsed_s: float         # since the run started, when the latest progress line came
    whole_s: float           # the estimated wall clock of the whole run
    unit: str                # "iteration" or "step": what the script calls its steps
    origin: str              # who says how many steps: "--max_iters=2000 in command", ...

    def sentence(self, budget_s: float) -> str:
        """`at 8.2 s per iteration, 2000 iterations take about 4.6 h; your budget is 300 s`."""
        return (f"at {duration(self.seconds_per_step)} per {self.unit}, {self.steps} {self.unit}s "
                f"take about {duration(self.whole_s)} ({self.origin}); your budget is {budget_s:g} s")

    def steps_within(self, seconds: float) -> int:
        """How many steps fit in `seconds` at this pace, with what the run spent before its
        first timed step (startup, a first evaluation) and a fifth to spare."""
        startup = max(0.0, self.whole_s - self.steps * self.seconds_per_step)
        return max(1, int(0.8 * (seconds - startup) / self.seconds_per_step))


def duration(seconds: float) -> str:
    """A duration as a person says it: 85 ms, 8.2 s, 14 min, 4.6 h."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 100:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class RunLengthWatch:
    """Reads one run's lines (`feed`, from the runner's output thread) and estimates its
    length. `hopeless` turns true, once, when the run clearly cannot end by `deadline_s`."""

    def __init__(self, *, deadline_s: float, steps: StepCount | None, target: str,
                 metrics_pattern: str | None = None, told_budget: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.deadline_s = deadline_s
        self._steps, self._target = steps, target
        self._reader = ProgressReader(metrics_pattern)
        self._told_budget = told_budget
        self._clock = clock
        self._started = clock()
        self._first: tuple[float, int] | None = None     # (seconds since start, step)
        self._last: tuple[float, int] | None = None
        self._total: tuple[int, str] | None = None       # from the run's own progress bar
        self._unit = "step"
        self._lock = threading.Lock()
        self.estimate: RunLength | None = None
        self.hopeless = False

    def feed(self, line: str) -> None:
        point = self._reader.feed(line)
        if point is None or point.step is None:
            return
        with self._lock:
            now = self._clock() - self._started
            if point.total_steps:
                self._total = (point.total_steps, "the run's progress bar")
            if "iter" in point.values or "iteration" in point.values:
                self._unit = "iteration"
            if self._first is None or point.step < self._first[1]:
                self._first = (now, point.step)       # the first, or a restarted count
                self._last = None
                return
            if point.step > self._first[1]:
                self._last = (now, point.step)
                self._update()

    def progress(self, budget_s: float) -> str:
        """What the run's progress lines showed, for a run killed at the deadline."""
        if self.estimate is not None:
            return self.estimate.sentence(budget_s)
        total = self._total or ((self._steps.steps, self._steps.origin(self._target)) if self._steps else None)
        if self._first is not None:
            seconds, step = self._first
            of = f" of {total[0]} ({total[1]})" if total else ""
            return (f"its first progress line ({self._unit} {step}{of}) came only after {seconds:.0f} s, "
                    f"so not one step could be timed before the kill: what comes before the first "
                    f"step (startup, a first evaluation) takes that long at this pace")
        return ("it printed no progress line that Nightshift reads (`iter N:` or `step N |` lines, "
                "metrics_pattern's groups, a tqdm bar), so its pace could not be timed")

    def _update(self) -> None:
        total = self._total or ((self._steps.steps, self._steps.origin(self._target)) if self._steps else None)
        if total is None or self._first is None or self._last is None:
            return
        (t0, s0), (t1, s1) = self._first, self._last
        window = t1 - t0
        if window < max(MIN_WINDOW_S, MIN_WINDOW_SHARE * self.deadline_s):
            return
        per_step = window / (s1 - s0)
        steps, origin = total
        whole = t1 + max(0, steps - s1) * per_step
        self.estimate = RunLength(per_step, steps, s1, t1, whole, self._unit, origin)
        settled = window >= max(SETTLED_S, SETTLED_SHARE * self.deadline_s)
        if not self._told_budget and whole > (MARGIN_SETTLED if settled else MARGIN_EARLY) * self.deadline_s:
            self.hopeless = True


def length_fix(estimate: RunLength, steps: StepCount | None, command: str, budget_s: float) -> str:
    """What to change so that a run fits: the budget, or the script's own step count where
    it is set (the command's flag, the target's line), with the flags that share its value."""
    wanted = estimate.whole_s * 1.2
    budget = f"{wanted / 3600:.1f}h" if wanted >= 6000 else f"{wanted / 60:.0f}m" if wanted >= 600 else f"{wanted:.0f}s"
    fits = estimate.steps_within(budget_s)
    fixes = [f"give a run that long: budget: {budget} in program.md"]
    if steps is not None and steps.flag is not None:
        same = [f.text for f in command_flags(command) if f.value == steps.flag.value and f != steps.flag]
        also = f", and {' '.join(same)} with it" if same else ""
        fixes.append(f"or take fewer {estimate.unit}s: {steps.flag.text} in command down to about "
                     f"{fits} (what fits in {budget_s:g} s at this pace){also}")
    elif steps is not None and steps.line is not None:
        fixes.append(f"or take fewer {estimate.unit}s: {steps.name} = {steps.steps} (the target's line "
                     f"{steps.line}) down to about {fits}, or a --{steps.name}=N flag in command")
    else:
        fixes.append(f"or have the script take fewer {estimate.unit}s (its progress bar counts "
                     f"{estimate.steps}): about {fits} fit in {budget_s:g} s")
    fixes.append("or make each step cheaper (a smaller model, batch or context)")
    return "; ".join(fixes)


class LengthWarnings:
    """An Observer around another that watches the night's first runs (those that start
    before one finishes) and, the first time one clearly cannot finish inside budget +
    grace, says so once with the fix: the estimate `check` gives, at the start of `run`."""

    def __init__(self, inner: Any, plan: RunPlan) -> None:
        self._inner, self._plan = inner, plan
        self._watches: dict[str, RunLengthWatch] = {}
        self._done = False
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:   # message, decided, ...: the inner observer's
        return getattr(self._inner, name)

    def run_started(self, run_id: str, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            if not self._done:
                plan = self._plan
                self._watches[run_id] = RunLengthWatch(
                    deadline_s=plan.deadline_s, steps=plan.steps, target=plan.target or "",
                    metrics_pattern=plan.metrics_pattern, told_budget="{budget_s}" in plan.command)
        self._inner.run_started(run_id, *args, **kwargs)

    def output(self, run_id: str, line: str) -> None:
        watch = self._watches.get(run_id)
        if watch is not None:
            watch.feed(line)
            if watch.hopeless and watch.estimate is not None:
                self._warn(watch.estimate)
        self._inner.output(run_id, line)

    def run_finished(self, run: Any) -> None:
        with self._lock:
            self._done = True
            self._watches.clear()
        self._inner.run_finished(run)

    def _warn(self, estimate: RunLength) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            self._watches.clear()
        plan = self._plan
        self._inner.message(
            f"warning: {estimate.sentence(plan.budget_s)}, and grace {plan.grace_s:g} s: every "
            f"run of this night would be killed at {plan.deadline_s:g} s. Stop it (Ctrl-C) and fix: "
            f"{length_fix(estimate, plan.steps, plan.command, plan.budget_s)}")
