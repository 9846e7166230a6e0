"""The morning's commands: `nightshift status`, `replay` and `report`."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from agent.cli.common import ProgramOpt, console, err, existing_loop, fail, load
from agent.program import Program
from agent.record.events import ExitCode, ReplayCommit, ReplayRun, ReplaySummary


def _tag_dir(program: Program, tag: Optional[str]) -> tuple[str, Path]:
    from agent.night.session import default_tag

    tag = tag or default_tag()
    return tag, existing_loop(program, tag)


def status(
    tag: Optional[str] = typer.Option(None, help="The loop to show (default: today's tag)."),
    program: Path = ProgramOpt,
) -> None:
    """The state of a loop at a glance: experiments, keeps, best metric, the run in flight."""
    from agent.cli.display import print_status

    prog = load(program, {})
    print_status(console, existing_loop(prog, tag), prog.metric, direction=prog.direction)


def replay(
    commits: list[str] = typer.Argument(None, help="Commits to replay (sha, short sha or ref)."),
    kept: bool = typer.Option(False, "--kept", help="Replay every kept commit of the tag, and its base."),
    tag: Optional[str] = typer.Option(None, help="The loop whose commits to replay (default: today's tag)."),
    budget: Optional[str] = typer.Option(None, help="Training budget per run, e.g. 600s "
                                         "(default: full_scale.budget of program.md)."),
    seeds: Optional[int] = typer.Option(None, min=1, help="Seeds per commit, 0..N-1 "
                                        "(default: full_scale.seeds)."),
    split: str = typer.Option("val", help="val (as during the night) or test (held out)."),
    parents: bool = typer.Option(True, help="Also replay each commit's parent, to measure its "
                                 "effect at this scale."),
    sandbox: Optional[str] = typer.Option(None, help="auto | local | docker (default: program.md)."),
    program: Path = ProgramOpt,
) -> None:
    """Re-run kept (or given) commits at full scale: reproduced? effect at scale? env changed?

    With the night's budget and split it checks reproduction (does each metric land within the
    seed noise of the night's?); with a longer budget, more seeds or --split test it puts each
    kept commit's effect at scale next to the effect the night decided on, with the rank
    correlation between the two. Results go to the tag's ledger as `replay` events.
    """
    from agent.night.lock import TagLocked
    from agent.program import parse_duration
    from agent.review.replay import ReplaySettings, build_replayer, plan_targets
    from agent.workspace.repo import WorkspaceError
    from sandbox import SandboxUnavailable

    prog = load(program, {})
    tag, _ = _tag_dir(prog, tag)
    if not kept and not commits:
        raise fail("nothing to replay: pass --kept or one or more commits.")
    if split not in ("val", "test"):
        raise fail(f"--split {split!r}: choose val or test.")
    try:
        budget_s = parse_duration(budget) if budget else prog.full_scale.budget_s
    except Exception:
        raise fail(f"--budget {budget!r}: expected a duration like 120s or 10m.") from None
    settings = ReplaySettings(budget_s=budget_s, seeds=tuple(range(seeds or prog.full_scale.seeds)),
                              split=split)
    try:
        replayer, workspace = build_replayer(prog, tag, settings, sandbox=sandbox or prog.sandbox,
                                             on_event=_print_run)
        resolved = [workspace.resolve(c) for c in commits or []]
    except SandboxUnavailable as error:
        raise fail(str(error), ExitCode.LOOP) from None
    except TagLocked as error:
        raise fail(str(error), ExitCode.BUSY) from None
    except (WorkspaceError, FileNotFoundError, RuntimeError, ValueError) as error:
        raise fail(str(error)) from None
    for warning in replayer.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    targets = plan_targets(replayer.state, kept=kept, commits=resolved, parent_of=workspace.parent,
                           with_parents=parents)
    if kept and not replayer.state.kept() and not resolved:
        console.print("[yellow]no kept commits on this tag yet: replaying the base only[/yellow]")
    console.print(f"replay {replayer.replay_id}: {len(targets)} commits x {len(settings.seeds)} seeds "
                  f"at {settings.budget_s:g}s on {settings.split} "
                  f"(night: {replayer.original_budget_s or '?'}s on {replayer.original_split})")
    try:
        summary = replayer.replay(targets, settings)
    except KeyboardInterrupt:
        err.print("\ninterrupted: the replay events recorded so far stay in the ledger.")
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    finally:
        workspace.close()
    _print_summary(replayer, summary, prog.metric)


def _print_run(event: Any) -> None:
    if not isinstance(event, ReplayRun):
        return
    value = f"{event.metric:.4f}" if event.metric is not None else event.status.value
    changed = "  [yellow]environment changed[/yellow]" if event.env_changed else ""
    console.print(f"  {event.commit[:8]} seed {event.seed}: {value} "
                  f"({event.duration_s or 0:.1f}s){changed}")


def _fmt(value: Any, spec: str = "+.4f") -> str:
    return "-" if value is None else format(value, spec)


def _interval(values: Any) -> str:
    return "-" if not values else f"[{values[0]:+.4f}, {values[1]:+.4f}]"


def _print_summary(replayer: Any, summary: ReplaySummary, metric: str) -> None:
    """One block per commit (narrow terminals and logs read it as well as wide ones)."""
    rows = [e for e in replayer.events if isinstance(e, ReplayCommit)]
    console.print(f"\n[bold]replay {replayer.replay_id}[/bold] ({metric}; effects are improvements, "
                  "positive = better)")
    for row in rows:
        rep = row.reproduce
        label = f"{row.commit[:8]} {row.experiment or ''} ({row.target_role})".replace("  ", " ")
        original = row.original
        selection = ", selection runs" if original.get("kind") == "selection" else ""
        failed = f", {row.n_failed} failed" if row.n_failed else ""
        console.print(f"[bold]{label}[/bold]  night {_fmt(original.get('mean'), '.4f')} "
                      f"(n={original.get('n')}{selection})  replay {_fmt(row.mean, '.4f')} "
                      f"(n={row.n_ok}{failed})")
        verdict = {True: "[green]yes[/green]", False: "[red]no[/red]"}.get(rep.get("reproduced"))
        if verdict:
            console.print(f"    reproduced: {verdict}, difference {_fmt(rep.get('difference'))} "
                          f"{_interval(rep.get('interval'))}")
        else:
            console.print(f"    reproduced: n/a ({rep.get('why', '')})")
        if row.proxy_effect is not None or row.full_effect is not None:
            console.print(f"    effect vs parent: proxy {_fmt(row.proxy_effect)} "
                          f"{_interval(row.proxy_interval)}, at this scale "
                          f"{_fmt(row.full_effect)} {_interval(row.full_interval)}")
        for diff in row.env_diff:
            kind = "[yellow]environment changed[/yellow]" if diff["material"] else "[dim]differs (informational)[/dim]"
            console.print(f"    {kind}: {diff['field']}: {diff['original']!r} -> {diff['current']!r}")
    for name, rank in (("effects, kept commits (proxy vs this scale)", summary.rank_effects),
                       ("metric values (night vs replay)", summary.rank_values)):
        rho = "n/a" if rank.get("rho") is None else f"{rank['rho']:+.2f}"
        console.print(f"Spearman rank correlation of {name}: {rho} (n={rank.get('n')})")
    if not summary.reproduce:
        console.print("[dim]reproduced: n/a because the budget or split differs from the night's; "
                      "replay with the night's budget and split to check reproduction.[/dim]")


def report(
    tag: Optional[str] = typer.Option(None, help="The loop to report on (default: today's tag)."),
    out: Optional[Path] = typer.Option(None, help="Where to write the HTML "
                                       "(default: results/<tag>/report.html)."),
    open_: bool = typer.Option(False, "--open", help="Open the report in a web browser."),
    program: Path = ProgramOpt,
) -> None:
    """Write the morning report: one self-contained HTML page plus a PNG of the progress chart."""
    from agent.review.report import write_report

    prog = load(program, {})
    tag, folder = _tag_dir(prog, tag)
    written = write_report(folder, out=out, metric=prog.metric, direction=prog.direction,
                           repo=prog.root)
    console.print(f"report: {written.html}")
    if written.png:
        console.print(f"chart:  {written.png}")
    for note in written.notes:
        console.print(f"[dim]{note}[/dim]")
    if open_:
        import webbrowser

        if not webbrowser.open(written.html.resolve().as_uri()):
            err.print(f"no browser found; open {written.html} yourself.")
