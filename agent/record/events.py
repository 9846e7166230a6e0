"""The ledger's events as typed records.

Every line of `results/<tag>/ledger.jsonl` is one of the events below, written by
`Event.to_dict()` and read back by `parse_event()`. The JSON format is the one the first
loops wrote (an `"event"` key naming the kind, the fields beside it, a decision's test
nested under `"decision"`), so old ledgers load unchanged: fields they lack take the
defaults given here, and a key a newer harness adds is ignored by an older one.

    loop_started        tag, base_commit, program, and the facts of this invocation
    loop_resumed        tag, and the facts of this invocation
    loop_stopped        reason, exit_code
    hypothesis_queued   hypothesis_id, text, origin
    experiment_proposed id, commit, parent, description, hypothesis, prediction, researcher, ...
    experiment_invalid  id, parent, reason, description, hypothesis, prediction, diff, ...
    proposal_rebased    id, proposed_on, onto, outcome (the incumbent moved while it was made)
    run_started         run_id, commit, seed, role, experiment, worker, device
    run_queued          run_id, job_id (a cluster with a queue, Slurm, accepted the run)
    run_began           run_id, job_id, node, queued_s (it left the queue and began on a node)
    run_finished        run_id, commit, seed, role, experiment, status, metric, metrics, curve, ...
    run_stopped_early   run_id, experiment, checkpoint, forecast, saved_s (a losing run stopped)
    run_unpaired        run_id, experiment, reason (its curve cannot be compared: never stopped)
    look                id, seeds, reason (the keep rule looked and asked for more seeds)
    decision            id, commit, incumbent, verdict, reason, decision (the test), score
    replay              kind "run" | "commit" | "summary", replay_id, ... (agent/review/replay.py)
    proposal_asked      request_id, researcher, incumbent (a researcher starts writing a proposal)
    proposal_ready      request_id, researcher, outcome, duration_s (it has answered)
    ablation_planned    ablation_id, incumbent, base, budget_s, seeds, variants (agent/review/ablate.py)
    ablation_run        ablation_id, variant, commit, seed, status, metric (one per run)
    ablation_change     ablation_id, experiment, status, contribution, interval, p_value, ...
    ablation_summary    ablation_id, full_gain, sum of contributions, interaction, ...

Records nested in events (`Prediction`, `Decision`, `Score`, `Usage`) and the vocabularies
(`Verdict`, `Role`, `Direction`, `ExitCode`) live in agent/record/records.py and are re-exported here;
agent/record/codec.py turns any of them into JSON-safe data and back from the type hints, so
a field added to an event is written and read without more code.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from agent.record.codec import decode, encode
from agent.record.curves import Curve
from agent.record.records import (ChangeStatus, Comparison, ComputeCost, Decision, Direction, ExitCode,
                                  Prediction, PredictedDirection, Probe, Role, Score, TargetRole, Usage,
                                  Verdict)
from sandbox import Status

__all__ = [  # the records events carry are importable from here too: one place to look
    "ChangeStatus", "Comparison", "ComputeCost", "Decision", "Direction", "ExitCode", "Prediction", "PredictedDirection",
    "Probe", "Role", "Score", "TargetRole", "Usage", "Verdict",
    "Event", "LoopFacts", "LoopStarted", "LoopResumed", "LoopStopped", "HypothesisQueued",
    "ExperimentFacts", "ExperimentProposed", "ExperimentInvalid", "ProposalRebased", "RunIdentity",
    "RunStarted", "RunQueued", "RunBegan", "RunFinished", "RunStoppedEarly", "RunUnpaired",
    "LookTaken", "DecisionMade",
    "Replay", "ReplayRun", "ReplayCommit", "ReplaySummary", "ProposalAsked", "ProposalReady",
    "AblationPlanned", "AblationRun", "AblationChange", "AblationSummary", "EVENT_TYPES", "REPLAY_TYPES",
    "UnknownEvent", "parse_event", "encode", "decode",
]


# ---- events -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Event:
    """One ledger line. `kind` is the JSON `"event"` value; `time` is stamped on append."""

    kind: ClassVar[str] = ""
    time: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.kind, **encode(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Event":
        return decode(cls, data)

    @classmethod
    def known(cls, facts: Mapping[str, Any]) -> dict[str, Any]:
        """The entries of `facts` this event has fields for (a backend may say more)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return {key: value for key, value in facts.items() if key in names}


@dataclass(frozen=True, kw_only=True)
class LoopFacts(Event):
    """What one invocation of `nightshift run` chose, recorded when it starts or resumes."""

    tag: str | None = None
    researcher: str | None = None
    researcher_why: str | None = None
    sandbox: str | None = None
    sandbox_why: str | None = None
    sandbox_facts: dict[str, Any] = field(default_factory=dict)
    rule: str | None = None
    data_dir: str | None = None
    corpus_hash: str | None = None
    budget_s: float | None = None
    records_looks: bool = False      # this harness records the keep rule's looks (LookTaken)
    workers: int | None = None       # runs in flight at once
    devices: tuple[str, ...] = ()    # each worker's device ("cuda:0", "cpu:0-1", ...)
    overlap: bool | None = None      # proposals prepared while runs train
    cluster: str | None = None       # where runs execute: "local" (this machine) | "ray" | "slurm"
    cluster_facts: dict[str, Any] = field(default_factory=dict)   # the backend's own description
                                     # (Slurm: partition, account, GPUs/CPUs per run, job prefix)


@dataclass(frozen=True, kw_only=True)
class LoopStarted(LoopFacts):
    kind: ClassVar[str] = "loop_started"
    base_commit: str
    program: dict[str, Any] = field(default_factory=dict)   # Program.to_dict() of the night


@dataclass(frozen=True, kw_only=True)
class LoopResumed(LoopFacts):
    kind: ClassVar[str] = "loop_resumed"


@dataclass(frozen=True, kw_only=True)
class LoopStopped(Event):
    kind: ClassVar[str] = "loop_stopped"
    reason: str
    exit_code: int = ExitCode.OK


@dataclass(frozen=True, kw_only=True)
class HypothesisQueued(Event):
    kind: ClassVar[str] = "hypothesis_queued"
    hypothesis_id: str
    text: str
    origin: str = "cli"        # "cli" (run --hypothesis) | "seed" (nightshift seed)


@dataclass(frozen=True, kw_only=True)
class ExperimentFacts(Event):
    """What a researcher proposed for experiment `id`, against the incumbent `parent`."""

    id: str
    parent: str
    description: str = ""
    hypothesis: str = ""
    prediction: Prediction | None = None
    researcher: str = ""
    hypothesis_id: str | None = None
    usage: Usage | None = None             # what proposing it cost
    extra: dict[str, Any] = field(default_factory=dict)   # researcher-specific (optuna params,
                                                          # an LLM's mistakes and transcript, ...)


@dataclass(frozen=True, kw_only=True)
class ExperimentProposed(ExperimentFacts):
    kind: ClassVar[str] = "experiment_proposed"
    commit: str


@dataclass(frozen=True, kw_only=True)
class ExperimentInvalid(ExperimentFacts):
    """A proposal that never became a run: the gate refused it or the researcher gave none."""

    kind: ClassVar[str] = "experiment_invalid"
    reason: str
    commit: str | None = None
    diff: str = ""


@dataclass(frozen=True, kw_only=True)
class ProposalRebased(Event):
    """A proposal made against an incumbent that has since changed: its diff was merged onto
    the new incumbent (`outcome` "rebased"), or did not apply ("conflict": the researcher is
    asked again, or the candidate it came from is not re-proposed). `source` names the
    experiment whose diff this is when a pending candidate was superseded by a keep."""

    kind: ClassVar[str] = "proposal_rebased"
    id: str                      # the experiment id the rebased proposal gets (or would have got)
    proposed_on: str             # the incumbent the researcher saw
    onto: str                    # the incumbent it was merged onto
    outcome: str                 # "rebased" | "conflict"
    source: str | None = None    # the superseded experiment whose diff this is, if any


@dataclass(frozen=True, kw_only=True)
class RunIdentity(Event):
    """Which run: `commit` on `seed`, made as `role` (for `experiment`, if a candidate), by
    worker `worker` on `device` ("cuda:2", "cpu:0-3")."""

    run_id: str
    commit: str
    seed: int
    role: Role
    experiment: str | None = None
    worker: int | None = None
    device: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunStarted(RunIdentity):
    kind: ClassVar[str] = "run_started"
    budget_s: float | None = None          # its training budget (what "time left" counts down)


@dataclass(frozen=True, kw_only=True)
class RunQueued(Event):
    """A cluster with a queue (Slurm) accepted run `run_id` as job `job_id`; it waits for a
    node. The job id is how a later harness finds and cancels it (agent/preflight/leftovers.py)."""

    kind: ClassVar[str] = "run_queued"
    run_id: str
    job_id: str


@dataclass(frozen=True, kw_only=True)
class RunBegan(Event):
    """Run `run_id` (job `job_id`) left the queue and began on `node`, `queued_s` seconds after
    the harness handed it over: time in the queue, recorded apart from the run's own time."""

    kind: ClassVar[str] = "run_began"
    run_id: str
    job_id: str
    node: str | None = None
    queued_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class RunFinished(RunIdentity):
    kind: ClassVar[str] = "run_finished"
    status: Status
    metric: float | None = None            # set only when status is ok
    metrics: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None
    peak_memory_mb: float | None = None
    exit_code: int | None = None
    reason: str = ""
    log: str | None = None                 # relative to results/<tag>/
    log_tail: str = ""
    backend: str | None = None
    data_hash: str | None = None
    env_fingerprint: str | None = None
    provenance: str | None = None          # relative to results/<tag>/
    over_budget_s: float | None = None     # seconds past its budget, when it ran past it (else None)
    node: str | None = None                # the cluster node it ran on (a Ray or Slurm node), if any
    started: float | None = None           # wall-clock seconds (epoch) the process started...
    ended: float | None = None             # ...and ended: the timeline of the workers
    # The grader apart (docs/integrity.md): `metric` is `measured_by` the evaluator (its own
    # sandboxed step) or the script; `reported` is what the script claimed for the metric.
    # `duration_s` is the training step's wall clock, timed by the harness.
    measured_by: str | None = None         # "evaluator" | "script" (None: an older ledger)
    reported: float | None = None
    eval_duration_s: float | None = None
    probes: tuple[Probe, ...] = ()
    fingerprint: tuple[float, ...] = ()    # per-window bits per byte on 128 windows of the night (evaluator)
    hidden: str | None = None              # how the hidden splits were kept from it
    job_id: str | None = None              # Slurm: the job it was
    job_state: str | None = None           # Slurm's word for how the cluster ended the job when
                                           # the run did not (PREEMPTED, CANCELLED outside the
                                           # harness, NODE_FAIL, TIMEOUT...); None otherwise
    queued_s: float | None = None          # seconds it waited to begin (staging, the queue)
    curve: Curve | None = None             # its progress lines on its budget, compact (None: an
                                           # older ledger, or a run that printed none)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


@dataclass(frozen=True, kw_only=True)
class RunStoppedEarly(Event):
    """Candidate run `run_id` of `experiment` was stopped before its budget ran out: at
    `checkpoint` (a share of the budget; the run had reached `reached`), the gap between its
    training loss and its incumbent's on the same seed predicted a final improvement of
    `predicted` (metric units, positive = better) within `interval`, and even the favourable
    `bound` would end the candidate (agent/decide/early_stop.py). The run is evidence for
    discarding its candidate only: never a result, a reference or a noise measurement.
    `saved_s` is the run time it did not use: the budget left and the evaluation it skips."""

    kind: ClassVar[str] = "run_stopped_early"
    run_id: str
    experiment: str
    seed: int
    checkpoint: float
    reached: float
    gap: float                       # incumbent − candidate training loss before the checkpoint
    predicted: float
    interval: tuple[float, float]
    bound: float
    pairs: int                       # the night's finished pairs the forecast was fitted on
    partner: str                     # what it was compared with: "same seed" | "incumbent mean"
    saved_s: float
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class RunUnpaired(Event):
    """Candidate run `run_id`'s curve cannot be compared with its incumbent's (no progress
    lines, a different context length, step grid or learning-rate schedule): it is never stopped
    early, and this says why. Recorded once per run."""

    kind: ClassVar[str] = "run_unpaired"
    run_id: str
    experiment: str | None = None
    reason: str


@dataclass(frozen=True, kw_only=True)
class LookTaken(Event):
    """The keep rule looked at experiment `id` on `seeds` candidate seeds and asked for more.
    The looks actually taken are what the group-sequential boundaries are computed for."""

    kind: ClassVar[str] = "look"
    id: str
    seeds: int
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class DecisionMade(Event):
    """The verdict on one experiment. `decision` is the keep rule's test (None when a run
    failed first, or an integrity check flagged it: then `evidence` holds the figures that
    gave the flag); `score` holds the prediction against the measurement."""

    kind: ClassVar[str] = "decision"
    id: str
    commit: str
    incumbent: str
    verdict: Verdict
    reason: str = ""
    decision: Decision | None = None
    score: Score | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    compute: ComputeCost | None = None    # the candidate's run time against the incumbent's

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DecisionMade":
        data = dict(data)
        test = data.get("decision") or None       # early ledgers wrote {} for "no test"
        if test is not None and "verdict" not in test:
            test = {**test, "verdict": data["verdict"]}
        data["decision"], data["score"] = test, data.get("score") or None
        return decode(cls, data)

    @property
    def effect(self) -> float | None:
        return self.decision.effect if self.decision else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return self.decision.interval if self.decision else None

    @property
    def p_value(self) -> float | None:
        return self.decision.p_value if self.decision else None

    @property
    def seeds(self) -> tuple[int, ...]:
        return self.decision.seeds if self.decision else ()


@dataclass(frozen=True, kw_only=True)
class Replay(Event):
    """A `nightshift replay` record in the tag's ledger; `replay_kind` is the JSON `kind`."""

    kind: ClassVar[str] = "replay"
    replay_kind: ClassVar[str] = ""
    replay_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.kind, "kind": self.replay_kind, **encode(self)}


@dataclass(frozen=True, kw_only=True)
class ReplayRun(Replay):
    """One replayed run."""

    replay_kind: ClassVar[str] = "run"
    commit: str
    target_role: TargetRole
    experiment: str | None = None
    seed: int
    budget_s: float
    split: str
    status: Status
    metric: float | None = None
    duration_s: float | None = None
    run_id: str | None = None
    reason: str = ""
    env_changed: bool = False
    env_diff: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ReplayCommit(Replay):
    """One replayed commit: its values at this scale next to the night's, and its effects."""

    replay_kind: ClassVar[str] = "commit"
    commit: str
    target_role: TargetRole
    experiment: str | None = None
    parent: str | None = None
    budget_s: float
    split: str
    values: dict[int, float] = field(default_factory=dict)
    n_ok: int = 0
    n_failed: int = 0
    mean: float | None = None
    sd: float | None = None
    original: dict[str, Any] = field(default_factory=dict)    # kind, n, budget_s, split, mean
    reproduce: dict[str, Any] = field(default_factory=dict)   # reproduced, difference, interval
    proxy_effect: float | None = None
    proxy_interval: tuple[float, float] | None = None
    full_effect: float | None = None
    full_interval: tuple[float, float] | None = None
    full_effect_vs_base: float | None = None
    full_interval_vs_base: tuple[float, float] | None = None
    env_changed: bool = False
    env_diff: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ReplaySummary(Replay):
    """One whole replay: its settings and the rank correlations proxy vs full scale."""

    replay_kind: ClassVar[str] = "summary"
    budget_s: float
    seeds: tuple[int, ...] = ()
    split: str = "val"
    commits: tuple[str, ...] = ()
    reproduce: bool = False
    rank_effects: dict[str, Any] = field(default_factory=dict)   # rho, n
    rank_values: dict[str, Any] = field(default_factory=dict)
    reproduced: tuple[str, ...] = ()
    not_reproduced: tuple[str, ...] = ()
    env_changed: bool = False


@dataclass(frozen=True, kw_only=True)
class ProposalAsked(Event):
    """The loop asked `researcher` for a proposal against `incumbent`: from now until the
    matching `proposal_ready` it is being written (what the live page shows)."""

    kind: ClassVar[str] = "proposal_asked"
    request_id: str
    researcher: str
    incumbent: str
    attempt: int = 1             # > 1: asked again after a conflict with a newer incumbent


@dataclass(frozen=True, kw_only=True)
class ProposalReady(Event):
    """The researcher answered request `request_id`: a proposal (`description`), a
    rejection, or an error that stops the night. `duration_s` is how long it took."""

    kind: ClassVar[str] = "proposal_ready"
    request_id: str
    researcher: str
    outcome: str                 # "proposal" | "rejected" | "error"
    description: str = ""
    duration_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class AblationPlanned(Event):
    """`nightshift ablate` starts: the final incumbent, the base, and per kept change the
    variant that reverts it (`variants`: experiment, commit, parent, description,
    variant_commit, status "planned" | "conflict" | "absent", reason)."""

    kind: ClassVar[str] = "ablation_planned"
    ablation_id: str
    incumbent: str
    base: str
    budget_s: float
    seeds: tuple[int, ...] = ()
    split: str = "val"
    variants: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class AblationRun(Event):
    """One run of an ablation: `variant` is "incumbent", "base" or the experiment whose
    change it reverts."""

    kind: ClassVar[str] = "ablation_run"
    ablation_id: str
    variant: str
    commit: str
    seed: int
    status: Status
    metric: float | None = None
    duration_s: float | None = None
    run_id: str | None = None
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class AblationChange(Event):
    """What one kept change contributes at full scale: the incumbent against the incumbent
    without it, paired on seeds (positive = the change helps). `status` is "measured", or
    "conflict" / "absent" (its revert could not be built: nothing was run) or "failed"."""

    kind: ClassVar[str] = "ablation_change"
    ablation_id: str
    experiment: str
    commit: str
    parent: str | None = None
    description: str = ""
    status: ChangeStatus = ChangeStatus.MEASURED
    reason: str = ""
    variant_commit: str | None = None
    values: dict[int, float] = field(default_factory=dict)     # the variant's, per seed
    contribution: float | None = None
    interval: tuple[float, float] | None = None
    p_value: float | None = None
    p_adjusted: float | None = None      # Holm's, over the changes measured
    n: int = 0                           # seeds paired


@dataclass(frozen=True, kw_only=True)
class AblationSummary(Event):
    """The whole ablation: the full gain (incumbent vs base), the sum of the measured
    contributions, and what the sum does not explain (interaction = gain − sum), each with
    its interval and p-value, paired on seeds."""

    kind: ClassVar[str] = "ablation_summary"
    ablation_id: str
    incumbent: str
    base: str
    budget_s: float
    seeds: tuple[int, ...] = ()
    split: str = "val"
    level: float = 0.95
    incumbent_values: dict[int, float] = field(default_factory=dict)
    base_values: dict[int, float] = field(default_factory=dict)
    full_gain: float | None = None
    full_interval: tuple[float, float] | None = None
    full_p: float | None = None
    sum_contributions: float | None = None
    interaction: float | None = None
    interaction_interval: tuple[float, float] | None = None
    interaction_p: float | None = None
    measured: tuple[str, ...] = ()       # experiments whose contribution is in the sum
    not_measured: tuple[str, ...] = ()   # conflicts, absent, failed: their share is in the interaction


EVENT_TYPES: dict[str, type[Event]] = {cls.kind: cls for cls in (
    LoopStarted, LoopResumed, LoopStopped, HypothesisQueued, ExperimentProposed,
    ExperimentInvalid, ProposalRebased, RunStarted, RunQueued, RunBegan, RunFinished,
    RunStoppedEarly, RunUnpaired, LookTaken, DecisionMade, ProposalAsked, ProposalReady,
    AblationPlanned, AblationRun, AblationChange, AblationSummary)}
REPLAY_TYPES: dict[str, type[Replay]] = {cls.replay_kind: cls for cls in (
    ReplayRun, ReplayCommit, ReplaySummary)}


class UnknownEvent(ValueError):
    """A ledger line that is not an event this harness knows (a newer harness wrote it)."""


def parse_event(data: Mapping[str, Any]) -> Event:
    """The typed event of one decoded ledger line. Raises UnknownEvent for kinds we do not
    know, and ValueError/TypeError/KeyError for a line of a known kind that is malformed."""
    kind = data.get("event")
    if kind == Replay.kind:
        cls: type[Event] | None = REPLAY_TYPES.get(data.get("kind"))
    else:
        cls = EVENT_TYPES.get(kind)
    if cls is None:
        raise UnknownEvent(f"unknown ledger event {kind!r}")
    return cls.from_dict(data)


