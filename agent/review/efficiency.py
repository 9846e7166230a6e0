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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from agent.record.records import Direction
from agent.record.events import Role, RunFinished
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
        return [{"kind": name, "name": SHARE_NAMES[name], "count": counts[name], "share": shares[name]}
                for name in SHARES if counts[name] or name in SHARES[:4]]

    def shares_line(self) -> str:
        return ", ".join(f"{row['name']} {row['share']:.0%} ({row['count']})" for row in self.rows())

    def to_dict(self) -> dict[str, Any]:
        return {**self.counts(), "runs": self.runs, "shares": self.shares(), "run_s": self.run_s,
                "improvement": self.improvement, "interval": list(self.interval) if self.interval else None,
                "per_run": self.per_run, "per_hour": self.per_hour, "kept": self.kept,
                "line": self.line(), "shares_line": self.shares_line(), "rows": self.rows()}


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


def night_efficiency(state: LoopState, direction: Direction | str = Direction.MINIMIZE,
                     calibration: Iterable[int] | None = None) -> Efficiency:
    """Every run of the night in one share, and the estimated progress (module doc).
    `calibration`: the rule's baseline seeds (`calibration_seeds(program)`); without them a
    reference run counts as paired when a candidate of its commit ran on its seed."""
    baseline = frozenset(calibration) if calibration is not None else None
    paired_seeds = _candidate_seeds(state) if baseline is None else {}
    counts = dict.fromkeys(SHARES, 0)
    run_s = 0.0
    for run in list(state.runs) + list(state.interrupted):
        if isinstance(run, RunFinished):
            run_s += run.duration_s or 0.0
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
    found = estimated_improvement(state, direction)
    return Efficiency(**counts, run_s=run_s,
                      improvement=found["value"] if found else (0.0 if not state.kept() else None),
                      interval=tuple(found["interval"]) if found and found["interval"] else None,
                      kept=len(state.kept()))
