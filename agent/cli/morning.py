"""The morning's commands: `nightshift status`, `replay` and `report`."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from agent.cli.common import ProgramOpt, console, err, existing_loop, fail, load, reported
from agent.program import Program
from agent.record.events import ChangeStatus, ExitCode, ReplayCommit, ReplayRun, ReplaySummary


def _tag_dir(program: Program, tag: Optional[str]) -> tuple[str, Path]:
    from agent.night.session import default_tag

    tag = tag or default_tag()
    return tag, existing_loop(program, tag)


def status(
    tag: Optional[str] = typer.Option(None, help="The loop to show (default: today's tag)."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON document instead (schema "
                               "nightshift.status/1, docs/json.md): for agents and scripts."),
    program: Path = ProgramOpt,
) -> None:
    """The state of a loop at a glance: experiments, keeps, best metric, the run in flight."""
    from agent.cli.display import print_status

    prog = load(program, {})
    if json_:
        from agent.cli.show import print_document
        from agent.interface.operations import status as status_document

        with reported():
            print_document(status_document(prog, tag))
        return
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
    from agent.preflight.lock import TagLocked
    from agent.program import parse_duration
    from agent.review.replay import FullScaleRuns, build_replayer, plan_targets
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
    settings = FullScaleRuns(budget_s=budget_s, seeds=tuple(range(seeds or prog.full_scale.seeds)),
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


def ablate(
    tag: Optional[str] = typer.Option(None, help="The loop whose kept changes to ablate (default: today's tag)."),
    budget: Optional[str] = typer.Option(None, help="Training budget per run, e.g. 600s "
                                         "(default: full_scale.budget of program.md); less for a cheaper look."),
    seeds: Optional[int] = typer.Option(None, min=2, help="Fresh seeds every variant runs on "
                                        "(default: full_scale.seeds); fewer for a cheaper look."),
    workers: Optional[str] = typer.Option(None, help="Runs in flight at once (default: program.md's workers)."),
    cluster: Optional[str] = typer.Option(None, help="Where runs execute: local or ray "
                                          "(default: program.md's cluster)."),
    cluster_address: Optional[str] = typer.Option(None, "--cluster-address",
                                                  help="The Ray cluster's address."),
    sandbox: Optional[str] = typer.Option(None, help="auto | local | docker (default: program.md)."),
    program: Path = ProgramOpt,
) -> None:
    """Leave one out at full scale: what each kept change still contributes to the incumbent.

    For each kept commit, the final incumbent with that change reverted (a three-way merge, as
    the rebase does; a revert that conflicts is reported, not guessed) runs beside the incumbent
    and the base on the same fresh seeds, paired. Prints each change's contribution with its 95%
    interval and p-value (Holm-adjusted beside it), the whole gain, and the interaction the sum
    of the contributions does not explain. Recorded in the tag's ledger; shown by `report` and
    `serve`."""
    from agent.preflight.lock import TagLocked
    from agent.program import parse_duration
    from agent.review.ablate import ABLATION_SEEDS, AblationError, build_ablator
    from agent.review.replay import FullScaleRuns
    from agent.workspace.repo import WorkspaceError
    from cluster.protocol import ClusterUnavailable
    from sandbox import SandboxUnavailable

    prog = load(program, {"workers": workers, "cluster": cluster, "cluster_address": cluster_address})
    tag, _ = _tag_dir(prog, tag)
    try:
        budget_s = parse_duration(budget) if budget else prog.full_scale.budget_s
    except Exception:
        raise fail(f"--budget {budget!r}: expected a duration like 120s or 10m.") from None
    count = seeds or prog.full_scale.seeds
    settings = FullScaleRuns(budget_s=budget_s,
                                seeds=tuple(range(ABLATION_SEEDS, ABLATION_SEEDS + count)))
    try:
        assembled = build_ablator(prog, tag, settings, sandbox=sandbox or prog.sandbox,
                                  on_event=_print_ablation_run)
    except TagLocked as error:
        raise fail(str(error), ExitCode.BUSY) from None
    except (SandboxUnavailable, ClusterUnavailable) as error:
        raise fail(str(error), ExitCode.LOOP) from None
    except (AblationError, WorkspaceError, FileNotFoundError, RuntimeError, ValueError) as error:
        raise fail(str(error)) from None
    variants = assembled.variants
    runnable = [v for v in variants if v.commit is not None]
    console.print(f"ablation {assembled.ablator.ablation_id}: {len(variants) - 2} kept changes, "
                  f"{len(runnable)} variants x {count} seeds at {budget_s:g}s "
                  f"(seeds {settings.seeds[0]}..{settings.seeds[-1]}, never used by the night)")
    for variant in variants:
        if variant.status != ChangeStatus.PLANNED:
            console.print(f"  [yellow]{variant.name} {variant.status}[/yellow]: {variant.reason}")
    try:
        summary = assembled.ablator.ablate(variants, settings)
    except KeyboardInterrupt:
        err.print("\ninterrupted: the ablation's runs recorded so far stay in the ledger.")
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    except ClusterUnavailable as error:
        raise fail(str(error), ExitCode.LOOP) from None
    finally:
        assembled.close()
    _print_ablation(assembled.ablator.events, summary, prog.metric)


def _print_ablation_run(event: Any) -> None:
    from agent.record.events import AblationRun

    if isinstance(event, AblationRun):
        value = f"{event.metric:.4f}" if event.metric is not None else event.status.value
        console.print(f"  {event.variant:<10} {event.commit[:8]} seed {event.seed}: {value} "
                      f"({event.duration_s or 0:.1f}s)")


def _print_ablation(events: list[Any], summary: Any, metric: str) -> None:
    from agent.record.events import AblationChange

    console.print(f"\n[bold]ablation {summary.ablation_id}[/bold] ({metric}; a contribution is what "
                  f"removing the change costs the incumbent, positive = it helps; "
                  f"{summary.level:.0%} intervals, paired on {len(summary.seeds)} seeds)")
    for change in (e for e in events if isinstance(e, AblationChange)):
        head = f"{change.experiment} {change.commit[:8]}  {change.description[:60]}"
        if change.status != ChangeStatus.MEASURED:
            console.print(f"  {head}\n    [yellow]{change.status}[/yellow]: {change.reason}")
            continue
        matters = _matters(change.interval)
        console.print(f"  {head}\n    contribution {_fmt(change.contribution)} "
                      f"{_interval(change.interval)} p={_fmt(change.p_value, '.3g')} "
                      f"(Holm {_fmt(change.p_adjusted, '.3g')}) on {change.n} seeds  {matters}")
    console.print(f"  whole gain, incumbent vs base: {_fmt(summary.full_gain)} "
                  f"{_interval(summary.full_interval)} p={_fmt(summary.full_p, '.3g')}")
    console.print(f"  sum of the contributions: {_fmt(summary.sum_contributions)} "
                  f"({len(summary.measured)} changes)")
    console.print(f"  interaction (gain − sum): {_fmt(summary.interaction)} "
                  f"{_interval(summary.interaction_interval)} p={_fmt(summary.interaction_p, '.3g')}"
                  + (f"; includes the share of {', '.join(summary.not_measured)} (not measured)"
                     if summary.not_measured else ""))


def _matters(interval: Any) -> str:
    if not interval:
        return "[dim]too few seeds to tell[/dim]"
    if interval[0] > 0:
        return "[green]helps[/green]"
    if interval[1] < 0:
        return "[red]hurts[/red]"
    return "[dim]not distinguishable from 0[/dim]"


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
