"""The night's commands: `nightshift run`, `seed` and `noise`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agent.cli.common import (CTRL_C, ProgramOpt, console, err, existing_loop, fail, interruptible, load,
                              mlflow_flag)
from agent.cli.serve import page_url, start_beside_night
from agent.preflight.failures import describe_error
from agent.record.events import ExitCode, HypothesisQueued, Role
from agent.record.ledger import Ledger
from agent.researchers.registry import RESEARCHER_NAMES

NOISE_SEEDS = 900_000   # far from the decision rule's calibration and pairing seeds


@interruptible
def run(
    tag: Optional[str] = typer.Option(None, help="Name of this loop; its branch is nightshift/<tag> "
                                      "and its records results/<tag>/. Reusing a tag resumes it. "
                                      "Default: today's date, e.g. nov30."),
    max_experiments: Optional[int] = typer.Option(None, "--max-experiments", "-n", min=1,
                                                  help="Stop after this many experiments in this invocation."),
    hours: Optional[float] = typer.Option(None, min=0, help="Stop after this many hours (no new run starts later)."),
    minutes: Optional[float] = typer.Option(None, min=0, help="Stop after this many minutes (no new run "
                                            "starts later; the quick start's bound). Not with --hours."),
    budget: Optional[str] = typer.Option(None, help="Training budget per run, e.g. 60s or 5m "
                                         "(overrides program.md)."),
    compute: Optional[str] = typer.Option(None, help="What a keep may spend against the incumbent's "
                                          "run time: equal (within run-time noise), a share more "
                                          "like +25%, or free (overrides program.md's compute:)."),
    researcher: Optional[str] = typer.Option(None, help=" | ".join(RESEARCHER_NAMES) + "."),
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
    workers: Optional[str] = typer.Option(None, help="Runs in flight at once: a number, or auto "
                                          "(one per visible GPU, else 1). Each worker gets its own "
                                          "GPU, or its share of the CPU cores. On Slurm: jobs "
                                          "queued or running at once."),
    overlap: Optional[bool] = typer.Option(None, "--overlap/--no-overlap",
                                           help="Let the researcher prepare the next proposal while "
                                                "runs train (default: on)."),
    cluster: Optional[str] = typer.Option(None, help="Where runs execute: local (this machine), "
                                          "ray (a Ray cluster at $RAY_ADDRESS or --cluster-address; "
                                          "pip install -e '.\\[ray]') or slurm (each run a Slurm job; "
                                          "program.md's slurm: table, shared_dir required; "
                                          "pip install -e '.\\[slurm]')."),
    cluster_address: Optional[str] = typer.Option(None, "--cluster-address",
                                                  help="The Ray cluster's address, e.g. 10.0.0.5:6379."),
    fresh: bool = typer.Option(False, "--fresh", help="Start a tag over whose results folder is "
                               "gone but whose git refs remain; the old refs are kept under "
                               "refs/nightshift-archive/<tag>-<time>/."),
    allow_dirty: bool = typer.Option(False, "--allow-dirty", help="Run HEAD as committed although "
                                     "the target or protected files have uncommitted changes "
                                     "(they are not used)."),
    agent_silence: Optional[str] = typer.Option(
        None, "--agent-silence", help="With --researcher external: stop the night when the agent "
        "proposes nothing for this long after the night's last news (a decision), e.g. 30m "
        "(default 60m). Time the agent spends waiting on runs does not count."),
    detach: bool = typer.Option(False, "--detach", help="Run the night in the background, in a "
                                "session of its own (its output in results/<tag>/night.log): "
                                "returns once it holds the tag, with its PID, or with its error. "
                                "For agents, whose shell ends what a command leaves running."),
    as_json: bool = typer.Option(False, "--json", help="With --detach: print one JSON document "
                                 "(nightshift.started/1, docs/json.md) once the night holds the tag."),
    serve: bool = typer.Option(False, "--serve", help="Serve the night's live page beside it "
                               "(as `nightshift serve --tag`; it stops with the night)."),
    serve_host: str = typer.Option("127.0.0.1", "--serve-host", help="The page's address (anything "
                                   "but loopback needs the token printed at start)."),
    serve_port: int = typer.Option(8765, "--serve-port", min=0, max=65535,
                                   help="The page's port (0: any free port)."),
    mlflow: Optional[str] = typer.Option(None, "--mlflow", help="Log the night to this MLflow "
                                         "tracking server as it runs (program.md's tracking.mlflow.uri), "
                                         "e.g. http://127.0.0.1:5000: a run per experiment, its seed runs "
                                         "inside; a server that is down never stops the night."),
    program: Path = ProgramOpt,
) -> None:
    """Run the research loop (resumes the tag if it exists)."""
    from agent.cli.display import RichObserver, print_status
    from agent.night.loop import LoopError, StopRules
    from agent.night.session import default_tag
    from agent.researchers import ResearcherError
    from sandbox import SandboxUnavailable

    caps = {f"{llm}.{key}": value for llm in ("claude", "openai")   # whichever researcher runs
            for key, value in (("max_usd", max_usd), ("max_tokens_total", max_tokens))}
    prog = load(program, {"budget": budget, "compute": compute, "researcher": researcher,
                          "sandbox": sandbox, **caps,
                          "workers": workers, "overlap": overlap, "cluster": cluster,
                          "cluster_address": cluster_address})
    tag = tag or default_tag()
    if hours is not None and minutes is not None:
        raise fail("--hours and --minutes both bound the night: give one of them.")
    if mlflow is not None:
        prog = with_mlflow(prog, mlflow)
    from agent.publish import missing_packages

    problem = missing_packages(prog.tracking)
    if problem:
        raise fail(problem)
    if detach:
        detached(prog, tag, as_json)
    elif as_json:
        raise fail("--json goes with --detach: a night in the foreground prints its progress")
    silence_s = None
    if agent_silence is not None:
        from agent.program import parse_duration

        try:
            silence_s = parse_duration(agent_silence)
        except Exception:
            raise fail(f"--agent-silence {agent_silence!r}: expected a duration like 30m or 2h.") from None
    observer = RichObserver(console, metric=prog.metric, results=prog.root / "results" / tag)
    page = start_beside_night(prog, tag, serve_host, serve_port) if serve else None
    try:
        session = open_session(prog, tag, researcher=prog.researcher, observer=observer,
                               script=script, seed=seed, fresh=fresh, allow_dirty=allow_dirty,
                               silence_s=silence_s)
    except BaseException:
        if page is not None:
            page.stop()
        raise
    from agent.publish import start_publishing, stop_publishing

    followers = []
    try:
        followers = start_publishing(prog.hooks, prog.tracking, tag, session.results, root=prog.root,
                                     metric=prog.metric, direction=prog.direction,
                                     say=lambda line: console.print(f"[yellow]{escape(line)}[/yellow]"))
        CTRL_C.check()   # a Ctrl-C Python dropped while the session was assembled
        for note in session.notes:
            console.print(f"[dim]{note}[/dim]")
        if page is not None:
            page.start_in_thread()
            console.print(f"page: {escape(page_url(page, tag))} (live, read-only; it stops with "
                          f"the night, `nightshift serve` shows it again)")
        for text in hypothesis:
            queue_hypothesis(session.loop.ledger, text, origin="cli")
        reason = session.loop.run(StopRules(max_experiments=max_experiments, hours=hours, minutes=minutes))
        console.print(f"stopped: {escape(reason)}")
        print_status(console, session.results, prog.metric, session.loop.state, prog.direction)
        _write_morning_report(session.results, prog, tag)
    except KeyboardInterrupt:
        err.print(f"\ninterrupted: the ledger is closed; `nightshift run --tag {tag}` resumes.")
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    except ResearcherError as error:
        err.print(f"[red]researcher stopped:[/red] {escape(str(error))}")
        raise typer.Exit(ExitCode.RESEARCHER) from None
    except (LoopError, SandboxUnavailable) as error:
        err.print(f"[red]loop stopped:[/red] {escape(str(error))}")
        raise typer.Exit(ExitCode.LOOP) from None
    except OSError as error:    # the ledger or a view, outside the loop (a full disk)
        err.print(f"[red]loop stopped:[/red] {escape(describe_error(error))}")
        raise typer.Exit(ExitCode.LOOP) from None
    finally:
        session.close()
        if page is not None:
            page.stop()
        stop_publishing(followers)   # the hooks hear of the night's end after the tag is free


def with_mlflow(prog, uri: str):
    """`prog` logging to MLflow at `uri` (--mlflow), its tracking.mlflow.experiment kept."""
    import dataclasses

    mlflow = dataclasses.replace(prog.tracking.mlflow, uri=mlflow_flag(uri))
    return dataclasses.replace(prog, tracking=dataclasses.replace(prog.tracking, mlflow=mlflow))


def detached(prog, tag: str, as_json: bool) -> None:
    """This same `nightshift run`, without --detach, in a session of its own (so the agent's
    shell, which ends its command's process group, cannot end the night), its output appended
    to results/<tag>/night.log (agent/interface/operations.py `start_night`). Returns to the
    caller never: exits 0 once the night holds the tag's lock, or with the night's own exit
    code and its last lines when it ended first."""
    import sys

    from agent.interface.operations import OperationError, start_night

    argv = [a for a in sys.argv[1:] if a not in ("--detach", "--json")]
    try:
        started = start_night(prog, tag, argv)
    except OperationError as error:        # the night's own last lines, as it printed them
        err.print(error.message, highlight=False, markup=False)
        raise typer.Exit(error.code) from None
    if as_json:
        from agent.cli.show import print_document

        print_document(started)
    else:
        console.print(f"night of tag {tag} runs in the background: PID {started['pid']}, log "
                      f"{started['log']}", highlight=False, markup=False)
    raise typer.Exit(ExitCode.OK)


def _write_morning_report(folder: Path, prog, tag: str) -> None:
    """The report of the night that just stopped, so it ends with a page to open. A report
    that cannot be written costs nothing: the ledger holds everything it shows."""
    from agent.review.report import write_report

    try:
        written = write_report(folder, metric=prog.metric, direction=prog.direction, repo=prog.root)
    except Exception as error:   # noqa: BLE001 - the night's records are already safe
        why = describe_error(error) if isinstance(error, OSError) else str(error)
        err.print(f"the report could not be written ({escape(why)}); "
                  f"`nightshift report --tag {tag}` tries again")
        return
    console.print(f"report: {escape(str(written.html))} (again any time: nightshift report --tag {tag})")


def open_session(prog, tag: str, *, researcher: str, observer, **options):
    """build_session, or exit with the code its failure calls for (nothing written when a
    check fails: see agent/night/session.py)."""
    from agent.preflight.lock import TagLocked
    from agent.preflight.prestart import PrestartError
    from agent.night.session import build_session
    from agent.researchers import ResearcherError
    from agent.workspace.repo import WorkspaceError
    from cluster.protocol import ClusterUnavailable
    from sandbox import SandboxUnavailable

    try:
        return build_session(prog, tag, researcher=researcher, sandbox=prog.sandbox,
                             observer=observer, **options)
    except KeyboardInterrupt:
        raise fail("interrupted before the night started", ExitCode.INTERRUPTED) from None
    except TagLocked as error:
        raise fail(str(error), ExitCode.BUSY) from None
    except PrestartError as error:
        raise fail(str(error), error.code) from None
    except (SandboxUnavailable, ClusterUnavailable) as error:
        raise fail(str(error), ExitCode.LOOP) from None
    except (WorkspaceError, OSError) as error:   # git or the disk, while opening the tag
        raise fail(describe_error(error), ExitCode.LOOP) from None
    except (ValueError, ResearcherError, RuntimeError) as error:
        raise fail(str(error)) from None


def queue_hypothesis(ledger: Ledger, text: str, origin: str) -> str:
    hypothesis_id = f"h{len(ledger.refresh().hypotheses) + 1:03d}"
    ledger.append(HypothesisQueued(hypothesis_id=hypothesis_id, text=text.strip(), origin=origin))
    console.print(f"queued {hypothesis_id}: {text.strip()}")
    return hypothesis_id


def seed(
    text: str = typer.Argument(..., help="The hypothesis, in words (e.g. 'try LR=1e-3')."),
    tag: Optional[str] = typer.Option(None, help="The loop to seed (default: today's tag)."),
    program: Path = ProgramOpt,
) -> None:
    """Queue a hypothesis for a loop, even while it runs: it is tested before new ideas."""
    prog = load(program, {})
    queue_hypothesis(Ledger(existing_loop(prog, tag)), text, origin="seed")


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
    from agent.night.session import default_tag

    prog = load(program, {"budget": budget, "sandbox": sandbox})
    tag = tag or default_tag()
    # noise measures a commit, not the checkout: uncommitted edits are reported, not refused
    session = open_session(prog, tag, researcher="optuna",
                           observer=RichObserver(console, metric=prog.metric, results=prog.root / "results" / tag),
                           allow_dirty=True)
    try:
        _measure_noise(session, prog, commit, seeds)
    finally:
        session.close()


def _measure_noise(session, prog, commit: Optional[str], seeds: int) -> None:
    from agent.cli.display import mean_sd
    from agent.decide.noise import suggest_settings
    from agent.preflight.checks import SEED_FIX
    from agent.run.seeding import observe_seeding
    from agent.run.executor import measure

    loop = session.loop
    state = loop.state
    sha = loop.workspace.resolve(commit) if commit else (state.incumbent or loop.workspace.head())
    console.print(f"measuring {sha[:8]} on {seeds} seeds of {prog.budget_s:g}s")
    try:
        for seed in range(NOISE_SEEDS, NOISE_SEEDS + seeds):
            if seed not in state.ok_values(sha, Role.NOISE):
                measure(loop.executor, loop.observer, sha, seed, Role.NOISE, None, "noise measurement")
    except KeyboardInterrupt:
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    values = list(state.ok_values(sha, Role.NOISE).values())
    if len(values) < 2:
        raise fail("fewer than two runs succeeded; see the logs under "
                   f"{session.results / 'runs'}", ExitCode.LOOP)
    console.print(f"{sha[:8]}: {prog.metric} {mean_sd(values)}")
    seeding = observe_seeding(state.ok_values(sha, Role.NOISE), prog.metric)
    if seeding.kind == "identical":
        raise fail(f"{sha[:8]}: {seeding.note}, so there is no seed-to-seed noise to measure and "
                   f"no seeds or min_effect to suggest. Fix: {SEED_FIX}")
    per_commit = {c: state.ok_values(c) for c in {r.commit for r in state.runs}}
    per_commit = {c: v for c, v in per_commit.items() if len(v) >= 2}
    try:
        advice = suggest_settings(per_commit, alpha=prog.alpha)
    except ValueError as error:
        raise fail(f"{error}") from None
    console.print(f"pooled seed noise: sd {advice['noise_sd']:.4f} ({advice['dof']} dof over "
                  f"{len(per_commit)} commits); same-seed shared fraction {advice['seed_share']:.2f}")
    plan = advice["seeds"]
    console.print("suggested for program.md:")
    console.print(f"  seeds: {{baseline: {plan['baseline']}, screen: {plan['screen']}, max: {plan['max']}}}")
    console.print(f"  min_effect: {advice['min_effect']:.4f}")
    for key, why in advice["reasons"].items():
        console.print(f"  [dim]{key}: {why}[/dim]")
