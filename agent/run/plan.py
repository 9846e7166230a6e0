"""The plan of a night's runs: where and how every run happens, fixed for one loop
invocation, made from a Program in one place (`RunPlan.from_program`); and where a tag's
results live."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from agent.program import Program
from agent.run.budget import step_count_of
from agent.run.data import repository_data
from agent.target.overrides import StepCount
from sandbox import Limits
from sandbox.protocol import DataMount


def results_dir(program: Program, tag: str) -> Path:
    """`results/<tag>/` of the repository holding program.md (git-ignored by a results/.gitignore
    of its own, so the user's `git status` stays clean without touching their .gitignore)."""
    folder = program.root / "results" / tag
    ignore = program.root / "results" / ".gitignore"
    if not ignore.exists():
        ignore.parent.mkdir(parents=True, exist_ok=True)
        ignore.write_text("*\n")
    return folder


@dataclass
class RunPlan:
    """Fixed for one loop invocation: where and how every run of the night happens."""

    command: str
    metric: str
    budget_s: float
    grace_s: float
    protected: tuple[str, ...]
    limits: Limits
    split: str = "val"
    extra_env: dict[str, str] = field(default_factory=dict)
    target: str | None = None      # the file the researcher edits; its digest goes in provenance
    result_file: str = "result.json"
    metric_pattern: str | None = None
    metrics_pattern: str | None = None
    python: str | None = None      # what `python` in the command runs (Nightshift's interpreter)
    writable_workdir: bool = False
    mounts: tuple[DataMount, ...] = ()
    keep: tuple[str, ...] | None = None   # program.md's keep: globs (None: result.json + small files)
    evaluate: str | None = None    # the evaluation step's command (None: the script's metric)
    report_tolerance: float = 0.05
    steps: StepCount | None = None        # the run's step count, where the command or target sets it
    view_add: tuple[str, ...] = ()        # program.md's view.add: host paths runs may read too

    @property
    def deadline_s(self) -> float:
        """Wall-clock seconds after which a run (each of its steps) is killed."""
        return self.budget_s + self.grace_s

    @classmethod
    def from_program(cls, program: Program, *, budget_s: float | None = None,
                     split: str = "val") -> "RunPlan":
        """The plan of a night (or, with another budget and split, of a replay) of `program`:
        the one place a Program becomes run settings."""
        limits = Limits(memory_mb=program.limits.memory_mb, pids=program.limits.pids,
                        cpus=program.limits.cpus, gpu=gpu_for_runs())
        mount = repository_data(program.root, program.data)
        return cls(command=program.command, metric=program.metric,
                   budget_s=program.budget_s if budget_s is None else budget_s,
                   grace_s=program.grace_s, protected=tuple(program.protected), limits=limits,
                   split=split, extra_env=dict(program.env), target=program.target,
                   result_file=program.result_file, metric_pattern=program.metric_pattern,
                   metrics_pattern=program.metrics_pattern, python=sys.executable,
                   writable_workdir=True, mounts=(mount,) if mount else (), keep=program.keep,
                   evaluate=program.evaluate, report_tolerance=program.report_tolerance,
                   steps=step_count_of(program), view_add=program.view.add)



def gpu_for_runs() -> int | None:
    """One GPU per run, chosen by the harness: the first one, when there is any."""
    try:
        import torch

        return 0 if torch.cuda.is_available() else None
    except Exception:
        return None
