"""A night in Weights & Biases, as it runs (program.md's `tracking: {wandb: {project, entity,
mode}}`), through the real `wandb` SDK. W&B has no nested runs: a night's runs share the group
`<tag>`, and the job type says what each is:

    night        `<tag>`: its settings as config; after each decision the experiments decided,
                 the keeps and the incumbent's metric (its fresh reference runs' mean), a chart
                 of the night's progress; how it stopped in the summary
    experiment   `e0001 <description>`: the knobs it set, its prediction, hypothesis and commit
                 as config; each candidate run's metric as it lands; the decision (verdict,
                 effect, interval, p, seeds) in the summary
    seed run     `candidate seed 1000 (e0001)`: its training curve as history (`train_loss` by
                 step), the metric, run time and memory in the summary

Each run's id comes from the repository, the tag and what it is, and is opened with
resume="allow": online, a resumed night goes on with the same runs. Offline (`mode: offline`,
or WANDB_MODE=offline, which wins) the SDK writes the files a later `wandb sync` uploads,
under results/<tag>/wandb/. The SDK's own output stays out of the console (it never wraps
stdout), and no key is ever written by Nightshift: the SDK reads WANDB_API_KEY from the
harness's environment, which no run sees (sandbox/local.py `scrubbed_env`).
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from agent.publish.follow import Retry, first_line
from agent.publish.settings import WandbSettings, night_params
from agent.record.events import (DecisionMade, Event, ExperimentInvalid, ExperimentProposed, LoopStarted,
                                 LoopStopped, Role, RunFinished)
from agent.record.records import ExitCode
from agent.record.state import LoopState


class WandbSink:
    name = "wandb"

    def __init__(self, settings: WandbSettings, tag: str, metric: str, root: Path, results: Path) -> None:
        os.environ.setdefault("WANDB_SILENT", "true")       # the console is the night's
        self._wandb = None      # imported on the follower's thread: it takes a second or two
        self.settings, self.tag, self.metric = settings, tag, metric
        self.results = Path(results)
        self.mode = os.environ.get("WANDB_MODE") or settings.mode
        self._prefix = f"ns-{hashlib.sha1(str(Path(root).resolve()).encode()).hexdigest()[:6]}-{_word(tag)}"
        self._open: dict[str, Any] = {}    # id -> an open wandb Run
        self._unreachable: str | None = None   # why a run could not be opened (W&B did not answer)

    @property
    def wandb(self) -> Any:
        if self._wandb is None:
            import wandb

            self._wandb = wandb
        return self._wandb

    def deliver(self, event: Event, state: LoopState) -> str | None:
        if self._unreachable:
            raise Retry(self._unreachable)
        try:
            self._deliver(event, state)
        except Retry:
            raise
        except Exception as error:
            # Allowed answers only: W&B could not be reached (wait, try again), or W&B refused
            # this event (pass it over). Anything else, a key W&B rejects included, is a fault
            # the user must fix: the follower stops here and the event waits in the ledger.
            errors = self._wandb.errors if self._wandb is not None else None
            if errors is None or isinstance(error, errors.AuthenticationError):
                raise
            if isinstance(error, errors.CommError):
                raise Retry(f"W&B does not answer ({first_line(error, 160)})") from None
            if isinstance(error, errors.Error):
                return f"W&B refused {event.kind}: {first_line(error)}"
            raise
        return None

    def finish(self) -> None:
        for run in list(self._open.values()):
            run.finish()
        self._open.clear()

    # ---- events -------------------------------------------------------------------------

    def _deliver(self, event: Event, state: LoopState) -> None:
        if isinstance(event, LoopStarted):
            self._run("night", self.tag, "night",
                      night_params(event.program))
        elif isinstance(event, ExperimentProposed):
            self._experiment(event.id, state)
        elif isinstance(event, ExperimentInvalid):
            run = self._experiment(event.id, state)
            run.summary.update({"verdict": "invalid", "reason": event.reason})
            self._close(f"experiment-{event.id}")
        elif isinstance(event, RunFinished):
            self._seed_run(event, state)
        elif isinstance(event, DecisionMade):
            self._decided(event, state)
        elif isinstance(event, LoopStopped):
            night = self._run("night", self.tag, "night", {})
            night.summary.update({"stopped": event.reason, "exit_code": int(event.exit_code),
                                  "incumbent": state.incumbent, "experiments": len(state.experiments),
                                  "keeps": len(state.kept())})
            failed = event.exit_code not in (ExitCode.OK, ExitCode.INTERRUPTED)
            self._close("night", exit_code=1 if failed else 0)

    def _decided(self, event: DecisionMade, state: LoopState) -> None:
        run = self._experiment(event.id, state)
        test = event.decision
        summary: dict[str, Any] = {"verdict": event.verdict.value, "reason": event.reason}
        if test is not None:
            summary.update(effect=test.effect, p_value=test.p_value, seeds=len(test.seeds),
                           interval_low=test.interval[0] if test.interval else None,
                           interval_high=test.interval[1] if test.interval else None)
        if event.score is not None:
            summary.update(prediction_covered=event.score.covered,
                           prediction_direction_right=event.score.direction_right)
        run.summary.update(summary)
        self._close(f"experiment-{event.id}")
        night = self._run("night", self.tag, "night", {})
        decided = sum(1 for e in state.experiments.values() if e.decided)
        row: dict[str, Any] = {"experiments_decided": decided, "keeps": len(state.kept()),
                               "kept": int(event.verdict.value == "keep")}
        if test is not None and test.effect is not None:
            row["effect"] = test.effect
        fresh = state.reference(state.incumbent) if state.incumbent else {}
        if fresh:
            row[f"incumbent_{_word(self.metric)}"] = sum(fresh.values()) / len(fresh)
        night.log(row)

    def _seed_run(self, event: RunFinished, state: LoopState) -> None:
        role = Role(event.role).value
        label = f"{role} seed {event.seed}" + (f" ({event.experiment})" if event.experiment else "")
        run = self._run(f"run-{event.run_id}", label, "seed run", {
            "role": role, "seed": event.seed, "commit": event.commit, "experiment": event.experiment,
            "status": event.status.value})
        if event.curve is not None:
            for index, point in enumerate(event.curve.points):
                run.log({"train_loss": point.loss, "budget_fraction": point.fraction},
                        step=point.step if point.step is not None else index)
        run.summary.update({k: v for k, v in {self.metric: event.metric, "duration_s": event.duration_s,
                                              "peak_memory_mb": event.peak_memory_mb,
                                              "status": event.status.value}.items() if v is not None})
        self._close(f"run-{event.run_id}", exit_code=0 if event.ok else 1)
        if event.experiment and role == Role.CANDIDATE.value and event.ok:
            experiment = self._experiment(event.experiment, state)
            experiment.log({self.metric: event.metric, "seed": event.seed})

    # ---- runs ---------------------------------------------------------------------------

    def _experiment(self, experiment_id: str, state: LoopState) -> Any:
        experiment = state.experiments.get(experiment_id)
        config: dict[str, Any] = {}
        if experiment is not None:
            params = experiment.extra.get("params")
            config.update(params if isinstance(params, dict) else {})
            config.update(description=experiment.description, hypothesis=experiment.hypothesis,
                          commit=experiment.commit, parent=experiment.parent, researcher=experiment.researcher)
            if experiment.prediction is not None:
                p = experiment.prediction
                config.update(predicted_delta=p.expected_delta, predicted_interval=list(p.interval),
                              predicted_confidence=p.confidence)
        name = f"{experiment_id} {experiment.description[:60] if experiment else ''}".strip()
        return self._run(f"experiment-{experiment_id}", name, "experiment", config)

    def _run(self, what: str, name: str, job_type: str, config: dict[str, Any]) -> Any:
        """The open run of `what`, else one opened (resumed where it existed)."""
        run_id = f"{self._prefix}-{_word(what)}"[:64]
        if run_id in self._open:
            return self._open[run_id]
        settings = self.wandb.Settings(console="off", silent=True, x_disable_stats=True, x_disable_meta=True,
                                       disable_git=True, save_code=False, x_save_requirements=False)
        self.results.mkdir(parents=True, exist_ok=True)
        try:
            run = self.wandb.init(project=self.settings.project, entity=self.settings.entity, mode=self.mode,
                                  id=run_id, name=name, group=self.tag, job_type=job_type, config=config,
                                  dir=str(self.results), resume="allow", reinit="create_new", settings=settings)
        except self.wandb.errors.AuthenticationError:
            raise
        except self.wandb.errors.CommError as error:
            # The SDK keeps the id of an init that timed out as "in use" for the rest of the
            # process, so no later attempt here can open it: the rest waits in the ledger.
            self._unreachable = (f"W&B does not answer ({first_line(error, 160)}); its SDK cannot try "
                                 f"again in this process: the events wait for the tag's next run or "
                                 f"`nightshift export`")
            raise Retry(self._unreachable) from None
        self._open[run_id] = run
        return run

    def _close(self, what: str, exit_code: int = 0) -> None:
        run = self._open.pop(f"{self._prefix}-{_word(what)}"[:64], None)
        if run is not None:
            run.finish(exit_code=exit_code)


def _word(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", str(text))
