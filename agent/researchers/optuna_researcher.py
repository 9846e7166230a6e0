"""The LLM-free researcher: an Optuna study over the target's knobs (its `# search:`
annotations and program.md's `knobs:`, see agent.target.knobs).

Where it searches: the learning rates first, then near the incumbent. The opening
(agent.researchers.opening) line-searches each learning-rate knob by factors of two, as the
seeds' first rule of tuning asks. The first `startup` proposals (10) are local
moves (agent.researchers.local_moves: one knob, one step inside a trust region that grows on
keeps and shrinks on discards); after that TPE proposes, varying 1..knobs_per_proposal knobs,
and a third of the proposals stay local moves, because TPE models the whole space while the
night's gains are found around a moving incumbent. Every proposal fixes the knobs it does not
vary at the incumbent's values, so a kept change is always attributable. Every trial records
the *whole* configuration as its params, so the study models the metric over the full knob
space as the incumbent moves. The trial's value is the candidate's measured mean. The study
lives in `state_dir/optuna.db` (SQLite); a new researcher on the same state_dir continues it.

Queued human hypotheses that are plain knob assignments (`LR=1e-3`, `set N_LAYER to 4`) are
tested first; prose ones are left for a researcher that reads prose (noted in `extra`).

Predictions come from the study's own model, a Gaussian process over every measured
configuration: see `agent.researchers.prediction_stats`.
"""
from __future__ import annotations

import math
import random
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from agent.target.knobs import (
    Knob, KnobError, find_knobs, format_sig, format_value, parse_assignments, round_sig, same_value, set_knobs,
)
from agent.researchers.local_moves import local_move, trust_radius
from agent.researchers.opening import FACTOR, Move, Step, next_move
from agent.researchers.prediction_stats import TriedConfig, predict_delta
from agent.record.records import Direction
from agent.record.state import Experiment
from agent.researchers.base import Outcome, Proposal, ResearchContext, Researcher, ResearcherError

STUDY_NAME = "nightshift"
SIGNIFICANT_DIGITS = 3   # sampled floats are rounded so the diff stays readable (3e-3, not 0.0030127…)


class OptunaResearcher(Researcher):
    """TPE over the target's knobs, persisted in `state_dir/optuna.db`. `knobs` is
    program.md's `knobs:` (name -> search space) over the target's own assignments."""

    name = "optuna"

    def __init__(self, state_dir: Path, seed: int = 0, knobs_per_proposal: int = 2,
                 direction: Direction = Direction.MINIMIZE, knobs: dict[str, str] | None = None,
                 startup: int = 10, local_share: float = 1 / 3, opening: bool = True) -> None:
        try:
            direction = Direction(direction)
        except ValueError:
            raise ResearcherError(f"optuna researcher: direction must be one of "
                                  f"{'|'.join(d.value for d in Direction)}, got {direction!r}") from None
        if knobs_per_proposal < 1:
            raise ResearcherError(f"optuna researcher: knobs_per_proposal must be >= 1, got {knobs_per_proposal}")
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.seed = seed
        self.knobs_per_proposal = knobs_per_proposal
        self.direction = direction
        self.startup, self.local_share, self.opening = startup, local_share, opening
        self._last_move, self._last_radius, self._last_up = None, 0.0, True   # of the proposal being written
        self.declared = dict(knobs or {})
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(
            study_name=STUDY_NAME, storage=_sqlite_storage(self.state_dir / "optuna.db"),
            direction=direction.value, load_if_exists=True,
        )
        stored = self.study.direction.name.lower()
        if stored != direction:
            raise ResearcherError(
                f"optuna researcher: the study in {self.state_dir / 'optuna.db'} was created to "
                f"{stored} but the program says {direction}; use a new results tag or delete that file"
            )
        self._pending: dict[int, optuna.Trial] = {}   # trials asked by this process, by number
        self._fail_orphans()

    # ---- Researcher ------------------------------------------------------------------------

    def propose(self, context: ResearchContext) -> Proposal:
        knobs = self._knobs(context)
        incumbent = {k.name: k.value for k in knobs}
        skipped: list[dict[str, str]] = []
        for hyp_id, text in context.hypotheses:
            try:
                assignment = parse_assignments(text, knobs)
            except KnobError as exc:
                skipped.append({"id": hyp_id, "reason": f"not a knob assignment: {exc}"})
                continue
            if all(same_value(incumbent[n], v) for n, v in assignment.items()):
                skipped.append({"id": hyp_id, "reason": "the incumbent already has these values"})
                continue
            config = {**incumbent, **assignment}
            trial = self._ask(knobs, config, varied=[], experiment_index=context.experiment_index)
            return self._proposal(context, knobs, incumbent, config, trial, skipped,
                                  hypothesis=text, hypothesis_id=hyp_id)
        move = self._opening_move(knobs, incumbent) if self.opening else None
        if move is not None:
            config = {**incumbent, move.knob.name: move.value}
            trial = self._ask(knobs, config, varied=[], experiment_index=context.experiment_index)
            trial.set_user_attr("move", "opening")
            trial.set_user_attr("step", [move.knob.name, move.up])
            return self._proposal(context, knobs, incumbent, config, trial, skipped)
        rng = random.Random(f"nightshift-optuna-move:{self.seed}:{context.experiment_index}")
        done = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len(done) < self.startup or rng.random() < self.local_share:
            moved = self._local_config(knobs, incumbent, context.incumbent_commit, rng)
            if moved is not None:
                config, radius, step = moved
                trial = self._ask(knobs, config, varied=[], experiment_index=context.experiment_index)
                trial.set_user_attr("move", "local")
                trial.set_user_attr("radius", radius)
                trial.set_user_attr("step", step)
                return self._proposal(context, knobs, incumbent, config, trial, skipped)
        varied = self._pick_knobs(knobs, context.experiment_index)
        trial = self._ask(knobs, incumbent, varied, context.experiment_index)
        trial.set_user_attr("move", "tpe")
        config = self._applied_config(knobs, incumbent, varied, trial)
        if all(same_value(config[n], incumbent[n]) for n in config):
            # TPE drew the incumbent's own values (likely for a small int or choice space).
            # That trial is recorded as failed-and-skipped and a neighbouring setting is run
            # instead, asked as a fully fixed trial so the study stores exactly what ran.
            trial.set_user_attr("skipped", "sampled the incumbent's values; nudged instead")
            self.study.tell(trial, state=TrialState.FAIL)
            self._pending.pop(trial.number, None)
            config = {**incumbent, varied[0].name: _nudge(varied[0], incumbent[varied[0].name])}
            trial = self._ask(knobs, config, varied=[], experiment_index=context.experiment_index)
        return self._proposal(context, knobs, incumbent, config, trial, skipped)

    def observe(self, experiment: Experiment, outcome: Outcome) -> None:
        number = experiment.extra.get("trial")
        if number is None:
            return   # not one of ours (e.g. a proposal made by another researcher)
        value = outcome.candidate_mean
        has_value = value is not None and math.isfinite(value)
        attrs = {"experiment_id": outcome.experiment_id, "verdict": str(outcome.verdict),
                 "measured_delta": outcome.measured_delta}
        trial = self._pending.pop(number, None)
        trials = self.study.get_trials(deepcopy=False)
        if not isinstance(number, int) or not 0 <= number < len(trials):
            return   # the study file was replaced since this proposal; nothing to tell
        frozen = trials[number]
        if frozen.state == TrialState.RUNNING:
            if trial is not None:
                for key, val in attrs.items():
                    trial.set_user_attr(key, val)
            try:
                if outcome.stopped_early or outcome.over_compute:
                    # Optuna's own word for a trial its curve showed losing: TPE ranks it with
                    # the worse ones, where a failure would be left out of the model. A trial
                    # refused for its compute goes there too, whatever it scored: its value
                    # would steer the search toward ever bigger models the night refuses.
                    self.study.tell(number, state=TrialState.PRUNED)
                elif has_value:
                    self.study.tell(number, value)
                else:
                    self.study.tell(number, state=TrialState.FAIL)
            except (ValueError, RuntimeError):
                pass   # finished meanwhile (another process resumed it): the first tell stands
            return
        already = any(t.user_attrs.get("recovered_from_trial") == number for t in trials)
        if frozen.state == TrialState.FAIL and has_value and not already:
            # The trial was marked FAIL as an orphan when this researcher restarted while its
            # experiment was still in flight; the loop finished that experiment after all.
            # Optuna cannot reopen a trial, so its measurement is added as a new, complete one.
            self.study.add_trial(optuna.trial.create_trial(
                params=frozen.params, distributions=frozen.distributions, value=value,
                user_attrs={**frozen.user_attrs, **attrs, "recovered_from_trial": number},
            ))
        # Otherwise the trial is already finished with this outcome (observe called twice):
        # telling it again would raise, and the first tell stands.

    # ---- sampling --------------------------------------------------------------------------

    def _knobs(self, context: ResearchContext) -> list[Knob]:
        try:
            knobs = find_knobs(context.incumbent_source, path=context.target, declared=self.declared)
        except KnobError as exc:
            raise ResearcherError(f"optuna researcher: {context.target}: {exc}") from exc
        if not knobs:
            raise ResearcherError(
                f"optuna researcher: {context.target} has no knobs; name assignments of the target "
                f"in program.md (`knobs: {{learning_rate: log(1e-4, 1e-2)}}`), annotate constants "
                f"like `LR = 3e-3  # search: log(1e-4, 3e-2)`, or use another researcher"
            )
        return knobs

    def _opening_move(self, knobs: list[Knob], incumbent: dict[str, Any]) -> Move | None:
        """The opening's next move, from its earlier trials: a trial without a verdict is in
        flight while it runs, and lost (not kept) once it failed or was orphaned by a restart."""
        steps = [Step(t.user_attrs["step"][0], bool(t.user_attrs["step"][1]),
                      t.user_attrs.get("verdict") or (None if t.state == TrialState.RUNNING else "lost"))
                 for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get("move") == "opening"]
        return next_move(knobs, incumbent, steps)

    def _local_config(self, knobs: list[Knob], incumbent: dict[str, Any], base: str,
                      rng: random.Random) -> tuple[dict[str, Any], float, list] | None:
        """The incumbent with one knob moved inside the trust region, the region's radius and
        the step ([base, knob, up]); steps already tried from this incumbent come last, so the
        neighbourhood is walked instead of re-tried. None when no knob can move."""
        trials = self.study.get_trials(deepcopy=False)
        local = [t for t in trials if t.user_attrs.get("move") == "local"]
        radius = trust_radius([t.user_attrs["verdict"] for t in local if "verdict" in t.user_attrs])
        tried = {tuple(t.user_attrs["step"]) for t in local if t.user_attrs.get("step")}
        # Settings measured already (or in flight): every trial's, and the incumbents they were
        # moved from, so a step back to the incumbent a keep replaced is never proposed again.
        seen = {_config_key(t.user_attrs[attr]) for t in trials for attr in ("config", "from")
                if isinstance(t.user_attrs.get(attr), dict)}
        steps = [(knob, up) for knob in rng.sample(knobs, len(knobs)) for up in rng.sample([True, False], 2)]
        steps.sort(key=lambda s: (base, s[0].name, s[1]) in tried)      # stable: untried first
        fallback = None
        for knob, up in steps:
            value = local_move(knob, incumbent[knob.name], radius, rng, up=up)
            if value is None:
                continue
            moved = ({**incumbent, knob.name: value}, radius, [base, knob.name, up])
            if _config_key(moved[0]) not in seen:
                return moved
            fallback = fallback or moved
        return fallback

    def _pick_knobs(self, knobs: list[Knob], experiment_index: int) -> list[Knob]:
        rng = random.Random(f"nightshift-optuna:{self.seed}:{experiment_index}")
        count = rng.randint(1, min(self.knobs_per_proposal, len(knobs)))
        return sorted(rng.sample(knobs, count), key=lambda k: k.line)

    def _ask(self, knobs: list[Knob], config: dict[str, Any], varied: list[Knob],
             experiment_index: int) -> optuna.Trial:
        """Ask a trial whose varied knobs TPE samples and whose other knobs are fixed at
        `config`. Knobs whose fixed value lies outside their space are not study params (Optuna
        could not represent them); they are kept in the `config` user attribute instead."""
        varied_names = {k.name for k in varied}
        distributions: dict[str, BaseDistribution] = {}
        fixed: dict[str, Any] = {}
        for knob in knobs:
            if knob.name in varied_names:
                distributions[knob.name] = _distribution(knob)
            elif knob.contains(config[knob.name]):
                distributions[knob.name] = _distribution(knob)
                fixed[knob.name] = config[knob.name]
        sampler_seed = (self.seed * 1_000_003 + experiment_index) % 2**32
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.study.sampler = optuna.samplers.PartialFixedSampler(
                fixed, optuna.samplers.TPESampler(seed=sampler_seed))
            trial = self.study.ask(distributions)
        trial.set_user_attr("experiment_index", experiment_index)
        self._pending[trial.number] = trial
        return trial

    def _applied_config(self, knobs: list[Knob], incumbent: dict[str, Any], varied: list[Knob],
                        trial: optuna.Trial) -> dict[str, Any]:
        config = dict(incumbent)
        for knob in varied:
            value = trial.params[knob.name]
            if knob.kind in ("float", "log"):
                value = min(max(round_sig(value, SIGNIFICANT_DIGITS), knob.low), knob.high)
            config[knob.name] = value
        return config

    # ---- the proposal ----------------------------------------------------------------------

    def _proposal(self, context: ResearchContext, knobs: list[Knob], incumbent: dict[str, Any],
                  config: dict[str, Any], trial: optuna.Trial, skipped: list[dict[str, str]],
                  hypothesis: str | None = None, hypothesis_id: str | None = None) -> Proposal:
        changed = {n: v for n, v in config.items() if not same_value(v, incumbent[n])}
        self._last_move = trial.user_attrs.get("move")
        self._last_radius = trial.user_attrs.get("radius", 0.0)
        self._last_up = bool((trial.user_attrs.get("step") or [None, True])[-1])
        trial.set_user_attr("config", config)
        trial.set_user_attr("from", incumbent)
        trial.set_user_attr("changed", sorted(changed))
        history = self._history()
        prediction = predict_delta(
            knobs, history, config, incumbent, incumbent_value=context.incumbent_value,
            noise_sd=context.noise_sd, direction=self.direction, metric=context.metric,
        )
        description = ", ".join(
            f"{n} {format_value(incumbent[n])} -> {format_value(v)}" for n, v in changed.items())
        if hypothesis is None:
            hypothesis = self._evidence_sentence(context.metric, changed, history, prediction.expected_delta)
        source = set_knobs(context.incumbent_source, changed, path=context.target, declared=self.declared)
        return Proposal(
            source=source, description=description, hypothesis=hypothesis, prediction=prediction,
            hypothesis_id=hypothesis_id,
            extra={
                "trial": trial.number, "study": STUDY_NAME, "params": changed, "config": config,
                "skipped_hypotheses": skipped, "move": trial.user_attrs.get("move", "hypothesis"),
                "prediction_method": "gp" if history else "gp prior",
            },
        )

    def _evidence_sentence(self, metric: str, changed: dict[str, Any], history: list[TriedConfig],
                           delta: float) -> str:
        names = " and ".join(changed)
        if self._last_move == "opening":
            return (f"Learning rate first: {names} {'times' if self._last_up else 'over'} "
                    f"{FACTOR:g} from the incumbent (a line search: on the same way while it is "
                    f"kept, the other way after a first loss); the study's model predicts a delta "
                    f"of {format_sig(delta)} (candidate minus incumbent).")
        if self._last_move == "local":
            return (f"A local move of {names} from the incumbent, inside a trust region of "
                    f"{self._last_radius:.2g} of its range (it widens on keeps, narrows on "
                    f"discards); the study's model predicts a delta of {format_sig(delta)} "
                    f"(candidate minus incumbent).")
        if not history:
            return f"Exploring {names}: TPE draws a first setting; no measured trials yet."
        best = max(history, key=lambda t: self.direction.sign * t.value)
        return (
            f"Changing {names} as TPE suggests from {len(history)} measured trials "
            f"(best {metric} so far {best.value:.4g}); nearby settings predict a delta of "
            f"{format_sig(delta)} (candidate minus incumbent)."
        )

    def _history(self) -> list[TriedConfig]:
        history = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            config = t.user_attrs.get("config", t.params)
            history.append(TriedConfig(config=config, value=float(t.value)))
        return history

    def _fail_orphans(self) -> None:
        """A trial still RUNNING at start-up was asked by a process that died before telling.
        Mark it FAIL so TPE does not treat it as in flight forever; if the loop later finishes
        that experiment after all, `observe` re-adds it with its measurement."""
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            try:
                self.study.tell(t.number, state=TrialState.FAIL)
            except (ValueError, RuntimeError):
                pass   # finished by another process in between: nothing to clean up


def _sqlite_storage(path: Path) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage on SQLite in WAL mode with synchronous=NORMAL: a commit survives a
    crash of this process (what resume needs), only a power cut may lose the last few, and
    the ledger, fsynced per line, stays the record of truth. The default journal mode fsyncs
    several times per commit, which made creating the study alone take seconds."""
    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(path, timeout=60, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        return connection

    return optuna.storages.RDBStorage(f"sqlite:///{path}", engine_kwargs={"creator": connect})


def _distribution(knob: Knob) -> BaseDistribution:
    if knob.kind == "int":
        return IntDistribution(int(knob.low), int(knob.high))
    if knob.kind == "choice":
        return CategoricalDistribution(list(knob.choices))
    return FloatDistribution(knob.low, knob.high, log=knob.kind == "log")


def _nudge(knob: Knob, value: Any) -> Any:
    """A neighbouring in-space value different from `value`."""
    if knob.kind == "choice":
        options = list(knob.choices)
        index = next((i for i, c in enumerate(options) if same_value(c, value)), -1)
        return options[(index + 1) % len(options)]
    if knob.kind == "int":
        return value + 1 if value + 1 <= knob.high else value - 1
    if knob.kind == "log":
        factor = (knob.high / knob.low) ** 0.1
        up = round_sig(value * factor, SIGNIFICANT_DIGITS)
        return up if up <= knob.high else round_sig(value / factor, SIGNIFICANT_DIGITS)
    step = (knob.high - knob.low) * 0.1
    up = round_sig(value + step, SIGNIFICANT_DIGITS)
    return up if up <= knob.high else round_sig(value - step, SIGNIFICANT_DIGITS)


def _config_key(config: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A setting of the knobs as a hashable key (values as the target would spell them)."""
    return tuple(sorted((name, format_value(value)) for name, value in config.items()))
