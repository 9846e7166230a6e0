"""One figure for a night's efficiency: what its runs went to, and what they bought.

`night_efficiency(state, direction, calibration_seeds)` reads a night's folded ledger and
returns an `Efficiency`: every run of the night in exactly one share, and the progress.

Shares (they add to 1 over `runs`):
- calibration: incumbent reference runs on the rule's baseline seeds (each new incumbent's
  fresh measurement, and the night's same-seed repeat);
- paired references: incumbent reference runs on other seeds (the candidates' seeds, run so
  that a candidate is compared on its own seed);
- candidates: candidate runs that ran to their end;
- stopped early: candidate runs the early-stopping rule ended (agent/decide/early_stop.py);
- failed: runs of either role that ended without a result (crashed, timed out, interrupted);
- other: runs of other roles recorded in the night's ledger (`nightshift noise`), if any.

Progress is the morning report's headline: the incumbent on its fresh reference seeds
against the baseline on its own (`estimated_improvement`, positive = better). It is an
estimate: in a real night the true effect of a change is unknown. Divided by the runs of the
night it is the improvement per run; by the hours the runs took (their durations, the time a
worker's device was busy), the improvement per run-hour: per GPU-hour where a run holds one GPU.

Each share is also counted in run time: a run's `duration_s`, what it actually ran (a run
stopped early or cut off counts the seconds it ran, not its budget). Early stopping saves run
time, not runs, so a night of losers shows its savings here and not in the counts. A run
whose harness died before it finished recorded no duration and counts 0 s.

`single_run_cost` puts the night's run time beside autoresearch's rule on the same
proposals: the baseline run once and each decided candidate run once to its end. It is an
estimate of cost only; that rule's keeps would differ.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from agent.record.records import Direction
from agent.record.events import LoopStarted, Role, RunFinished
from agent.record.ledger import read_events
from agent.record.state import LoopState

SHARES = ("calibration", "paired", "candidates", "stopped", "failed", "other")
SHARE_NAMES = {"calibration": "calibration", "paired": "paired references",
               "candidates": "candidates to the end", "stopped": "stopped early",
               "failed": "failed", "other": "other roles"}


@dataclass(frozen=True)
class Efficiency:
    """What a night's runs went to, and the progress they bought (see the module's doc)."""

    calibration: int = 0
    paired: int = 0
    candidates: int = 0
    stopped: int = 0
    failed: int = 0
    other: int = 0
    run_s: float = 0.0                   # the runs' durations, summed
    improvement: float | None = None     # estimated: incumbent vs baseline, fresh seeds, + = better
    interval: tuple[float, float] | None = None
    kept: int = 0
    seconds: Mapping[str, float] = field(default_factory=dict)   # share -> its runs' run time
    single_run: "SingleRun | None" = None

    @property
    def runs(self) -> int:
        return sum(self.counts().values())

    @property
    def references(self) -> int:
        return self.calibration + self.paired

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in SHARES}

    def shares(self) -> dict[str, float]:
        """Each kind's share of the night's runs (all 0 before any run)."""
        total = self.runs
        return {name: (count / total if total else 0.0) for name, count in self.counts().items()}

    def run_seconds(self) -> dict[str, float]:
        """Each kind's run time in seconds, in the order of SHARES."""
        return {name: float(self.seconds.get(name, 0.0)) for name in SHARES}

    def time_shares(self) -> dict[str, float]:
        """Each kind's share of the night's run time (all 0 before any run time)."""
        seconds = self.run_seconds()
        total = sum(seconds.values())
        return {name: (spent / total if total > 0 else 0.0) for name, spent in seconds.items()}

    @property
    def per_run(self) -> float | None:
        if self.improvement is None or not self.runs:
            return None
        return self.improvement / self.runs

    @property
    def per_hour(self) -> float | None:
        if self.improvement is None or self.run_s <= 0:
            return None
        return self.improvement / (self.run_s / 3600)

    @property
    def per_run_second(self) -> float | None:
        if self.improvement is None or self.run_s <= 0:
            return None
        return self.improvement / self.run_s

    def line(self) -> str:
        """The figure in one line."""
        if self.improvement is None:
            return (f"estimated improvement: not measured yet ({self.kept} kept; the incumbent's "
                    f"fresh seeds have not run) in {self.runs} runs")
        if not self.kept:
            return f"estimated improvement +0 (nothing kept) in {self.runs} runs"
        text = (f"estimated improvement {self.improvement:+.4f} (incumbent vs baseline, fresh seeds) "
                f"in {self.runs} runs: {self.per_run:+.5f} per run")
        if self.per_hour is not None:
            text += f", {self.per_hour:+.4f} per run-hour"
        return text

    def rows(self) -> list[dict[str, Any]]:
        """Where the runs went, in a fixed order; failed and other roles only when there are any."""
        shares, counts = self.shares(), self.counts()
        seconds, time_shares = self.run_seconds(), self.time_shares()
        return [{"kind": name, "name": SHARE_NAMES[name], "count": counts[name], "share": shares[name],
                 "seconds": seconds[name], "time_share": time_shares[name]}
                for name in SHARES if counts[name] or name in SHARES[:4]]

    def shares_line(self) -> str:
        """Where the runs went, by count."""
        return ", ".join(f"{row['name']} {row['share']:.0%} ({row['count']})" for row in self.rows())

    def time_line(self) -> str:
        """Where the run time went, in the same order as `shares_line`."""
        return ", ".join(f"{row['name']} {row['time_share']:.0%} ({run_time(row['seconds'])})"
                         for row in self.rows())

    def to_dict(self) -> dict[str, Any]:
        return {**self.counts(), "runs": self.runs, "shares": self.shares(), "run_s": self.run_s,
                "improvement": self.improvement, "interval": list(self.interval) if self.interval else None,
                "per_run": self.per_run, "per_hour": self.per_hour, "kept": self.kept,
                "line": self.line(), "shares_line": self.shares_line(), "rows": self.rows(),
                "seconds": self.run_seconds(), "time_shares": self.time_shares(),
                "per_run_second": self.per_run_second, "time_line": self.time_line(),
                "single_run": self.single_run.to_dict() if self.single_run else None}


@dataclass(frozen=True)
class SingleRun:
    """autoresearch's rule on the night's proposals: the baseline once, each decided candidate
    once to its end, every run as long as the night's median full run. Cost only."""

    runs: int              # 1 (the baseline) + the candidates decided by a run
    median_s: float        # the median duration of the night's full runs (ok, not stopped)
    night_s: float         # what the night's runs took, every run

    @property
    def estimate_s(self) -> float:
        return self.runs * self.median_s

    @property
    def ratio(self) -> float | None:
        """The night's run time as a multiple of the single-run rule's."""
        return self.night_s / self.estimate_s if self.estimate_s > 0 else None

    def line(self) -> str:
        ratio = f" ({self.ratio:.2f}x)" if self.ratio is not None else ""
        return (f"the single-run rule: {self.runs} runs, about {run_time(self.estimate_s)} on these "
                f"proposals; this night: {run_time(self.night_s)}{ratio}; a cost estimate only: "
                f"its keeps would differ")

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "median_s": self.median_s, "estimate_s": self.estimate_s,
                "night_s": self.night_s, "ratio": self.ratio, "line": self.line()}


def run_time(seconds: float) -> str:
    """Run time as a person reads it: 36 s, 14.5 min, 3.2 h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def estimated_improvement(state: LoopState, direction: Direction | str) -> dict[str, Any] | None:
    """The night's headline: the incumbent on its fresh seeds against the baseline on its
    own, in the program's direction (positive = better), with a 95% interval; None when
    nothing was kept or the incumbent is not measured yet."""
    from agent.decide.decision import mean_difference

    if not state.incumbent or state.incumbent == state.base_commit:
        return None
    incumbent, base = state.reference(state.incumbent), state.reference(state.base_commit or "")
    if not incumbent or not base:
        return None
    found = mean_difference(incumbent, base)
    sign = Direction(direction).sign
    interval = sorted(sign * bound for bound in found.interval) if found.interval else None
    return {"value": sign * found.estimate, "interval": interval, "level": found.level,
            "paired": found.paired, "n_incumbent": found.n_a, "n_baseline": found.n_b}


def recorded_calibration(folder: Path) -> frozenset[int] | None:
    """The calibration seeds of the program the night recorded when it started (its ledger's
    `loop_started`), not of program.md as it reads now: it may have changed since."""
    started = next((e for e in read_events(folder) if isinstance(e, LoopStarted)), None)
    return calibration_seeds(started.program if started else None)


def calibration_seeds(program: Mapping[str, Any] | None) -> frozenset[int] | None:
    """The keep rule's baseline seeds, from the program the night recorded (loop_started);
    None when it recorded none or names a rule this harness does not know."""
    if not program:
        return None
    try:
        from agent.decide.decision import RuleSettings, SeedPlan
        from agent.decide.rules import make_rule

        seeds = program.get("seeds") or {}
        plan = SeedPlan(**{k: v for k, v in seeds.items() if k in SeedPlan.__dataclass_fields__})
        rule = make_rule(program.get("decision") or "sequential", RuleSettings(seeds=plan))
        return frozenset(rule.baseline_seeds())
    except (ValueError, TypeError):
        return None


def _candidate_seeds(state: LoopState) -> dict[str, set[int]]:
    """commit -> the seeds its candidates (experiments proposed against it) ran on."""
    parent = {e.id: e.parent for e in state.experiments.values()}
    seeds: dict[str, set[int]] = {}
    for run in list(state.runs) + list(state.interrupted):
        if run.role == Role.CANDIDATE and run.experiment in parent:
            seeds.setdefault(parent[run.experiment], set()).add(run.seed)
    return seeds


def _decided_by_a_run(state: LoopState) -> int:
    """How many experiments were decided after a candidate run of theirs (an invalid edit,
    or one decided before any run, never cost a run under either rule)."""
    ran = {run.experiment for run in list(state.runs) + list(state.interrupted)
           if run.role == Role.CANDIDATE and run.experiment}
    return sum(1 for e in state.experiments.values() if e.decision is not None and e.id in ran)


def single_run_cost(state: LoopState) -> SingleRun | None:
    """The single-run rule's run time on the night's proposals (module doc); None before the
    night has a full run to take the length of a run from."""
    full = [run.duration_s for run in state.runs
            if run.ok and run.duration_s and run.run_id not in state.early_stops]
    if not full:
        return None
    night_s = sum(run.duration_s or 0.0 for run in list(state.runs) + list(state.interrupted)
                  if isinstance(run, RunFinished))
    return SingleRun(runs=1 + _decided_by_a_run(state), median_s=statistics.median(full), night_s=night_s)


def night_efficiency(state: LoopState, direction: Direction | str = Direction.MINIMIZE,
                     calibration: Iterable[int] | None = None) -> Efficiency:
    """Every run of the night in one share, and the estimated progress (module doc).
    `calibration`: the rule's baseline seeds (`calibration_seeds(program)`); without them a
    reference run counts as paired when a candidate of its commit ran on its seed."""
    baseline = frozenset(calibration) if calibration is not None else None
    paired_seeds = _candidate_seeds(state) if baseline is None else {}
    counts = dict.fromkeys(SHARES, 0)
    seconds = dict.fromkeys(SHARES, 0.0)
    for run in list(state.runs) + list(state.interrupted):
        if run.run_id in state.early_stops:
            kind = "stopped"
        elif not isinstance(run, RunFinished) or not run.ok:
            kind = "failed"
        elif run.role == Role.CANDIDATE:
            kind = "candidates"
        elif run.role == Role.REFERENCE:
            calibrating = (run.seed in baseline if baseline is not None
                           else run.seed not in paired_seeds.get(run.commit, set()))
            kind = "calibration" if calibrating else "paired"
        else:
            kind = "other"
        counts[kind] += 1
        # what it ran: a stopped or cut-off run's own seconds; never-finished ones recorded none
        seconds[kind] += (run.duration_s or 0.0) if isinstance(run, RunFinished) else 0.0
    found = estimated_improvement(state, direction)
    return Efficiency(**counts, run_s=sum(seconds.values()), seconds=seconds,
                      single_run=single_run_cost(state),
                      improvement=found["value"] if found else (0.0 if not state.kept() else None),
                      interval=tuple(found["interval"]) if found and found["interval"] else None,
                      kept=len(state.kept()))
