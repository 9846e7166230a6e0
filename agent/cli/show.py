"""`nightshift show ID`: one experiment in full, as text for a person or `--json` for an agent.

Both read the same document (agent/interface/views.py `experiment_view`): the text is drawn
from it, so what a person reads and what an agent parses cannot say different things.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.common import ProgramOpt, console, load, reported

# A prediction and its score are raw differences of the metric, unlike an effect (positive =
# better); every line showing one says which, so a minimized metric's -0.01 reads as a gain.
DELTA = "candidate − incumbent"
DYNAMICS_SHOWN = 8       # figures of a run's result.json the text shows (--json has them all)


def show(
    experiment: str = typer.Argument(..., help="An experiment id (e0003), `incumbent` (the kept "
                                     "experiment the night stands on) or `base`."),
    tag: Optional[str] = typer.Option(None, help="The loop to read (default: today's tag)."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON document instead (schema "
                               "nightshift.experiment/1, docs/json.md): for agents and scripts."),
    program: Path = ProgramOpt,
) -> None:
    """One experiment in full: hypothesis, prediction, verdict and the keep rule's numbers,
    the diff, and every run with its log, curve and training dynamics beside its parent's
    runs on the same seeds."""
    from agent.interface.operations import show as experiment_document

    prog = load(program, {})
    with reported():
        document = experiment_document(prog, tag, experiment)
    if json_:
        print_document(document)
    else:
        print_experiment(console, document)


def print_document(document: dict[str, Any]) -> None:
    """The one JSON document on stdout, and nothing else there (messages go to stderr)."""
    from agent.interface.jsonable import document_text

    sys.stdout.write(document_text(document) + "\n")
    sys.stdout.flush()


# ---- as text -------------------------------------------------------------------------------

def _num(value: Any, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _interval(pair: Any, spec: str = "+.4f") -> str:
    return "-" if not pair else f"[{pair[0]:{spec}}, {pair[1]:{spec}}]"


def print_experiment(out: Console, doc: dict[str, Any]) -> None:
    """The experiment as a person reads it: who proposed what and why, what became of it,
    the runs, then the diff."""
    for line in _head(doc) + _decision(doc) + _runs(doc):
        out.print(line)
    if doc["diff"]:
        out.print("[bold]diff[/bold]")
        # unfolded: a diff folded at the console's width could not be copied or applied
        out.print(doc["diff"].rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
    elif doc["diff"] is None:
        out.print("[dim]diff: not in the repository (its commits are gone)[/dim]")


def _head(doc: dict[str, Any]) -> list[str]:
    title = " ".join(part for part in (f"[bold]{escape(doc['id'])}[/bold]", doc["verdict"]) if part)
    commit = doc["commit"][:8] if doc["commit"] else "(never committed)"
    parent = f" on {doc['parent'][:8]}" if doc["parent"] else ""
    who = f", proposed by {escape(doc['researcher'])}" if doc["researcher"] else ""
    lines = [f"{title}  {commit}{parent}{who}",
             f"  {escape(doc['description'])}"]
    if doc["hypothesis"]:
        lines.append(f"hypothesis: {escape(doc['hypothesis'])}")
    p = doc["prediction"]
    if p is not None:
        why = f": {escape(p['rationale'])}" if p["rationale"] else ""
        lines.append(f"prediction: {p['direction']}, delta {p['expected_delta']:+.4f} "
                     f"{_interval(p['interval'])} at {p['confidence']:.0%} ({DELTA}){why}")
    return lines


def _decision(doc: dict[str, Any]) -> list[str]:
    lines = []
    if doc["reason"]:
        lines.append(f"reason: {escape(doc['reason'])}")
    test = doc["decision"]
    if test is not None and test["effect"] is not None:
        p = f" p={test['p_value']:.3g}" if test["p_value"] is not None else ""
        lines.append(f"effect {test['effect']:+.4f} {_interval(test['interval'])}{p} on "
                     f"{len(test['seeds'])} seeds ({test['rule']}; positive = better)")
    score = doc["score"]
    if score is not None:
        lines.append(f"prediction {'held' if score['covered'] else 'missed'}: measured delta "
                     f"{score['measured_delta']:+.4f} ({DELTA}), direction "
                     f"{'right' if score['direction_right'] else 'wrong'}")
    for key, value in doc["evidence"].items():
        lines.append(f"evidence: {escape(str(key))} {escape(str(value))}")
    stop = doc["stopped_early"]
    if stop is not None:
        lines.append(f"stopped early at {stop['reached']:.0%} of its budget (seed {stop['seed']}): "
                     f"predicted effect {stop['predicted']:+.4f} {_interval(stop['interval'])} "
                     f"(positive = better)")
    level = [f"selection mean {_num(doc['mean'])}"] if doc["mean"] is not None else []
    level += [f"fresh seeds {_num(doc['fresh_mean'])}"] if doc["fresh_mean"] is not None else []
    level += [f"vs parent {_num(doc['delta'], '+.4f')}"] if doc["delta"] is not None else []
    if level:
        lines.append(f"{doc['metric']}: " + ", ".join(level))
    return lines


def _runs(doc: dict[str, Any]) -> list[str]:
    lines = []
    for title, runs in (("runs", doc["runs"]), ("its fresh-seed runs", doc["reference_runs"]),
                        ("parent's runs on those seeds", doc["parent_runs"])):
        if runs:
            lines.append(f"[bold]{title}[/bold]")
            lines += [line for run in runs for line in _run(run, doc["metric"])]
    for run in doc["in_flight"]:
        lines.append(f"  in flight: seed {run['seed']} {run['role']} since {run['started']}")
    return lines


def _run(run: dict[str, Any], metric: str) -> list[str]:
    value = f"{metric} {run['metric']:.4f}" if run["metric"] is not None else escape(run["reason"])
    took = f"{run['duration_s']:.0f}s" if run["duration_s"] is not None else "?s"
    if run["eval_duration_s"] is not None:
        took += f" + evaluation {run['eval_duration_s']:.1f}s"
    marks = "" if run["counted"] or run["role"] != "candidate" else " [dim](not counted)[/dim]"
    lines = [f"  seed {run['seed']} {run['role']} {run['status']}: {value} ({took}){marks}"]
    figures = [(k, v) for k, v in run["dynamics"].items() if isinstance(v, (int, float))
               and not isinstance(v, bool) and k != metric][:DYNAMICS_SHOWN]
    if figures:
        lines.append("    " + ", ".join(f"{escape(k)} {v:.4g}" for k, v in figures))
    curve = run["curve"]
    if curve and curve["losses"]:
        lines.append(f"    curve: {len(curve['losses'])} points, loss {curve['losses'][0]:.4g} -> "
                     f"{curve['losses'][-1]:.4g}")
    if run["log"]:
        lines.append(f"    log: {escape(run['log'])}")
    return lines
