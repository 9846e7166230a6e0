"""The `nightshift` command line.

Exit codes scripts can rely on:
  0  finished: a stop rule held (--max-experiments, --hours)
  1  bad input: program.md, a flag, the repository (the message names the fix)
  2  usage error (unknown flag, missing argument)
  3  the researcher stopped the loop (cost cap reached, API unavailable, script exhausted)
  4  the loop could not go on (the incumbent fails to run, the sandbox is unavailable)
  130 interrupted with Ctrl-C (the ledger is closed cleanly; `run --tag` resumes)
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from agent.record.ledger import Ledger, fold, read_events

app = typer.Typer(
    help="Nightshift: an autonomous ML research loop you can trust with your GPUs overnight.\n\n"
         "It edits one training script under git, runs time-budgeted experiments in a sandbox, "
         "keeps a commit only when the improvement is statistically real, and records "
         "everything in results/<tag>/.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
# Logs and pipes get a wide console: rich's 80-column default folds every table row.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True, highlight=False)

EXIT_BAD_INPUT, EXIT_RESEARCHER, EXIT_LOOP, EXIT_INTERRUPTED = 1, 3, 4, 130

ProgramOpt = typer.Option(Path("program.md"), "--program", "-p",
                          help="The research program: YAML front matter + prose.")


def _load(program_path: Path, overrides: dict):
    from agent.program import ProgramError, load_program

    try:
        return load_program(program_path, {k: v for k, v in overrides.items() if v is not None})
    except FileNotFoundError:
        err.print(f"[red]error:[/red] {program_path}: no such file. Run from the repository that "
                  "holds program.md, or pass --program PATH.")
        raise typer.Exit(EXIT_BAD_INPUT)
    except ProgramError as error:
        err.print(f"[red]error:[/red] {error}")
        raise typer.Exit(EXIT_BAD_INPUT)


@app.command()
def run(
    tag: Optional[str] = typer.Option(None, help="Name of this loop; its branch is nightshift/<tag> "
                                      "and its records results/<tag>/. Reusing a tag resumes it. "
                                      "Default: today's date, e.g. nov30."),
    max_experiments: Optional[int] = typer.Option(None, "--max-experiments", "-n", min=1,
                                                  help="Stop after this many experiments in this invocation."),
    hours: Optional[float] = typer.Option(None, help="Stop after this many hours (no new run starts later)."),
    budget: Optional[str] = typer.Option(None, help="Training budget per run, e.g. 60s or 5m "
                                         "(overrides program.md)."),
    researcher: Optional[str] = typer.Option(None, help="auto | optuna | scripted | claude."),
    sandbox: Optional[str] = typer.Option(None, help="auto | local | docker."),
    script: Optional[Path] = typer.Option(None, help="Proposals file for the scripted researcher."),
    hypothesis: list[str] = typer.Option([], "--hypothesis", "-H",
                                         help="A hypothesis to test first (repeatable)."),
    seed: int = typer.Option(0, help="Seed of the researcher's own randomness (not the runs')."),
    max_usd: Optional[float] = typer.Option(None, "--max-usd", min=0,
                                            help="Stop cleanly once the LLM researcher has spent this "
                                                 "many dollars (counted across resumes)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1,
                                             help="Stop cleanly once the LLM researcher has used this "
                                                  "many tokens (counted across resumes)."),
    program: Path = ProgramOpt,
) -> None:
    """Run the research loop (resumes the tag if it exists)."""
    from agent.cli.display import RichObserver
    from agent.night.loop import LoopError, StopRules
    from agent.researchers import ResearcherError
    from agent.night.session import build_session, default_tag
    from sandbox import SandboxUnavailable

    prog = _load(program, {"budget": budget, "researcher": researcher, "sandbox": sandbox,
                           "claude.max_usd": max_usd, "claude.max_tokens_total": max_tokens})
    tag = tag or default_tag()
    observer = RichObserver(console, metric=prog.metric)
    try:
        session = build_session(prog, tag, researcher=prog.researcher, sandbox=prog.sandbox,
                                observer=observer, script=script, seed=seed)
    except SandboxUnavailable as error:
        err.print(f"[red]error:[/red] {error}")
        raise typer.Exit(EXIT_LOOP)
    except (ValueError, ResearcherError, RuntimeError) as error:
        err.print(f"[red]error:[/red] {error}")
        raise typer.Exit(EXIT_BAD_INPUT)
    for note in session.notes:
        console.print(f"[dim]{note}[/dim]")
    for text in hypothesis:
        _queue(session.loop.ledger, text, origin="cli")
    try:
        reason = session.loop.run(StopRules(max_experiments=max_experiments, hours=hours))
    except KeyboardInterrupt:
        err.print(f"\ninterrupted: the ledger is closed; `nightshift run --tag {tag}` resumes.")
        raise typer.Exit(EXIT_INTERRUPTED)
    except ResearcherError as error:
        err.print(f"[red]researcher stopped:[/red] {error}")
        raise typer.Exit(EXIT_RESEARCHER)
    except (LoopError, SandboxUnavailable) as error:
        err.print(f"[red]loop stopped:[/red] {error}")
        raise typer.Exit(EXIT_LOOP)
    console.print(f"stopped: {reason}")
    _print_status(session.results, prog.metric)


def _queue(ledger: Ledger, text: str, origin: str) -> str:
    state = fold(ledger.events())
    hypothesis_id = f"h{len(state.hypotheses) + 1:03d}"
    ledger.append("hypothesis_queued", hypothesis_id=hypothesis_id, text=text.strip(), origin=origin)
    console.print(f"queued {hypothesis_id}: {text.strip()}")
    return hypothesis_id


@app.command()
def seed(
    text: str = typer.Argument(..., help="The hypothesis, in words (e.g. 'try LR=1e-3')."),
    tag: Optional[str] = typer.Option(None, help="The loop to seed (default: today's tag)."),
    program: Path = ProgramOpt,
) -> None:
    """Queue a hypothesis for a loop, even while it runs: it is tested before new ideas."""
    prog = _load(program, {})
    _queue(Ledger(existing_loop(prog, tag)), text, origin="seed")


@app.command()
def status(
    tag: Optional[str] = typer.Option(None, help="The loop to show (default: today's tag)."),
    program: Path = ProgramOpt,
) -> None:
    """The state of a loop at a glance: experiments, keeps, best metric, the run in flight."""
    prog = _load(program, {})
    _print_status(existing_loop(prog, tag), prog.metric)


def existing_loop(prog, tag: Optional[str]) -> Path:
    """The results folder of a loop that has started, or exit 1 naming the tags that exist."""
    from agent.night.session import default_tag, results_dir

    tag = tag or default_tag()
    folder = results_dir(prog, tag)
    if not (folder / "ledger.jsonl").exists():
        known = sorted(p.parent.name for p in (prog.root / "results").glob("*/ledger.jsonl"))
        err.print(f"[red]error:[/red] no loop at {folder}; start one with `nightshift run --tag {tag}`. "
                  f"Known tags: {', '.join(known) or 'none'}.")
        raise typer.Exit(EXIT_BAD_INPUT)
    return folder


def _print_status(folder: Path, metric: str) -> None:
    from agent.decide.decision import pooled_sd
    from agent.decide.scoring import calibration

    state = fold(read_events(folder))
    counts: dict[str, int] = {}
    for experiment in state.experiments.values():
        counts[experiment.verdict or "running"] = counts.get(experiment.verdict or "running", 0) + 1
    reference = list(state.reference(state.incumbent).values()) if state.incumbent else []
    base = list(state.reference(state.base_commit).values()) if state.base_commit else []
    sd, dof = pooled_sd(state.noise_groups())
    console.print(f"[bold]{folder.name}[/bold]: {len(state.experiments)} experiments "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items())) or 'none yet'})")
    if base:
        console.print(f"  baseline  {state.base_commit[:8]}  {metric} {_mean_sd(base)}")
    if reference:
        console.print(f"  incumbent {state.incumbent[:8]}  {metric} {_mean_sd(reference)}"
                      "  (fresh seeds, not the runs that selected it)")
    if sd is not None:
        console.print(f"  seed noise: sd {sd:.4f} ({dof} degrees of freedom, pooled over commits)")
    cal = calibration((e.decision or {}).get("score") for e in state.experiments.values())
    if cal["n"]:
        console.print(f"  predictions: direction right {cal['direction_accuracy']:.0%}, intervals "
                      f"covered {cal['coverage']:.0%} at claimed {cal['claimed_confidence']:.0%} "
                      f"(n={cal['n']})")
    from agent.researchers.usage import read_usage

    usage = read_usage(folder)
    if usage:
        console.print(f"  researcher cost: ${usage.get('usd', 0):.2f}, "
                      f"{usage.get('input_tokens', 0):,} input + {usage.get('output_tokens', 0):,} output "
                      f"tokens ({usage.get('cache_read_input_tokens', 0):,} cache reads) over "
                      f"{usage.get('calls', 0)} calls")
    if state.in_flight:
        run = state.in_flight
        console.print(f"  in flight: {run.get('experiment') or 'incumbent'} seed {run['seed']} "
                      f"{run['role']} since {run['time']}")
    if state.stopped_reason:
        console.print(f"  last stop: {state.stopped_reason}")
    table = Table(show_edge=False, pad_edge=False)
    for column in ("id", "commit", "verdict", "effect", "p", "seeds", "prediction", "description"):
        table.add_column(column)
    for experiment in list(state.experiments.values())[-15:]:
        decision = (experiment.decision or {}).get("decision") or {}
        score = (experiment.decision or {}).get("score") or {}
        effect = decision.get("effect")
        p = decision.get("p_value")
        held = "" if not score else ("held" if score.get("covered") else "missed")
        table.add_row(experiment.id, (experiment.commit or "-")[:8], experiment.verdict or "running",
                      f"{effect:+.4f}" if effect is not None else "-",
                      f"{p:.3g}" if p is not None else "-",
                      str(len(decision.get("seeds", []))), held, experiment.description[:50])
    if state.experiments:
        console.print(table)


@app.command()
def noise(
    commit: Optional[str] = typer.Option(None, help="Commit (any git revision) to measure; "
                                         "default: the tag's incumbent, or HEAD for a new tag."),
    seeds: int = typer.Option(6, min=2, help="How many seeds to run it on."),
    tag: Optional[str] = typer.Option(None, help="The loop whose noise estimate to extend "
                                      "(default: today's tag)."),
    budget: Optional[str] = typer.Option(None, help="Training budget per run (default: program.md's)."),
    sandbox: Optional[str] = typer.Option(None, help="auto | local | docker."),
    program: Path = ProgramOpt,
) -> None:
    """Measure seed-to-seed noise of a commit and suggest seeds and min_effect for program.md.

    The runs are recorded in the tag's ledger (role "noise"): they sharpen the loop's pooled
    noise estimate but never serve as an incumbent's reference."""
    from agent.cli.display import RichObserver
    from agent.decide.noise import suggest_settings
    from agent.night.session import build_session, default_tag

    prog = _load(program, {"budget": budget, "sandbox": sandbox})
    tag = tag or default_tag()
    try:
        session = build_session(prog, tag, researcher="optuna", sandbox=prog.sandbox,
                                observer=RichObserver(console, metric=prog.metric))
    except (ValueError, RuntimeError) as error:
        err.print(f"[red]error:[/red] {error}")
        raise typer.Exit(EXIT_BAD_INPUT)
    loop = session.loop
    state = loop.state()
    sha = loop.workspace.resolve(commit) if commit else (state.incumbent or loop.workspace.head())
    console.print(f"measuring {sha[:8]} on {seeds} seeds of {prog.budget_s:g}s")
    try:
        for seed in range(NOISE_SEEDS, NOISE_SEEDS + seeds):
            if seed not in state.ok_values(sha, role="noise"):
                loop.measure(sha, seed, "noise", None, "noise measurement")
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED)
    state = loop.state()
    values = list(state.ok_values(sha, role="noise").values())
    if len(values) < 2:
        err.print("[red]error:[/red] fewer than two runs succeeded; see the logs under "
                  f"{session.results / 'runs'}")
        raise typer.Exit(EXIT_LOOP)
    console.print(f"{sha[:8]}: {prog.metric} {_mean_sd(values)}")
    per_commit = {c: state.ok_values(c) for c in {r["commit"] for r in state.runs}}
    per_commit = {c: v for c, v in per_commit.items() if len(v) >= 2}
    advice = suggest_settings(per_commit, alpha=prog.alpha)
    console.print(f"pooled seed noise: sd {advice['noise_sd']:.4f} ({advice['dof']} dof over "
                  f"{len(per_commit)} commits); same-seed shared fraction {advice['seed_share']:.2f}")
    plan = advice["seeds"]
    console.print("suggested for program.md:")
    console.print(f"  seeds: {{baseline: {plan['baseline']}, screen: {plan['screen']}, max: {plan['max']}}}")
    console.print(f"  min_effect: {advice['min_effect']:.4f}")
    for key, why in advice["reasons"].items():
        console.print(f"  [dim]{key}: {why}[/dim]")


NOISE_SEEDS = 900_000   # far from the decision rule's calibration and pairing seeds


def _mean_sd(values: list[float]) -> str:
    spread = f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.4f}{spread} (n={len(values)})"


from agent.cli.morning import register  # noqa: E402  (replay and report)
register(app)


def main() -> None:  # pragma: no cover - the console script calls `app`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
