"""What a person watching sees: one line per event and a live bar per run while a night
runs (`RichObserver`), and the state of a loop at a glance (`print_status`)."""
from __future__ import annotations

import os
import re
import statistics
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from agent.decide.decision import pooled_sd
from agent.record.events import DecisionMade, Direction, Role, RunFinished, Usage, Verdict
from agent.record.ledger import read_events
from agent.record.state import Experiment, LoopState, fold
from agent.record.views import early_stops, queue_time, timeline_text, utilisation
from agent.review.single_run import summary_lines as single_run_lines
from cluster.protocol import Dispatched, Slot

STOPS_SHOWN = 10        # the latest stopped runs `status` lists (the report lists all)

_LOSS = re.compile(r"\bloss[:= ]\s*([0-9.]+(?:e[-+]?\d+)?|nan|inf)", re.IGNORECASE)
_VERDICT_COLOUR = {Verdict.KEEP: "bold green", Verdict.DISCARD: "yellow", Verdict.INCONCLUSIVE: "cyan",
                  Verdict.SUPERSEDED: "magenta", Verdict.NO_EFFECT: "dim"}


class RichObserver:
    """Implements agent.run.observer.Observer with rich: messages, and a live bar per run in
    flight (its worker, seed and role, the last loss it printed, the time left)."""

    def __init__(self, console: Console | None = None, metric: str = "val_bpb",
                 results: Path | None = None) -> None:
        self.console = console or Console(highlight=False)
        self.metric = metric
        self.results = results   # results/<tag>/, which the runs' logs are relative to
        self._progress: Progress | None = None
        self._tasks: dict[str, tuple[int, float, float]] = {}   # run_id -> (task, start, budget)
        self._lock = threading.Lock()    # output() comes from the workers' threads

    def message(self, text: str) -> None:
        self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {text}")

    def run_started(self, run_id: str, slot: Slot, commit: str, seed: int, role: Role,
                    experiment: str | None, budget_s: float, label: str) -> None:
        if not self.console.is_terminal:
            return   # a live bar in a log file is only noise; the finished line says it all
        with self._lock:
            if self._progress is None:
                self._progress = Progress(
                    TextColumn("  {task.description}"), BarColumn(bar_width=20),
                    TextColumn("{task.fields[loss]}"), TimeRemainingColumn(),
                    console=self.console, transient=True)
                self._progress.start()
            title = f"w{slot.index} {experiment or 'incumbent'} seed {seed} {role}: {label[:50]}"
            task = self._progress.add_task(title, total=budget_s, loss="")
            self._tasks[run_id] = (task, time.monotonic(), budget_s)

    def output(self, run_id: str, line: str) -> None:
        with self._lock:
            if self._progress is None or run_id not in self._tasks:
                return
            task, started, budget = self._tasks[run_id]
            match = _LOSS.search(line)
            fields = {"loss": f"loss {match.group(1)}"} if match else {}
            self._progress.update(task, completed=min(time.monotonic() - started, budget), **fields)

    def dispatched(self, news: Dispatched) -> None:
        """A queued run's bar says so; once it began, the bar counts its run time from then."""
        with self._lock:
            if self._progress is None or news.run_id not in self._tasks:
                return
            task, started, budget = self._tasks[news.run_id]
            if news.node is None:
                self._progress.update(task, loss=f"queued (job {news.job_id})")
                return
            self._tasks[news.run_id] = (task, time.monotonic(), budget)
            self._progress.update(task, completed=0, loss=f"on {news.node}, queued "
                                                          f"{news.queued_s or 0:.0f}s")

    def run_finished(self, run: RunFinished) -> None:
        with self._lock:
            entry = self._tasks.pop(run.run_id, None)
            if entry is not None and self._progress is not None:
                self._progress.remove_task(entry[0])
                if not self._tasks:
                    self._progress.stop()
                    self._progress = None
        shown = f"{self.metric} {run.metric:.4f}" if run.metric is not None else run.reason
        colour, status = ("green" if run.ok else "red"), run.status.value
        if run.reason.startswith("stopped early"):   # the harness's doing: a discard, not a failure
            colour, status, shown = "yellow", "stopped", run.reason.split(":", 1)[0]
        who = f"w{run.worker} " if run.worker is not None else ""
        where = f" on {run.node}" if run.node else ""
        if run.queued_s is not None:
            where += f", {run.queued_s:.0f}s queued"
        over = f" [yellow]past its budget by {run.over_budget_s:g}s[/yellow]" if run.over_budget_s else ""
        graded = f" + evaluation {run.eval_duration_s:.0f}s" if run.eval_duration_s is not None else ""
        self.console.print(f"  {who}{run.experiment or 'incumbent'} seed {run.seed} "
                           f"{run.role.value:<9} [{colour}]{status}[/{colour}] "
                           f"{shown} ({run.duration_s or 0:.0f}s{graded}{where}){over}", soft_wrap=not run.ok)
        if status != "stopped" and not run.ok and self.results is not None and run.log:
            # the one-line reason is a summary; the whole traceback is in the log
            self.console.print(f"    log: {from_here(self.results / run.log)}", soft_wrap=True)

    def decided(self, event: DecisionMade) -> None:
        colour = _VERDICT_COLOUR.get(event.verdict, "red")
        evidence = ""
        if event.effect is not None:
            lo, hi = event.interval or (float("nan"), float("nan"))
            p = event.p_value
            evidence = (f" effect {event.effect:+.4f} [{lo:+.4f}, {hi:+.4f}]"
                        + (f" p={p:.3g}" if p is not None else "")
                        + f" on {len(event.seeds)} seed{'' if len(event.seeds) == 1 else 's'}")
            comparison = event.decision.comparison if event.decision else None
            if comparison is not None:
                evidence += f", {comparison.describe(event.effect)}"
        if event.compute is not None:
            evidence += f"; {event.compute.describe()}"
        # the whole reason: cut at 100 characters it ended mid-clause ("or the 3 pairs' own t test, ")
        self.console.print(f"[{colour}]{event.id} {event.verdict.value.upper()}[/{colour}]{evidence}"
                           f" — {event.reason}")


def from_here(path: Path) -> str:
    """`path` relative to the current folder when it lies under it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())


def usage_lines(usage: Usage) -> list[str]:
    """The researcher's spending as the ledger recorded it: dollars, calls, the prompt split
    as the API bills it (cache reads, cache writes by lifetime, uncached), output."""
    failed = (f" ({usage.retries} retried, {usage.timeouts} timed out)"
              if usage.retries or usage.timeouts else "")
    share = f", {usage.cached_share:.0%} from the cache" if usage.cached_share is not None else ""
    return [f"researcher cost: ${usage.usd:.2f} over {usage.calls} calls{failed}",
            f"  prompt {usage.prompt_tokens:,} tokens{share}: {usage.cache_read_input_tokens:,} cache reads, "
            f"{usage.cache_creation_input_tokens:,} cache writes ({usage.cache_creation_5m_input_tokens:,} "
            f"for 5 min, {usage.cache_creation_1h_input_tokens:,} for 1 h), {usage.input_tokens:,} "
            f"uncached; {usage.output_tokens:,} output tokens"]


def mean_sd(values: list[float]) -> str:
    spread = f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.4f}{spread} (n={len(values)})"


def incumbent_line(state: LoopState, metric: str, direction: Direction = Direction.MINIMIZE) -> str | None:
    """The incumbent at its fresh-seed value, or "not yet measured" (never the mean of the
    runs that selected it, which the winner's curse flatters; that one is labelled: biased
    low for a metric minimized, high for one maximized)."""
    if not state.incumbent:
        return None
    head = f"incumbent {state.incumbent[:8]}"
    reference = list(state.reference(state.incumbent).values())
    kept = next((e for e in state.kept() if e.commit == state.incumbent), None)
    if reference:
        line = f"{head}  {metric} {mean_sd(reference)}  (fresh seeds, not the runs that selected it)"
    else:
        line = f"{head}  {metric} not yet measured on fresh seeds"
    if kept is not None and kept.mean() is not None:
        toward = "low" if Direction(direction).lower_is_better else "high"
        line += f"; selection mean {kept.mean():.4f} over {len(kept.values())} seeds (biased {toward} by selection)"
    elif state.incumbent == state.base_commit:
        line += " (the baseline)"
    return line


def efficiency_lines(state: LoopState, folder: Path, direction: Direction | str = Direction.MINIMIZE) -> list[str]:
    """The night's efficiency (agent/review/efficiency.py): the estimated improvement per run
    and per run-hour, where the runs went by count and by run time, and the single-run rule's
    run time on the same proposals. Nothing before the first run."""
    from agent.review.efficiency import night_efficiency, recorded_calibration

    if not state.runs and not state.interrupted:
        return []
    figure = night_efficiency(state, direction, recorded_calibration(folder))
    lines = [f"efficiency: {figure.line()}", f"  runs: {figure.shares_line()}",
             f"  run time: {figure.time_line()}"]
    if figure.single_run is not None:
        lines.append(f"  {figure.single_run.line()}")
    return lines


def same_seed_line(state: LoopState, sd: float, dof: int) -> str | None:
    """How much two commits on one seed share, pooled over the night, and the baseline's
    same-seed repeat: what the keep rule credits to pairing (agent/decide/pairing.py)."""
    from agent.decide.noise import NoiseEstimate
    from agent.decide.pairing import repeat_spread, unshared_spread

    unshared, pair_dof = unshared_spread(state.same_seed_runs())
    repeat_sd, repeat_dof = repeat_spread(state.repeat_pairs())
    parts = []
    if unshared is not None:
        noise = NoiseEstimate(sd, dof, unshared * 2 ** 0.5, pair_dof, repeat_sd, repeat_dof)
        parts.append(f"two commits on one seed share {noise.seed_share:.0%} of a run's spread "
                     f"(credited, an 80% bound; pair sd {unshared * 2 ** 0.5:.4f}, {pair_dof} dof)")
    for repeat in state.repeats[:1]:
        again = f"{repeat.again:.4f}" if repeat.again is not None else "failed"
        parts.append(f"seed {repeat.seed} run twice: {repeat.first:.4f} then {again}")
    return "same seed: " + "; ".join(parts) if parts else None


def _measured_against(decided: DecisionMade | None) -> str:
    comparison = decided.decision.comparison if decided and decided.decision else None
    if comparison is None:
        return "-"
    return "pairs" if comparison.paired else "mean"


def print_status(console: Console, folder: Path, metric: str, state: LoopState | None = None,
                 direction: Direction = Direction.MINIMIZE) -> None:
    """Experiments, keeps, baseline and incumbent with their spread, noise, predictions,
    cost and the runs in flight (interrupted, when no loop holds the tag), then the last
    experiments as a table."""
    from agent.preflight.lock import live_holder

    state = state or fold(read_events(folder))
    counts = state.verdict_counts()
    base = list(state.reference(state.base_commit).values()) if state.base_commit else []
    sd, dof = pooled_sd(state.noise_groups())
    console.print(f"[bold]{folder.name}[/bold]: {len(state.experiments)} experiments "
                  f"({', '.join(f'{k} {v}' for k, v in counts.items()) or 'none yet'})")
    flagged = [e for e in state.experiments.values() if e.verdict is not None and e.verdict.is_integrity]
    if flagged:
        listed = ", ".join(f"{e.id} {e.verdict.value}" for e in flagged[-8:])
        console.print(f"  [red]flagged, never kept: {len(flagged)}[/red] ({listed}); "
                      f"the evidence: `nightshift report`, Flagged candidates")
    measured = {r.measured_by for r in state.runs if r.measured_by}
    if measured:
        console.print("  metric: " + ("measured by the evaluation step (the harness's), not the script"
                                      if measured == {"evaluator"} else "reported by the training script"))
    if base:
        console.print(f"  baseline  {state.base_commit[:8]}  {metric} {mean_sd(base)}")
    incumbent = incumbent_line(state, metric, direction)
    if incumbent:
        console.print(f"  {incumbent}")
    for line in efficiency_lines(state, folder, direction):
        console.print(f"  {line}")
    if sd is not None:
        console.print(f"  seed noise: sd {sd:.4f} ({dof} degrees of freedom, pooled over commits)")
        line = same_seed_line(state, sd, dof)
        if line:
            console.print(f"  {line}")
    use = utilisation(state)
    if use.share is not None:
        console.print(f"  workers: {use.workers}, busy {use.share:.0%} of worker time "
                      f"({use.busy_s / 3600:.2f} h in runs over every invocation)")
        for row in timeline_text(use):
            console.print(f"    {row}")
    for line in queue_time(state).lines():
        console.print(f"  {line}")
    stops = early_stops(state)
    shown = stops.lines(state, limit=STOPS_SHOWN)
    for i, line in enumerate(shown):
        console.print(f"  {line}" if i == 0 else f"    {line}")
    if len(stops.stops) > STOPS_SHOWN:
        console.print(f"    and {len(stops.stops) - STOPS_SHOWN} earlier ones (`nightshift report` "
                      f"lists every stopped run)")
    for line in single_run_lines(list(state.experiments.values()), Direction(direction)):
        console.print(f"  {escape(line)}")
    cal = state.calibration()
    if cal.n:
        console.print(f"  predictions: direction right {cal.direction_accuracy:.0%}, intervals "
                      f"covered {cal.coverage:.0%} at claimed {cal.claimed_confidence:.0%} "
                      f"(n={cal.n})")
    usage = state.usage
    if usage.calls or usage.usd:
        for line in usage_lines(usage):
            console.print(f"  {line}")
    over = [r for r in state.runs if r.over_budget_s]
    if over:
        worst = max(over, key=lambda r: r.over_budget_s)
        console.print(f"  [yellow]past budget: {len(over)} of {len(state.runs)} runs ran past their "
                      f"{state.budget_s or 0:g}s budget (by up to {worst.over_budget_s:g}s, seed "
                      f"{worst.seed}); the script does not stop at NIGHTSHIFT_BUDGET_S / {{budget_s}}[/yellow]")
    holder = live_holder(folder) if state.in_flight else None
    for run in state.in_flight.values():
        # Without a live loop on the tag a started run is not running: its harness died.
        what = (f"in flight (loop PID {holder.pid})" if holder is not None else
                "interrupted (no loop runs on this tag; `run --tag` resumes it)")
        news = state.dispatched.get(run.run_id)
        where = ""
        if news is not None and getattr(news, "node", None):
            where = f", on {news.node} (job {news.job_id}) after {news.queued_s or 0:.0f}s queued"
        elif news is not None:
            where = f", queued as job {news.job_id} since {news.time}"
        console.print(f"  {what}: {run.experiment or 'incumbent'} seed {run.seed} "
                      f"{run.role.value} since {run.time}{where}")
    if state.stopped_reason:
        console.print(f"  last stop: {state.stopped_reason}")
    undecided = [e.id for e in state.experiments.values() if e.verdict is None]
    loop = live_holder(folder) if undecided else None
    running = loop is not None and loop.pid != os.getpid()   # not this process, which has stopped
    if undecided and not running:
        console.print(f"  not decided when the night stopped: {', '.join(undecided)} "
                      f"(`nightshift run --tag {state.tag}` goes on with {'them' if len(undecided) > 1 else 'it'})")
    # one sign everywhere a person reads an effect: the improvement, positive = better
    table = Table(show_edge=False, pad_edge=False, caption_justify="left",
                  caption="effect: the improvement over the incumbent (positive = better); compute: "
                          "its run time as a multiple of the incumbent's")
    for column in ("id", "commit", "verdict", "effect", "vs", "p", "seeds", "compute", "prediction",
                   "description"):
        table.add_column(column)
    for experiment in list(state.experiments.values())[-15:]:
        decided, score = experiment.decision, experiment.score
        effect = decided.effect if decided else None
        p = decided.p_value if decided else None
        held = "" if score is None else ("held" if score.covered else "missed")
        table.add_row(experiment.id, (experiment.commit or "-")[:8], _verdict_word(experiment, running),
                      f"{effect:+.4f}" if effect is not None else "-",
                      _measured_against(decided),
                      f"{p:.3g}" if p is not None else "-",
                      str(len(decided.seeds) if decided else 0), _compute_word(experiment), held,
                      experiment.description[:50])
    if state.experiments:
        console.print(table)


def _verdict_word(experiment: Experiment, running: bool = True) -> str:
    """The verdict, and `(compute)` beside a discard that won with more run time than allowed;
    without one, `running` while a loop holds the tag, else `pending` (a resume decides it)."""
    made = experiment.decision
    refused = made is not None and made.evidence.get("refused") == "compute"
    return str(experiment.verdict or ("running" if running else "pending")) + (" (compute)" if refused else "")


def _compute_word(experiment: Experiment) -> str:
    """The candidate's run time as a multiple of the incumbent's (`-`: not measured)."""
    made = experiment.decision
    return f"{made.compute.ratio:.2f}x" if made is not None and made.compute is not None else "-"
