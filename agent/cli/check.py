"""`nightshift check`: a preflight of program.md and the script, before a night starts.

Runs the incumbent (HEAD) briefly on two seeds and prints one line per check (program valid,
target and knobs, prepare step, data folder, sandbox, interpreter, metric found, seeds change
the result, budget respected, nothing written outside the allowed places, knobs live (each knob
moved in a short probe run changes what the script prints; --allow-dead-knobs makes a dead one
a warning), checkout untouched); exits 0 when all hold, 1 listing every problem with its fix. The logic lives in
agent.preflight.check.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agent.cli.common import ProgramOpt, console
from agent.record.events import ExitCode


def check(
    sandbox: Optional[str] = typer.Option(None, help="auto | local | docker (as for run)."),
    budget: Optional[str] = typer.Option(None, help="Training budget per run, e.g. 60s "
                                         "(default: program.md's, as a night would run)."),
    allow_dead_knobs: bool = typer.Option(False, "--allow-dead-knobs", help="A knob whose probe "
                                          "changed nothing the script printed is a warning, not a failure."),
    program: Path = ProgramOpt,
) -> None:
    """Check program.md and the training script before a night: runs HEAD on two seeds and
    says what would go wrong (seeds ignored, budget overrun, no metric, ...) with the fix."""
    from agent.preflight.checks import Checklist
    from agent.preflight.check import preflight
    from agent.program import ProgramError, load_program, parse_duration

    try:
        prog = load_program(program, {"sandbox": sandbox})
        budget_s = parse_duration(budget) if budget else None
    except (ProgramError, ValueError) as error:
        verdict = Checklist()
        verdict.add("program valid", False, str(error), "edit program.md as the message says")
        _print(verdict)
        raise typer.Exit(ExitCode.BAD_INPUT) from None
    verdict = preflight(prog, sandbox=prog.sandbox, budget_s=budget_s, dead_knobs_ok=allow_dead_knobs,
                        say=lambda text: console.print(text, markup=False, highlight=False, style="dim"))
    _print(verdict)
    raise typer.Exit(ExitCode.BAD_INPUT if verdict.problems else ExitCode.OK)


def _print(verdict) -> None:
    for line in verdict.lines():
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if not verdict.problems:
        console.print("all checks passed: `nightshift run` can start the night", markup=False)
