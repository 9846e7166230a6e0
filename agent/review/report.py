"""The morning report: one self-contained HTML page (and a PNG of its chart) from a tag's ledger.

`write_report(results/<tag>)` reads only what the night recorded: the ledger (the researcher's
cost included, recorded on each experiment's events), each run's provenance.json (diffs,
environment), and the replay events. It needs no network to view: CSS, the SVG charts and a few lines of JS (sorting and
filtering the table) are inline, and diffs sit in <details> blocks. Writes:

    results/<tag>/report.html     the page
    results/<tag>/progress.png    the progress chart, for pasting elsewhere (matplotlib)

Every text that came from a researcher (descriptions, hypotheses, diffs) is HTML-escaped by
the template engine: an LLM's description cannot inject markup.
"""
from __future__ import annotations

import os
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.decide.decision import pooled_sd
from agent.preflight.lock import live_holder
from agent.record.events import (LoopStarted, ReplayCommit, ReplayRun, ReplaySummary, Verdict,
                                 encode)
from agent.record.ledger import read_events, utc_now
from agent.record.provenance import read_provenance
from agent.record.records import Direction
from agent.record.state import Experiment, LoopState, fold
from agent.record.views import early_stops, queue_time, utilisation
from agent.review.ablation_panel import ablation_panels
from agent.review.charts import calibration_chart, progress_chart, progress_png
from agent.review.efficiency import calibration_seeds, estimated_improvement, night_efficiency
from agent.review.experiment_view import experiment_views
from agent.review.single_run import other_verdicts, tested
from sandbox import Status

TEMPLATES = Path(__file__).parent / "templates"
MAX_DIFF_CHARS = 20_000          # per experiment in the page; the full diff stays in provenance


@dataclass
class WrittenReport:
    html: Path
    png: Path | None
    notes: list[str] = field(default_factory=list)


def write_report(tag_dir: Path, *, out: Path | None = None, metric: str | None = None,
                 direction: Direction | None = None, repo: Path | None = None) -> WrittenReport:
    """Render results/<tag>/report.html (or `out`) and progress.png next to it."""
    tag_dir = Path(tag_dir)
    context = build_context(tag_dir, metric=metric, direction=direction, repo=repo)
    html_path = Path(out) if out else tag_dir / "report.html"
    html_path.parent.mkdir(parents=True, exist_ok=True)
    # Links to files of the tag (transcripts) stay right wherever the page is written.
    context["link_base"] = Path(os.path.relpath(tag_dir.resolve(), html_path.parent.resolve())).as_posix()
    html_path.write_text(render(context), encoding="utf-8")
    png, notes = None, []
    try:
        png = progress_png(context["chart_data"], html_path.with_name("progress.png"),
                           title=f"{context['tag']}: {context['metric']}")
    except ImportError:
        notes.append("progress.png skipped: matplotlib is not installed (pip install matplotlib)")
    return WrittenReport(html_path, png, notes)


def render(context: dict[str, Any], template: str = "report.html.j2") -> str:
    """The HTML page (or another template of templates/, with the same filters: the live
    page). Fields missing from older or partial events render as "–", not errors."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = _num
    env.filters["signed"] = lambda v, digits=4: "–" if _absent(v) else f"{v:+.{digits}f}"
    env.filters["interval"] = lambda v, digits=4: "" if _absent(v) or not v else \
        f"[{v[0]:+.{digits}f}, {v[1]:+.{digits}f}]"
    env.filters["short"] = lambda sha: "" if _absent(sha) else str(sha)[:8]
    env.filters["duration"] = _duration
    return env.get_template(template).render(**context)


def _absent(value: Any) -> bool:
    import jinja2

    return value is None or isinstance(value, jinja2.Undefined)


def _num(value: Any, digits: int = 4) -> str:
    if _absent(value):
        return "–"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def _duration(seconds: float | None) -> str:
    if _absent(seconds) or not seconds:
        return "–"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def build_context(tag_dir: Path, *, metric: str | None = None, direction: Direction | None = None,
                  repo: Path | None = None, events: list[Any] | None = None) -> dict[str, Any]:
    """Everything the template shows, as plain data (also handy for tests and notebooks).
    `events`: the tag's events when the caller has read them already (the live page)."""
    events = list(read_events(tag_dir)) if events is None else events
    state = fold(events)
    started = next((e for e in events if isinstance(e, LoopStarted)), None)
    program = started.program if started else {}
    metric = program.get("metric") or metric or "val_bpb"
    direction = Direction(program.get("direction") or direction or Direction.MINIMIZE)
    sd, dof = pooled_sd(state.noise_groups())
    experiments = [_experiment_row(state, e, tag_dir, repo) for e in state.experiments.values()]
    base_ref = list(state.reference(state.base_commit).values()) if state.base_commit else []
    best = _level(state, state.incumbent) if state.incumbent else None
    baseline = _mean(base_ref)
    chart_data = _chart_data(state, experiments, baseline, sd, direction)
    in_flight = next(iter(state.in_flight.values()), None)
    return {
        "tag": state.tag or tag_dir.name, "metric": metric, "direction": direction,
        "generated": utc_now(), "started": started.time if started else None,
        "ended": events[-1].time if events else None,
        "base_commit": state.base_commit, "incumbent": state.incumbent,
        "facts": {k: getattr(started, k) for k in ("researcher", "sandbox", "rule", "budget_s",
                                                   "corpus_hash")
                  if started is not None and getattr(started, k) is not None},
        "program": program, "stopped": state.stopped_reason,
        "in_flight": encode(in_flight) if in_flight else None,
        "in_flight_running": bool(in_flight) and live_holder(tag_dir) is not None,
        "counts": state.verdict_counts(),
        "n_experiments": len(experiments), "n_kept": len(state.kept()),
        "n_runs": len(state.runs), "compute_s": sum(r.duration_s or 0 for r in state.runs),
        "baseline": {"mean": baseline, "sd": statistics.stdev(base_ref) if len(base_ref) > 1 else None,
                     "n": len(base_ref)},
        "best": best,
        "improvement": _improvement(state, direction),
        "efficiency": night_efficiency(state, direction, calibration_seeds(program)).to_dict(),
        "one_run": _one_run(state, direction),
        "noise": {"sd": sd, "dof": dof},
        "experiments": experiments,
        "chart": progress_chart(chart_data, metric=metric),
        "chart_data": chart_data,
        "calibration": encode(state.calibration()),
        "calibration_chart": calibration_chart(experiments),
        "cost": _cost(state),
        "arms": _arms(state, direction),
        "workers": _workers(state),
        "replays": _replays(events, state),
        "flagged": _flagged(state, metric),
        "early": _early_stops(state, program),
        "ablations": ablation_panels(events),
        "views": experiment_views(state, experiments, direction),
        "environment": _environment(state, tag_dir),
    }


def _one_run(state: LoopState, direction: Direction) -> dict[str, Any]:
    """The experiments one run alone would have decided otherwise (agent/review/single_run.py),
    out of those the keep rule tested."""
    decided = tested(state.experiments.values())
    return {"tested": len(decided), "rows": [
        {"id": o.experiment, "description": o.description, "verdict": o.verdict.value,
         "single_run_keeps": o.single_run_keeps, "first_run": o.first_run, "against": o.against,
         "seeds_otherwise": o.seeds_otherwise, "seeds_paired": o.seeds_paired,
         "why": o.why} for o in other_verdicts(decided, direction)]}


def _early_stops(state: LoopState, program: dict[str, Any]) -> dict[str, Any]:
    """Every run stopped early (where, the forecast, against what, the time saved), the run
    time saved in all, and why curves could not be compared."""
    summary = early_stops(state)
    rows = []
    for stop in summary.stops:
        experiment = state.experiments.get(stop.experiment)
        rows.append({"id": stop.experiment, "seed": stop.seed, "checkpoint": stop.checkpoint,
                     "reached": stop.reached, "predicted": stop.predicted, "interval": stop.interval,
                     "bound": stop.bound, "pairs": stop.pairs, "saved_s": stop.saved_s,
                     "against": ("its run on that seed" if stop.partner == "same seed"
                                 else "its mean curve"),
                     "description": experiment.description if experiment else ""})
    why: dict[str, int] = {}
    for unpaired in state.unpaired.values():
        key = unpaired.reason.split(" (")[0].split(":")[0]
        why[key] = why.get(key, 0) + 1
    setting = program.get("early_stop") or {}
    return {"stops": rows, "saved_s": summary.saved_s, "run_s": summary.run_s,
            "share": summary.share, "unpaired": dict(sorted(why.items(), key=lambda kv: -kv[1])),
            "mode": setting.get("mode", "auto") if isinstance(setting, dict) else setting}


def _flagged(state: LoopState, metric: str) -> list[dict[str, Any]]:
    """The candidates whose number could not be trusted, with what showed it: the script's
    reported value against the evaluator's, the probe that failed, the paired timings or
    fingerprints of an experiment-level flag."""
    rows = []
    for experiment in state.experiments.values():
        verdict = experiment.verdict
        if verdict is None or not verdict.is_integrity:
            continue
        run = next((r for r in experiment.runs if r.status.value == verdict.value), None)
        evidence = dict(experiment.decision.evidence) if experiment.decision else {}
        if run is not None:
            measured = run.metrics.get(metric)
            if run.reported is not None:
                evidence.update(reported=run.reported, measured=measured)
            failed = [p for p in run.probes if not p.ok]
            if failed:
                evidence["probe"] = f"{failed[0].name}: {failed[0].detail}"
            evidence["seed"] = run.seed
        rows.append({"id": experiment.id, "commit": experiment.commit, "verdict": verdict.value,
                     "description": experiment.description,
                     "reason": experiment.decision.reason if experiment.decision else "",
                     "evidence": {k: v for k, v in evidence.items() if not isinstance(v, (dict, list))}})
    return rows


def _level(state: LoopState, commit: str) -> dict[str, Any]:
    """A commit's metric on its fresh reference runs (None until measured), and apart,
    labelled, the mean of the runs that selected it (biased by the selection)."""
    reference = list(state.reference(commit).values())
    kept = next((e for e in state.kept() if e.commit == commit), None)
    return {"mean": _mean(reference), "n": len(reference), "fresh": bool(reference),
            "sd": statistics.stdev(reference) if len(reference) > 1 else None,
            "selection_mean": kept.mean() if kept else None,
            "selection_n": len(kept.values()) if kept else 0}


def _improvement(state: LoopState, direction: Direction) -> dict[str, Any] | None:
    """The night's headline (agent/review/efficiency.py): the incumbent on its fresh seeds
    against the baseline on its own, positive = better; None until measured."""
    return estimated_improvement(state, direction)


def _experiment_row(state: LoopState, experiment: Experiment, tag_dir: Path,
                    repo: Path | None) -> dict[str, Any]:
    decided, score = experiment.decision, experiment.score
    verdict = experiment.verdict
    # A kept commit is shown at its fresh-seed value; the runs that selected it, labelled.
    fresh = _level(state, experiment.commit)["mean"] if verdict == Verdict.KEEP else None
    shown_note = ""
    if verdict == Verdict.KEEP and experiment.mean() is not None:
        shown_note = (f"fresh seeds · selection mean {experiment.mean():.4f}" if fresh is not None
                      else "selection mean: not yet measured on fresh seeds")
    reason = experiment.invalid_reason or (decided.reason if decided else "")
    refused = decided is not None and decided.evidence.get("refused") == "compute"
    diff = experiment.diff or _diff(experiment, tag_dir, repo)
    return {
        "id": experiment.id, "commit": experiment.commit, "parent": experiment.parent,
        "verdict": verdict.value if verdict else "running", "description": experiment.description,
        # how it is drawn: its verdict, or "failed" for every way a run failed (one colour)
        "style": "running" if verdict is None else "failed" if verdict.is_failure else verdict.value,
        "hypothesis": experiment.hypothesis, "researcher": experiment.researcher,
        "effect": decided.effect if decided else None,
        "interval": list(decided.interval) if decided and decided.interval else None,
        # paired or against the incumbent's mean, and the pairs alone when they disagree
        "compared": (decided.decision.comparison.describe(decided.effect)
                     if decided and decided.decision and decided.decision.comparison else ""),
        "p_value": decided.p_value if decided else None, "mean": experiment.mean(),
        "fresh": fresh, "shown": fresh if fresh is not None else experiment.mean(),
        "shown_note": shown_note,
        "n_ok": len(experiment.values()), "n_runs": len(experiment.runs),
        "duration_s": sum(r.duration_s or 0 for r in experiment.runs),
        "prediction": encode(experiment.prediction) if experiment.prediction else None,
        "score": encode(score) if score else None,
        # its run time against the incumbent's (agent/decide/compute.py): what a keep cost
        "compute": encode(decided.compute) if decided and decided.compute else None,
        "reason": reason if verdict not in (Verdict.KEEP, Verdict.DISCARD) or refused else
                  f"stopped early at {experiment.stopped_early.checkpoint:.0%}: a discard, not a measurement"
                  if experiment.stopped_early is not None and verdict == Verdict.DISCARD else "",
        "diff": diff[:MAX_DIFF_CHARS], "diff_clipped": len(diff) > MAX_DIFF_CHARS,
        "transcript": experiment.extra.get("transcript"),   # relative to the tag's folder
        "time": decided.time if decided else None,
    }


def _diff(experiment: Experiment, tag_dir: Path, repo: Path | None) -> str:
    """From a candidate run's provenance, else git (when the repository is at hand)."""
    for run in experiment.runs:
        record = read_provenance(tag_dir / "runs" / run.run_id)
        if record is not None and record.diff:
            return record.diff
    if repo is not None and experiment.commit and experiment.parent:
        done = subprocess.run(["git", "-C", str(repo), "diff", "--no-color", experiment.parent,
                               experiment.commit], capture_output=True, text=True, errors="replace")
        if done.returncode == 0:
            return done.stdout
    return ""


def _chart_data(state: LoopState, rows: list[dict[str, Any]], baseline: float | None,
                sd: float | None, direction: Direction) -> dict[str, Any]:
    """Points (one per experiment), the kept frontier as steps, and the noise band around it."""
    points = [{"x": i, "y": row["mean"], "verdict": row["style"], "id": row["id"],
               "label": f"{row['id']} [{row['verdict']}] {row['description'][:80]}"
                        + (f" — {row['mean']:.4f}" if row["mean"] is not None else "")
                        + (f" (selection mean; fresh seeds {row['fresh']:.4f})"
                           if row.get("fresh") is not None else "")}
              for i, row in enumerate(rows, start=1)]
    frontier = []
    if baseline is not None:
        frontier.append((0, baseline))
    for i, experiment in enumerate(state.experiments.values(), start=1):
        if experiment.verdict == Verdict.KEEP:   # at its fresh-seed value, once measured
            level = _level(state, experiment.commit)["mean"]
            if level is not None:
                frontier.append((i, level))
    return {"points": points, "frontier": frontier, "sd": sd, "direction": direction,
            "n": len(rows)}


def _workers(state: LoopState, width: int = 760) -> dict[str, Any]:
    """Utilisation and the latest invocation's timeline, as SVG geometry."""
    use = utilisation(state)
    span = (use.end - use.start) if use.start is not None and use.end is not None else 0.0
    lanes = []
    for worker, runs in use.lanes.items():
        drawn = [{"x": round(width * (begin - use.start) / span, 1),
                  "w": max(round(width * (end - begin) / span, 1), 1.0), "role": role,
                  "title": f"w{worker} {role} {end - begin:.0f} s"}
                 for begin, end, role in runs] if span > 0 else []
        lanes.append({"worker": worker, "runs": drawn})
    return {"workers": use.workers, "share": use.share, "busy_s": use.busy_s,
            "capacity_s": use.capacity_s, "lanes": lanes, "width": width, "span_s": span,
            "queue": queue_time(state).lines()}


def _cost(state: LoopState) -> dict[str, Any] | None:
    """The researcher's spending, summed from the usage recorded on each experiment."""
    usage = state.usage
    if not (usage.calls or usage.usd):
        return None
    charged = [e for e in state.experiments.values() if e.usage is not None]
    errors: dict[str, int] = {}
    for experiment in charged:
        for kind, count in (experiment.extra.get("errors") or {}).items():
            errors[kind] = errors.get(kind, 0) + count
    model = next((e.extra.get("model") for e in reversed(charged) if e.extra.get("model")), None)
    n_experiments, n_kept = len(state.experiments), len(state.kept())
    tokens = {"cache reads": usage.cache_read_input_tokens,
              "cache writes 5 min": usage.cache_creation_5m_input_tokens,
              "cache writes 1 h": usage.cache_creation_1h_input_tokens,
              "uncached input": usage.input_tokens, "output": usage.output_tokens}
    return {"tokens": tokens, "total_tokens": usage.tokens, "cached_share": usage.cached_share,
            "usd": usage.usd, "calls": usage.calls, "proposals": len(charged), "model": model,
            "retries": usage.retries, "timeouts": usage.timeouts, "errors": errors,
            "usd_per_experiment": usage.usd / n_experiments if n_experiments else None,
            "usd_per_keep": usage.usd / n_kept if n_kept else None}


def _arms(state: LoopState, direction: Direction) -> list[dict[str, Any]]:
    """One row per researcher when a night had more than one (an LLM and its control arm):
    what each proposed, what it cost, and the progress its keeps made, so the two compare per
    run and per dollar. A keep's progress is the honest step, from fresh reference seeds of the
    kept commit and of its parent where both were measured, else the rule's paired estimate."""
    by_name: dict[str, list[Experiment]] = {}
    for experiment in state.experiments.values():
        by_name.setdefault(experiment.researcher or "?", []).append(experiment)
    if len(by_name) < 2:
        return []
    better = Direction(direction).sign
    rows = []
    for name, experiments in by_name.items():
        progress = 0.0
        for experiment in experiments:
            if experiment.verdict != Verdict.KEEP:
                continue
            kept, parent = _level(state, experiment.commit), _level(state, experiment.parent or "")
            if kept["fresh"] and parent["fresh"]:
                progress += better * (kept["mean"] - parent["mean"])
            elif experiment.decision is not None and experiment.decision.effect is not None:
                progress += better * experiment.decision.effect
        runs = sum(len(e.runs) for e in experiments)
        usd = sum(e.usage.usd for e in experiments if e.usage is not None and e.usage.usd)
        rows.append({"researcher": name, "experiments": len(experiments), "runs": runs,
                     "compute_s": sum(r.duration_s or 0 for e in experiments for r in e.runs),
                     "keeps": sum(e.verdict == Verdict.KEEP for e in experiments),
                     "progress": progress, "usd": usd,
                     "per_run": progress / runs if runs else None,
                     "per_usd": progress / usd if usd else None})
    return rows


def _replays(events: list[Any], state: LoopState) -> list[dict[str, Any]]:
    """One entry per replay: its summary and the per-commit rows, in the order they ran."""
    found: dict[str, dict[str, Any]] = {}
    for event in events:
        if not isinstance(event, (ReplayRun, ReplayCommit, ReplaySummary)):
            continue
        entry = found.setdefault(event.replay_id, {"id": event.replay_id, "summary": None,
                                                   "commits": [], "runs": 0, "failed": 0})
        if isinstance(event, ReplaySummary):
            entry["summary"] = encode(event)
        elif isinstance(event, ReplayCommit):
            experiment = state.experiments.get(event.experiment or "")
            entry["commits"].append({**encode(event), "description":
                                     experiment.description if experiment else event.target_role})
        else:
            entry["runs"] += 1
            entry["failed"] += event.status != Status.OK
    return list(found.values())


def _environment(state: LoopState, tag_dir: Path) -> dict[str, Any]:
    """The latest run's recorded environment, and whether the night saw more than one."""
    fingerprints = sorted({r.env_fingerprint for r in state.runs if r.env_fingerprint})
    for run in reversed(state.runs):
        record = read_provenance(tag_dir / "runs" / run.run_id)
        if record is not None:
            return {"facts": record.environment, "sandbox": record.sandbox,
                    "data": {**record.data_meta,   # a data: folder's content hash too
                             "corpus_hash": record.data_hash or record.data_meta.get("corpus_hash")},
                    "command": record.command, "split": record.split, "fingerprints": fingerprints}
    return {"facts": {}, "sandbox": {}, "data": {}, "command": None, "split": None,
            "fingerprints": fingerprints}
