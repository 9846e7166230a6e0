"""`nightshift export`: a night's ledger sent to the trackers after the fact, the night that
ran while its tracker was down or without one. A live night logs the same runs as it goes
(agent/publish); this is the same delivery, on the command line's own thread."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agent.cli.common import ProgramOpt, console, err, existing_loop, fail, load, mlflow_flag
from agent.program import Program
from agent.record.records import ExitCode


def export(
    tag: Optional[str] = typer.Option(None, help="The night to export (default: today's tag)."),
    mlflow: Optional[str] = typer.Option(None, "--mlflow", help="The MLflow tracking server, e.g. "
                                         "http://127.0.0.1:5000 (default: program.md's tracking.mlflow.uri)."),
    experiment: Optional[str] = typer.Option(None, "--experiment", help="The MLflow experiment (default: "
                                             "program.md's tracking.mlflow.experiment, nightshift)."),
    wandb: Optional[str] = typer.Option(None, "--wandb", metavar="PROJECT", help="The W&B project "
                                        "(default: program.md's tracking.wandb.project); WANDB_MODE=offline "
                                        "writes files for `wandb sync`."),
    program: Path = ProgramOpt,
) -> None:
    """Send a night to MLflow or W&B as a live night logs it: a run for the night, one per
    experiment (its knobs, prediction, decision), each seed run with its curve, the report.
    With neither flag, to the trackers program.md's `tracking:` names.

    MLflow: what is there already is left as it is, so it completes a night whose server was
    down, or logs one that ran without it; running it twice adds nothing. W&B: what the
    night did not deliver, from where its W&B delivery stopped (results/<tag>/published/);
    the whole night if it ran without W&B."""
    from agent.night.session import default_tag
    from agent.publish import missing_packages
    from agent.publish.settings import Tracking

    prog = load(program, {})
    tag = tag or default_tag()
    folder = existing_loop(prog, tag)
    to_mlflow = dataclasses.replace(prog.tracking.mlflow, uri=mlflow_flag(mlflow) if mlflow else
                                    (None if wandb else prog.tracking.mlflow.uri),
                                    experiment=experiment or prog.tracking.mlflow.experiment)
    to_wandb = dataclasses.replace(prog.tracking.wandb, project=wandb or (None if mlflow else prog.tracking.wandb.project))
    if not to_mlflow.uri and not to_wandb.project:
        raise fail("nothing to export to: pass --mlflow http://HOST:5000 or --wandb PROJECT, or set "
                   "tracking: {mlflow: {uri: ...}} or {wandb: {project: ...}} in program.md")
    problem = missing_packages(Tracking(mlflow=to_mlflow, wandb=to_wandb))
    if problem:
        raise fail(problem)
    if to_mlflow.uri:
        _to_mlflow(prog, tag, folder, to_mlflow)
    if to_wandb.project:
        _to_wandb(prog, tag, folder, to_wandb)


def _to_mlflow(prog: Program, tag: str, folder: Path, settings) -> None:
    from agent.publish.follow import Retry, replay
    from agent.publish.mlflow_sink import MlflowSink
    from agent.record.ledger import read_events

    total = sum(1 for _ in read_events(folder))
    sink = MlflowSink(settings, tag, prog.metric, prog.root, folder)
    where = f"MLflow at {settings.uri}"
    with console.status(f"exporting {tag} to {where}") as shown:
        try:
            failures = replay(folder, sink, lambda n: shown.update(f"exporting {tag} to {where}: "
                                                                   f"event {n} of {total}"))
        except Retry as down:
            raise fail(f"{down}; nothing is lost: `nightshift export` again once it answers",
                       ExitCode.LOOP) from None
        except Exception as fault:      # this side (a package, a file): said, not a traceback
            raise fail(f"MLflow export stopped: {type(fault).__name__}: {fault}; nothing is lost: "
                       f"`nightshift export` again adds only what is missing", ExitCode.LOOP) from None
    for failure in failures:
        err.print(f"[yellow]{escape(failure)}[/yellow]")
    console.print(f"exported {tag}: {total} events to {escape(where)}, experiment "
                  f"{escape(settings.experiment)} ({sink.runs_made} runs made, the rest were there)")


def _to_wandb(prog: Program, tag: str, folder: Path, settings) -> None:
    from agent.preflight.lock import TagLock, TagLocked
    from agent.publish.follow import Follower
    from agent.publish.wandb_sink import WandbSink

    try:     # a night that runs delivers to W&B itself: two deliveries would log its runs twice
        lock = TagLock.acquire(folder, tag)
    except TagLocked as busy:
        raise fail(f"{busy} (its W&B runs are logged as it goes)", ExitCode.BUSY) from None
    said: list[str] = []
    try:
        sink = WandbSink(settings, tag, prog.metric, prog.root, folder)
        follower = Follower(folder, sink, said.append, new_from_start=True, retry_s=())
        with console.status(f"exporting {tag} to W&B project {settings.project}") as shown:
            follower.on_delivered = lambda n: shown.update(f"exporting {tag} to W&B project "
                                                           f"{settings.project}: {n} events")
            done = follower.catch_up()
    finally:
        lock.release()
    for line in said:
        err.print(f"[yellow]{escape(line)}[/yellow]")
    if not done:
        raise fail("W&B: not everything was delivered (said above); nothing is lost: "
                   "`nightshift export --wandb` again goes on from there", ExitCode.LOOP)
    files = f"; offline, in {folder / 'wandb'} for `wandb sync`" if sink.mode == "offline" else ""
    console.print(f"exported {tag}: {follower.delivered} events to W&B project "
                  f"{escape(settings.project)} (the rest were delivered as the night ran){escape(files)}")
