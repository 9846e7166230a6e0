"""The ledger: an append-only JSONL file of events, and the loop state folded from it.

Every line is one event, flushed and fsynced before the call returns, so a crash loses at
most the line being written. A truncated last line (the crash came mid-write) is ignored
when reading and overwritten by the next append. The state of a loop is a pure fold of
its events: `nightshift run --tag X` after a crash resumes from `fold(read_events(...))`.

Event kinds (field `event`):
  loop_started        tag, base_commit, program, researcher, sandbox, rule, data_dir, ...
  loop_resumed        same facts as loop_started, for this invocation
  hypothesis_queued   hypothesis_id, text, origin
  experiment_proposed id, commit, parent, description, hypothesis, prediction, researcher,
                      hypothesis_id, extra
  experiment_invalid  id, parent, description, hypothesis, prediction, reason, diff
  run_started         run_id, commit, seed, role ("reference" | "candidate"), experiment
  run_finished        run_id, commit, seed, role, experiment, status, metric, metrics, ...
  decision            id, commit, incumbent, verdict, decision{...}, score{...}
  loop_stopped        reason, exit_code
  replay              kind ("run" | "commit" | "summary"), replay_id, ... (see agent/review/replay.py)
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

LEDGER_FILE = "ledger.jsonl"
TSV_FILE = "results.tsv"
TSV_COLUMNS = ("commit", "val_bpb", "memory_gb", "status", "description")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Ledger:
    """Appends events to `<results_dir>/ledger.jsonl`, one fsynced line each."""

    def __init__(self, results_dir: Path) -> None:
        self.dir = Path(results_dir)
        self.path = self.dir / LEDGER_FILE
        self.dir.mkdir(parents=True, exist_ok=True)
        self._drop_truncated_tail()

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"event": event, "time": utc_now(), **fields}
        line = json.dumps(record, default=_json_default, allow_nan=False, sort_keys=False)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return record

    def events(self) -> list[dict[str, Any]]:
        return list(read_events(self.path))

    def _drop_truncated_tail(self) -> None:
        """A crash mid-write leaves a last line without its newline: cut it off so the
        next event starts on a line of its own."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as handle:
                handle.truncate(keep)
                handle.flush()
                os.fsync(handle.fileno())


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "value"):  # enums
        return value.value
    raise TypeError(f"cannot record {type(value).__name__} in the ledger")


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """Events in order. Skips a truncated or corrupt line rather than failing the night."""
    path = Path(path)
    if path.is_dir():
        path = path / LEDGER_FILE
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.endswith("\n"):
                return  # truncated by a crash mid-write
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "event" in record:
                yield record


# ---- the fold ---------------------------------------------------------------------------

@dataclass
class Experiment:
    id: str
    commit: str | None
    parent: str
    description: str
    hypothesis: str
    prediction: dict[str, Any] | None
    researcher: str
    hypothesis_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    decision: dict[str, Any] | None = None   # the decision event, once decided
    invalid_reason: str | None = None

    @property
    def decided(self) -> bool:
        return self.decision is not None or self.invalid_reason is not None

    @property
    def verdict(self) -> str | None:
        if self.invalid_reason is not None:
            return "invalid"
        return self.decision["verdict"] if self.decision else None


@dataclass
class LoopState:
    tag: str | None = None
    base_commit: str | None = None
    incumbent: str | None = None
    experiments: dict[str, Experiment] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    in_flight: dict[str, Any] | None = None           # a run_started without its run_finished
    hypotheses: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> queued event
    decisions: list[dict[str, Any]] = field(default_factory=list)
    started: bool = False
    stopped_reason: str | None = None

    @property
    def pending(self) -> Experiment | None:
        """The experiment that was proposed but not decided when the loop stopped."""
        for experiment in self.experiments.values():
            if not experiment.decided:
                return experiment
        return None

    @property
    def next_index(self) -> int:
        return len(self.experiments) + 1

    def ok_values(self, commit: str, role: str | None = None) -> dict[int, float]:
        """seed -> metric for the OK runs of a commit (optionally one role only)."""
        return {
            run["seed"]: run["metric"]
            for run in self.runs
            if run["commit"] == commit and run["status"] == "ok"
            and (role is None or run["role"] == role)
        }

    def reference(self, commit: str) -> dict[int, float]:
        """The incumbent's fresh reference runs: never the runs that selected it."""
        return self.ok_values(commit, role="reference")

    def noise_groups(self) -> list[list[float]]:
        """Per-commit lists of OK metrics, for the pooled seed-to-seed spread."""
        by_commit: dict[str, list[float]] = {}
        for run in self.runs:
            if run["status"] == "ok" and run.get("metric") is not None:
                by_commit.setdefault(run["commit"], []).append(run["metric"])
        return list(by_commit.values())

    def open_hypotheses(self) -> list[tuple[str, str]]:
        tested = {e.hypothesis_id for e in self.experiments.values() if e.hypothesis_id}
        return [(hid, h["text"]) for hid, h in self.hypotheses.items() if hid not in tested]

    def kept(self) -> list[Experiment]:
        return [e for e in self.experiments.values() if e.verdict == "keep"]


def fold(events: Iterable[dict[str, Any]]) -> LoopState:
    state = LoopState()
    started_runs: dict[str, dict[str, Any]] = {}
    for event in events:
        kind = event["event"]
        if kind == "loop_started":
            state.started = True
            state.tag = event.get("tag")
            state.base_commit = event["base_commit"]
            state.incumbent = event["base_commit"]
        elif kind == "loop_stopped":
            state.stopped_reason = event.get("reason")
        elif kind == "hypothesis_queued":
            state.hypotheses[event["hypothesis_id"]] = event
        elif kind == "experiment_proposed":
            state.experiments[event["id"]] = Experiment(
                id=event["id"], commit=event["commit"], parent=event["parent"],
                description=event.get("description", ""), hypothesis=event.get("hypothesis", ""),
                prediction=event.get("prediction"), researcher=event.get("researcher", ""),
                hypothesis_id=event.get("hypothesis_id"), extra=event.get("extra") or {},
            )
        elif kind == "experiment_invalid":
            state.experiments[event["id"]] = Experiment(
                id=event["id"], commit=event.get("commit"), parent=event["parent"],
                description=event.get("description", ""), hypothesis=event.get("hypothesis", ""),
                prediction=event.get("prediction"), researcher=event.get("researcher", ""),
                hypothesis_id=event.get("hypothesis_id"), invalid_reason=event["reason"],
                extra={"diff": event.get("diff", "")},
            )
        elif kind == "run_started":
            started_runs[event["run_id"]] = event
        elif kind == "run_finished":
            started_runs.pop(event["run_id"], None)
            if event["status"] != "interrupted":
                state.runs.append(event)
                experiment = state.experiments.get(event.get("experiment") or "")
                if experiment is not None and event["role"] == "candidate":
                    experiment.runs.append(event)
        elif kind == "decision":
            state.decisions.append(event)
            experiment = state.experiments.get(event["id"])
            if experiment is not None:
                experiment.decision = event
            if event["verdict"] == "keep":
                state.incumbent = event["commit"]
    state.in_flight = next(iter(started_runs.values()), None) if started_runs else None
    return state


# ---- morning views ----------------------------------------------------------------------

def write_tsv(state: LoopState, results_dir: Path, metric: str = "val_bpb") -> Path:
    """Regenerate results.tsv in autoresearch's columns (the metric column keeps its name)."""
    lines = ["\t".join((TSV_COLUMNS[0], metric, *TSV_COLUMNS[2:]))]
    for experiment in state.experiments.values():
        if not experiment.decided:
            continue
        values = [r["metric"] for r in experiment.runs if r["status"] == "ok"]
        memory = [r.get("peak_memory_mb") for r in experiment.runs if r.get("peak_memory_mb")]
        value = f"{statistics.fmean(values):.6f}" if values else "0.000000"
        memory_gb = f"{max(memory) / 1024:.1f}" if memory else "0.0"
        commit = (experiment.commit or "0000000")[:7]
        description = experiment.description.replace("\t", " ").replace("\n", " ")
        lines.append("\t".join((commit, value, memory_gb, experiment.verdict or "", description)))
    path = Path(results_dir) / TSV_FILE
    tmp = path.with_suffix(".tsv.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def load(results_dir: str | Path) -> dict[str, "Any"]:
    """Tidy pandas DataFrames of a tag: {"experiments", "runs", "decisions", "replays",
    "replay_runs"}. Columns are documented in docs/ledger.md.

    experiments: one row per experiment (id, commit, parent, description, hypothesis,
      researcher, verdict, effect, ci_low, ci_high, p_value, n_seeds, candidate_mean,
      predicted_delta, prediction_direction, prediction_covered)
    runs: one row per finished run (run_id, commit, experiment, role, seed, status, metric,
      duration_s, peak_memory_mb, plus every numeric metric the script reported)
    """
    import pandas as pd

    events = list(read_events(Path(results_dir)))
    state = fold(events)
    rows = []
    for experiment in state.experiments.values():
        decision = (experiment.decision or {}).get("decision") or {}
        score = (experiment.decision or {}).get("score") or {}
        prediction = experiment.prediction or {}
        interval = decision.get("interval") or [None, None]
        values = [r["metric"] for r in experiment.runs if r["status"] == "ok"]
        rows.append({
            "id": experiment.id, "commit": experiment.commit, "parent": experiment.parent,
            "description": experiment.description, "hypothesis": experiment.hypothesis,
            "researcher": experiment.researcher, "verdict": experiment.verdict,
            "effect": decision.get("effect"), "ci_low": interval[0], "ci_high": interval[1],
            "p_value": decision.get("p_value"), "n_seeds": len(values),
            "candidate_mean": statistics.fmean(values) if values else None,
            "predicted_delta": prediction.get("expected_delta"),
            "prediction_direction": prediction.get("direction"),
            "prediction_covered": score.get("covered"),
            "direction_right": score.get("direction_right"),
            "time": (experiment.decision or {}).get("time"),
        })
    run_rows = []
    for run in state.runs:
        row = {k: run.get(k) for k in ("run_id", "commit", "experiment", "role", "seed", "status",
                                       "metric", "duration_s", "peak_memory_mb", "time")}
        for key, value in (run.get("metrics") or {}).items():
            if isinstance(value, (int, float)) and key not in row:
                row[key] = value
        run_rows.append(row)
    replays = [e for e in events if e["event"] == "replay"]
    return {
        "experiments": pd.DataFrame(rows),
        "runs": pd.DataFrame(run_rows),
        "decisions": pd.DataFrame([{**(d.get("decision") or {}), "id": d["id"], "verdict": d["verdict"]}
                                   for d in state.decisions]),
        "replays": pd.DataFrame([_replay_row(e) for e in replays if e.get("kind") == "commit"]),
        "replay_runs": pd.DataFrame([{k: e.get(k) for k in _REPLAY_RUN_COLUMNS}
                                     for e in replays if e.get("kind") == "run"]),
    }


_REPLAY_RUN_COLUMNS = ("replay_id", "commit", "target_role", "experiment", "seed", "budget_s",
                       "split", "status", "metric", "duration_s", "env_changed", "run_id", "time")


def _replay_row(event: dict[str, Any]) -> dict[str, Any]:
    """One replayed commit, flattened (see docs/ledger.md for the columns)."""
    original = event.get("original") or {}
    reproduce = event.get("reproduce") or {}
    interval = reproduce.get("interval") or [None, None]
    full = event.get("full_interval") or [None, None]
    return {
        **{k: event.get(k) for k in ("replay_id", "commit", "target_role", "experiment", "parent",
                                     "budget_s", "split", "n_ok", "n_failed", "mean", "sd",
                                     "proxy_effect", "full_effect", "full_effect_vs_base",
                                     "env_changed", "time")},
        "full_ci_low": full[0], "full_ci_high": full[1],
        "original_mean": original.get("mean"), "original_n": original.get("n"),
        "original_budget_s": original.get("budget_s"),
        "reproduced": reproduce.get("reproduced"), "difference": reproduce.get("difference"),
        "difference_ci_low": interval[0], "difference_ci_high": interval[1],
        "env_diff": ", ".join(d["field"] for d in event.get("env_diff") or []),
    }
