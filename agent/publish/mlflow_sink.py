"""A night in MLflow, as it runs (program.md's `tracking: {mlflow: {uri, experiment}}`), through
the real `MlflowClient`:

    <tag>                          the night: its settings as params, how it stopped, its report
    ├── baseline <commit>          the commit the night started from, its reference runs inside
    │   └── reference seed 0 ...   one run per seed: the metric, its curve as step metrics
    └── e0001 <description>        one run per experiment: the knobs it set as params, the
        ├── candidate seed 1000    prediction, the decision (effect, interval, p, seeds), the
        └── reference seed 1000    verdict; its diff as an artifact; a kept one holds its new
                                   incumbent's reference runs

Every run carries the tags `nightshift.tag` and `nightshift.key` and is found by them before
one is created, so a resumed night (or `nightshift export --mlflow` after it) goes on with the
same runs instead of making new ones; a seed run already ended is left as it is. A server that
does not answer raises `Retry` (agent/publish/follow.py waits and tries again; the night never
waits for it).
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from agent.publish.follow import Retry, first_line
from agent.publish.settings import MlflowSettings, night_params
from agent.record.events import (DecisionMade, Event, ExperimentInvalid, ExperimentProposed, LoopResumed,
                                 LoopStarted, LoopStopped, Role, RunFinished)
from agent.record.records import ExitCode, Verdict
from agent.record.state import LoopState
from sandbox import Status

TEXT_CHARS = 5000        # a tag's value, cut (MLflow's stores refuse longer ones)
PARAM_CHARS = 500
ENDED = {Status.OK: "FINISHED", Status.INTERRUPTED: "KILLED"}     # anything else: FAILED
DESCRIBED = "nightshift.described"   # a run's params and artifacts were all logged


class MlflowSink:
    name = "mlflow"

    def __init__(self, settings: MlflowSettings, tag: str, metric: str, root: Path, results: Path) -> None:
        # fail fast where the client would retry for minutes: the follower retries, not the night
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")   # the console is ours
        self.settings, self.tag, self.metric = settings, tag, _metric_key(metric)
        self.root, self.results = Path(root), Path(results)
        self._client = None     # made on the follower's thread: importing mlflow takes seconds
        self._experiment: str | None = None
        self._ids: dict[str, str] = {}     # nightshift.key -> MLflow run id
        self._ended: set[str] = set()      # keys of runs found or made ended: left as they are
        self._described: set[str] = set()  # keys of runs whose params and diff are all there
        self.runs_made = 0

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.settings.uri)
        return self._client

    # ---- the follower's protocol -----------------------------------------------------------

    def deliver(self, event: Event, state: LoopState) -> str | None:
        try:
            self._deliver(event, state)
        except Exception as error:   # the client's errors have no common base (requests, MLflow)
            if _unreachable(error):
                raise Retry(f"the MLflow server at {self.settings.uri} does not answer "
                            f"({_why_down(error)})") from None
            from mlflow.exceptions import MlflowException
            from requests import HTTPError      # an artifact upload the server answered with 4xx

            if not isinstance(error, (MlflowException, HTTPError)):
                raise        # not the server's answer: the follower stops here, the event waits
            return f"MLflow refused {event.kind}: {first_line(error)}"
        return None

    def finish(self) -> None:
        """The report, written once the night stopped, goes to the night's run."""
        report = self.results / "report.html"
        if report.is_file() and "night" in self._ids:
            try:
                self.client.log_artifact(self._ids["night"], str(report))
            except Exception:
                pass     # `nightshift export --mlflow` sends it again

    # ---- events -------------------------------------------------------------------------

    def _deliver(self, event: Event, state: LoopState) -> None:
        if isinstance(event, LoopStarted):
            night = self._night(state)
            if "night" not in self._described:
                self._params(night, night_params(event.program))
                self._described_now("night")
            self._baseline(state)
        elif isinstance(event, LoopResumed):
            for key, run in (("night", self._night(state)), (f"commit/{state.base_commit}", self._baseline(state))):
                self.client.update_run(run, status="RUNNING")
                self._ended.discard(key)
        elif isinstance(event, ExperimentProposed):
            self._experiment_run(event.id, state)
        elif isinstance(event, ExperimentInvalid):
            run = self._experiment_run(event.id, state)
            self.client.log_batch(run, tags=self._tags({"nightshift.verdict": Verdict.INVALID.value,
                                                        "nightshift.reason": event.reason}))
            self._end(f"experiment/{event.id}", "FINISHED")
        elif isinstance(event, RunFinished):
            self._seed_run(event, state)
        elif isinstance(event, DecisionMade):
            self._decided(event, state)
        elif isinstance(event, LoopStopped):
            night = self._night(state)
            self.client.log_batch(night, metrics=self._metrics({
                "experiments": len(state.experiments), "kept": len(state.kept())}), tags=self._tags({
                "nightshift.stopped": event.reason, "nightshift.incumbent": state.incumbent or ""}))
            failed = event.exit_code not in (ExitCode.OK, ExitCode.INTERRUPTED)
            self._baseline(state)
            self._end(f"commit/{state.base_commit}", "FINISHED")
            self._end("night", "FAILED" if failed else "FINISHED")

    def _decided(self, event: DecisionMade, state: LoopState) -> None:
        run = self._experiment_run(event.id, state)
        if f"experiment/{event.id}" in self._ended:
            return   # its decision was logged before
        test = event.decision
        figures: dict[str, Any] = {}
        if test is not None:
            figures = {"effect": test.effect, "p_value": test.p_value, "seeds": len(test.seeds),
                       "interval_low": test.interval[0] if test.interval else None,
                       "interval_high": test.interval[1] if test.interval else None}
        if event.score is not None:    # the pre-registered prediction against the measurement
            figures.update(prediction_covered=float(event.score.covered),
                           prediction_direction_right=float(event.score.direction_right),
                           prediction_error=event.score.error)
        tags = {"nightshift.verdict": event.verdict.value, "nightshift.reason": event.reason}
        if event.verdict == Verdict.KEEP:    # the night's run names the incumbent of the moment
            tags["nightshift.kept"] = "true"
            self.client.set_tag(self._night(state), "nightshift.incumbent", event.commit)
        self.client.log_batch(run, metrics=self._metrics(figures), tags=self._tags(tags))
        self._end(f"experiment/{event.id}", "FINISHED")

    def _seed_run(self, event: RunFinished, state: LoopState) -> None:
        parent = self._parent_of(event, state)
        key = f"run/{event.run_id}"
        role = Role(event.role).value
        run = self._find_or_create(key, f"{role} seed {event.seed}", parent, {
            "nightshift.commit": event.commit, "nightshift.seed": str(event.seed), "nightshift.role": role,
            "nightshift.status": event.status.value, "nightshift.reason": event.reason})
        if key in self._ended:
            return   # delivered in full before (a kill, a retry, an export after the night)
        figures = {self.metric: event.metric, "duration_s": event.duration_s,
                   "peak_memory_mb": event.peak_memory_mb}
        metrics = self._metrics(figures)
        if event.curve is not None:
            from mlflow.entities import Metric

            now = _millis()
            metrics += [Metric("train_loss", float(p.loss), now, p.step if p.step is not None else i)
                        for i, p in enumerate(event.curve.points)]
        for start in range(0, len(metrics), 900):      # a batch holds 1000 metrics at most
            self.client.log_batch(run, metrics=metrics[start:start + 900])
        self._end(key, ENDED.get(event.status, "FAILED"))

    # ---- the runs -----------------------------------------------------------------------

    def _night(self, state: LoopState) -> str:
        return self._find_or_create("night", self.tag, None, {"nightshift.base_commit": state.base_commit or ""})

    def _baseline(self, state: LoopState) -> str:
        base = state.base_commit or ""
        run = self._find_or_create(f"commit/{base}", f"baseline {base[:8]}", self._night(state),
                                   {"nightshift.commit": base, "nightshift.baseline": "true"})
        return run

    def _experiment_run(self, experiment_id: str, state: LoopState) -> str:
        experiment = state.experiments.get(experiment_id)
        description = experiment.description if experiment else ""
        tags = {"nightshift.experiment": experiment_id}
        if experiment is not None:
            tags.update({"nightshift.commit": experiment.commit or "", "nightshift.parent": experiment.parent,
                         "nightshift.hypothesis": experiment.hypothesis, "nightshift.researcher": experiment.researcher,
                         "mlflow.note.content": f"{description}\n\n{experiment.hypothesis}"})
        key = f"experiment/{experiment_id}"
        run = self._find_or_create(key, f"{experiment_id} {description[:60]}", self._night(state), tags)
        if key in self._described or experiment is None:
            return run
        params = dict(experiment.extra.get("params") or {}) if isinstance(experiment.extra.get("params"), dict) else {}
        params["description"] = description
        if experiment.prediction is not None:
            prediction = experiment.prediction
            params.update(predicted_delta=prediction.expected_delta, predicted_low=prediction.interval[0],
                          predicted_high=prediction.interval[1], predicted_confidence=prediction.confidence)
        self._params(run, params)
        if experiment.commit:
            diff = _diff(self.root, experiment.parent, experiment.commit)
            if diff:
                self.client.log_text(run, diff, "diff.patch")
        self._described_now(key)
        return run

    def _parent_of(self, event: RunFinished, state: LoopState) -> str:
        """A candidate's run, or a bracket, sits in its experiment; a reference run in the run
        of the commit it measured (the baseline, or the experiment that made it incumbent)."""
        if event.experiment:
            return self._experiment_run(event.experiment, state)
        if event.commit == state.base_commit:
            return self._baseline(state)
        maker = next((e for e in state.experiments.values() if e.commit == event.commit), None)
        return self._experiment_run(maker.id, state) if maker else self._baseline(state)

    def _find_or_create(self, key: str, name: str, parent: str | None, tags: dict[str, str]) -> str:
        """The run of `key`: made here, by the night before a kill, or by an earlier export,
        else made now. What a found run holds already is remembered (`_ended`, `_described`):
        each step of a run is marked done on the server last, so a step cut short is redone."""
        if key in self._ids:
            return self._ids[key]
        experiment = self._experiment_id()
        found = self.client.search_runs(
            [experiment], filter_string=f"tags.`nightshift.tag` = '{_quoted(self.tag)}' and "
                                        f"tags.`nightshift.key` = '{_quoted(key)}'", max_results=1)
        if found:
            if found[0].info.status not in ("RUNNING", "SCHEDULED"):
                self._ended.add(key)
            if found[0].data.tags.get(DESCRIBED) == "true":
                self._described.add(key)
            self._ids[key] = found[0].info.run_id
            return self._ids[key]
        all_tags = {"nightshift.tag": self.tag, "nightshift.key": key, **tags}
        if parent is not None:
            all_tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(experiment, run_name=name[:250],
                                     tags={k: str(v)[:TEXT_CHARS] for k, v in all_tags.items()})
        self._ids[key] = run.info.run_id
        self.runs_made += 1
        return self._ids[key]

    def _described_now(self, key: str) -> None:
        self.client.set_tag(self._ids[key], DESCRIBED, "true")
        self._described.add(key)

    def _end(self, key: str, status: str) -> None:
        self.client.set_terminated(self._ids[key], status=status)
        self._ended.add(key)

    def _experiment_id(self) -> str:
        if self._experiment is None:
            found = self.client.get_experiment_by_name(self.settings.experiment)
            self._experiment = (found.experiment_id if found is not None
                                else self.client.create_experiment(self.settings.experiment))
        return self._experiment

    # ---- values ------------------------------------------------------------------------

    def _params(self, run: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(_metric_key(k), str(v)[:PARAM_CHARS]) for k, v in params.items() if v is not None]
        if items:
            self.client.log_batch(run, params=items)

    @staticmethod
    def _metrics(figures: dict[str, Any]) -> list:
        from mlflow.entities import Metric

        now = _millis()
        return [Metric(_metric_key(k), float(v), now, 0) for k, v in figures.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]

    @staticmethod
    def _tags(tags: dict[str, str]) -> list:
        from mlflow.entities import RunTag

        return [RunTag(k, str(v)[:TEXT_CHARS]) for k, v in tags.items()]


def _diff(root: Path, parent: str, commit: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(root), "diff", parent, commit], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _unreachable(error: BaseException) -> bool:
    """A server that does not answer (try again later), not one that refused what it was sent."""
    text = f"{type(error).__name__}: {error}"
    return any(word in text for word in ("ConnectionError", "Connection refused", "Max retries exceeded",
                                         "Timeout", "timed out", "503", "502", "504",
                                         "TEMPORARILY_UNAVAILABLE", "RemoteDisconnected"))


def _why_down(error: BaseException) -> str:
    text = str(error)
    for phrase, said in (("Connection refused", "connection refused"), ("timed out", "timed out"),
                         ("Name or service not known", "unknown host"), ("RemoteDisconnected", "it hung up")):
        if phrase in text:
            return said
    return first_line(error)


def _metric_key(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", str(name))[:250]


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _millis() -> int:
    return int(time.time() * 1000)
