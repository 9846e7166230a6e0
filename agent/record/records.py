"""The vocabularies of a night (outcomes, run roles, the metric's direction, exit codes) and the records that ledger
events carry: a researcher's `Prediction`, a keep rule's `Decision`, a prediction's `Score`,
a researcher's `Usage`. Every module that produces or reads them uses these, never strings.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping

from agent.record.codec import decode, encode
from sandbox import Status


class Verdict(str, enum.Enum):
    """How an experiment ended: exactly one per experiment.

    keep / discard / inconclusive come from the keep rule; invalid from the gate (the edit
    broke a rule); the run failures are the sandbox's (`sandbox.Status`), recorded when a
    candidate run failed before the rule could decide; the integrity verdicts (`is_integrity`)
    say the number cannot be trusted: a run's (tampered, leak, lookahead, misreported,
    bad_artifact) or the experiment's, seen across its runs (over_budget, ignores_seed).
    See docs/integrity.md."""

    KEEP = "keep"
    DISCARD = "discard"
    INCONCLUSIVE = "inconclusive"     # ran out of seeds without a clear answer; not kept
    INVALID = "invalid"
    SUPERSEDED = "superseded"         # another candidate was kept while this one was measured
                                      # against the old incumbent: not decided, never kept
    CRASH = Status.CRASH.value
    TIMEOUT = Status.TIMEOUT.value
    OOM = Status.OOM.value
    NO_METRIC = Status.NO_METRIC.value
    BAD_METRIC = Status.BAD_METRIC.value
    TAMPERED = Status.TAMPERED.value
    LEAK = Status.LEAK.value
    LOOKAHEAD = Status.LOOKAHEAD.value
    MISREPORTED = Status.MISREPORTED.value
    BAD_ARTIFACT = Status.BAD_ARTIFACT.value
    INTERRUPTED = Status.INTERRUPTED.value
    OVER_BUDGET = "over_budget"       # its training ran clearly longer than its paired incumbent's
    IGNORES_SEED = "ignores_seed"     # its seeds gave the same model (or far inside the noise)
    NO_EFFECT = "no_effect"           # its runs equal the incumbent's on the same seeds: the
                                      # change did nothing the metric sees (not kept, not a loss)

    def __str__(self) -> str:
        return self.value

    @property
    def is_decided(self) -> bool:
        """The keep rule decided it on a test of its runs."""
        return self in (Verdict.KEEP, Verdict.DISCARD, Verdict.INCONCLUSIVE, Verdict.NO_EFFECT)

    @property
    def is_failure(self) -> bool:
        """Something went wrong before the rule could decide: invalid, or a run failed."""
        return not self.is_decided and self is not Verdict.SUPERSEDED

    @property
    def is_integrity(self) -> bool:
        """The candidate bent how it is measured (or its number cannot be trusted): never
        kept, and shown apart from ordinary failures."""
        return self in INTEGRITY_VERDICTS

    @classmethod
    def of_run(cls, status: Status) -> "Verdict":
        """The verdict of an experiment whose candidate run ended with `status` (not OK)."""
        if status == Status.OK:
            raise ValueError("an OK run is not a verdict; the keep rule decides")
        return cls(Status(status).value)


INTEGRITY_VERDICTS = frozenset({Verdict.TAMPERED, Verdict.LEAK, Verdict.LOOKAHEAD, Verdict.MISREPORTED,
                                Verdict.BAD_ARTIFACT, Verdict.OVER_BUDGET, Verdict.IGNORES_SEED})


class Role(str, enum.Enum):
    """Why a run was made."""

    REFERENCE = "reference"   # the incumbent on fresh seeds: its unbiased value
    CANDIDATE = "candidate"   # a candidate on the seeds the rule asked for
    NOISE = "noise"           # `nightshift noise`: spread only, never a reference
    REPLAY = "replay"         # `nightshift replay` (recorded in the replay's own ledger)
    ABLATION = "ablation"     # `nightshift ablate` (recorded in the ablation's own ledger)

    def __str__(self) -> str:
        return self.value


class TargetRole(str, enum.Enum):
    """Why a commit is replayed (`nightshift replay`, agent/review/replay.py)."""

    BASE = "base"       # where the night started
    KEPT = "kept"       # a commit the night kept
    GIVEN = "given"     # a commit named on the command line
    PARENT = "parent"   # added so that a target's effect can be measured against it

    def __str__(self) -> str:
        return self.value


class ChangeStatus(str, enum.Enum):
    """What became of one kept change in `nightshift ablate` (agent/review/ablate.py)."""

    PLANNED = "planned"     # its revert was built; it will run
    CONFLICT = "conflict"   # a later keep changed the same lines: not run, never guessed
    ABSENT = "absent"       # a later keep undid it already
    MEASURED = "measured"   # it ran, and its contribution was estimated
    FAILED = "failed"       # it ran, but no seed has both it and the incumbent

    def __str__(self) -> str:
        return self.value


class Direction(str, enum.Enum):
    """Which way the metric improves (program.md `direction:`). The value strings are the
    ledger's and program.md's, so old ledgers read unchanged."""

    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"

    def __str__(self) -> str:
        return self.value

    @property
    def sign(self) -> float:
        """+1 or -1 such that `sign * (candidate - reference)` is the improvement."""
        return -1.0 if self is Direction.MINIMIZE else 1.0

    def improvement(self, candidate: float, reference: float) -> float:
        """Signed improvement of `candidate` over `reference`, positive = better, metric units."""
        return self.sign * (candidate - reference)

    def better(self, a: float, b: float) -> bool:
        """Whether `a` is strictly better than `b`."""
        return self.improvement(a, b) > 0

    @property
    def lower_is_better(self) -> bool:
        return self is Direction.MINIMIZE

    @property
    def better_word(self) -> str:
        """'lower' or 'higher': which values are better, for display."""
        return "lower" if self is Direction.MINIMIZE else "higher"

    @property
    def best_word(self) -> str:
        """'lowest' or 'highest'."""
        return "lowest" if self is Direction.MINIMIZE else "highest"


class ExitCode(enum.IntEnum):
    """What `nightshift` exits with, and what `loop_stopped` records."""

    OK = 0              # a stop rule held (--max-experiments, --hours)
    BAD_INPUT = 1       # program.md, a flag, the repository: the message names the fix
    USAGE = 2           # unknown flag, missing argument
    RESEARCHER = 3      # the researcher stopped the loop (cost cap, API unavailable, ...)
    LOOP = 4            # the loop could not go on (the incumbent fails, the sandbox is gone,
                        # a full disk, a git error)
    BUSY = 5            # the tag's loop already runs in another process (the tag's lock)
    TIMEOUT = 6         # `nightshift wait`: the verdict did not come within --timeout
    INTERRUPTED = 130   # Ctrl-C; `run --tag` resumes


# ---- records nested in events -------------------------------------------------------------

PredictedDirection = Literal["improve", "worsen", "same"]


@dataclass(frozen=True)
class Prediction:
    """A falsifiable, pre-registered prediction of the candidate's effect.

    `expected_delta` and `interval` are in metric units as candidate − incumbent (raw metric
    difference, so for a minimised metric an improvement is negative). `confidence` is the
    probability the researcher gives to the interval covering the measured delta.
    """

    direction: PredictedDirection
    expected_delta: float
    interval: tuple[float, float]
    confidence: float = 0.8
    rationale: str = ""

    def __post_init__(self) -> None:
        if self.direction not in ("improve", "worsen", "same"):
            raise ValueError(f"prediction direction must be improve|worsen|same, got {self.direction!r}")
        lo, hi = self.interval
        if not lo <= hi:
            raise ValueError(f"prediction interval must have lo <= hi, got [{lo}, {hi}]")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"prediction confidence must be in (0, 1), got {self.confidence}")

    def to_dict(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Prediction":
        return decode(cls, data)


@dataclass(frozen=True)
class Comparison:
    """What a decision's effect was measured against. The runs printed beside a decision
    are pairs (the candidate and the incumbent on one seed); an estimate against the mean of
    every incumbent run is not a paired one, and must never be read as one.

    The keep rule credits a seed's shared luck only once the night has shown that seeds share
    it (`seed_share` > 0, agent/decide/noise.py); until then the effect is the candidate
    against the mean of all incumbent runs, and can have the other sign from the pairs."""

    paired_seeds: int = 0                # candidate seeds with an incumbent run on the same seed
    paired_effect: float | None = None   # the mean improvement over those seeds alone
    incumbent_runs: int = 0              # incumbent runs the estimate rests on
    seed_share: float = 0.0              # share of a run's luck credited to its seed

    @property
    def paired(self) -> bool:
        """The estimate leans on the same-seed pairs (it is not a comparison with a mean)."""
        return self.seed_share > 0 and self.paired_seeds > 0

    def describe(self, effect: float | None) -> str:
        """The words beside an effect: paired or not, and the pairs alone when they say
        something else."""
        k, n = self.paired_seeds, self.incumbent_runs
        pairs = f"{k} same-seed pair{'s' if k != 1 else ''}"
        alone = (f"; the {pairs} alone {self.paired_effect:+.4f}"
                 if self.paired_effect is not None else "")
        if self.paired:
            extra = f", {n - k} unpaired incumbent runs weighted in" if n > k else ""
            disagree = (effect is not None and self.paired_effect is not None
                        and (effect > 0) != (self.paired_effect > 0))
            return f"paired on {k} seed{'s' if k != 1 else ''} (seed share {self.seed_share:.2f}" \
                   f"{extra}){alone if disagree else ''}"
        if k == 0:
            return f"vs the mean of {n} incumbent runs, none on its seeds"
        return (f"not paired: vs the mean of {n} incumbent runs (the night has not shown yet "
                f"that seeds share noise){alone}")


@dataclass(frozen=True)
class Decision:
    """What a keep rule concluded about one candidate, with its evidence.

    `effect` is the improvement in the program's direction (positive = better) with its
    `interval`; `candidate_values` and `reference_values` are the per-seed metrics the rule
    looked at (seed -> value); `details` holds the rule's own diagnostics."""

    verdict: Verdict
    effect: float | None = None
    interval: tuple[float, float] | None = None
    p_value: float | None = None
    seeds: tuple[int, ...] = ()
    candidate_values: dict[int, float] = field(default_factory=dict)
    reference_values: dict[int, float] = field(default_factory=dict)
    rule: str = ""
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    comparison: Comparison | None = None   # what `effect` was measured against (None: not said)

    def to_dict(self) -> dict[str, Any]:
        return encode(self)


@dataclass(frozen=True)
class ComputeCost:
    """What a candidate's runs spent against the incumbent's (agent/decide/compute.py): the
    medians of the harness's own training wall clock over each side's finished runs, and the
    ratio program.md's `compute:` allows (None: `free`). The parameter counts and steps are the
    script's own figures where both sides print them: they say why the time differs."""

    candidate_s: float
    incumbent_s: float
    ratio: float                          # candidate_s / incumbent_s
    allowed: float | None                 # the most ratio a keep may have (None: any)
    candidate_runs: int = 0
    incumbent_runs: int = 0
    candidate_params: float | None = None
    incumbent_params: float | None = None
    candidate_steps: float | None = None
    incumbent_steps: float | None = None

    @property
    def over(self) -> bool:
        """More compute than program.md lets a keep buy."""
        return self.allowed is not None and self.ratio > self.allowed

    def describe(self) -> str:
        """`compute 1.06x (11.8 s vs 11.1 s)`, with parameters or steps where they differ."""
        return f"compute {self.ratio:.2f}x ({self.seconds()})"

    def seconds(self) -> str:
        """`11.8 s vs 11.1 s`, with parameters or steps where they differ."""
        why = []
        for name, cand, inc in (("params", self.candidate_params, self.incumbent_params),
                                ("steps", self.candidate_steps, self.incumbent_steps)):
            if cand is not None and inc is not None and cand != inc:
                why.append(f"{name} {cand:,.0f} vs {inc:,.0f}")
        extra = f", {', '.join(why)}" if why else ""
        return f"{self.candidate_s:.1f} s vs {self.incumbent_s:.1f} s{extra}"


@dataclass(frozen=True)
class Probe:
    """One check the evaluator made of a trained model ("artifact", "shape", "causality"):
    whether it held, and what it saw."""

    name: str
    ok: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return encode(self)


@dataclass(frozen=True)
class Score:
    """A prediction held against the measurement (see agent/decide/scoring.py)."""

    measured_delta: float
    measured_direction: str
    direction_right: bool
    covered: bool             # the prediction's interval held the measured delta
    error: float              # measured − expected delta
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return encode(self)


@dataclass(frozen=True)
class Usage:
    """What a researcher spent on one proposal (zero for researchers that spend nothing).

    The prompt is split as the Messages API bills it: `input_tokens` (uncached),
    `cache_read_input_tokens` (cache hits) and `cache_creation_input_tokens` (cache writes, of
    which `cache_creation_1h_input_tokens` were 1-hour writes, the rest 5-minute ones).
    `retries` and `timeouts` count the tries that failed and were tried again; `usd` includes
    an estimate for timed-out tries (their prompt at the uncached rate), so caps err safe."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0
    usd: float = 0.0
    calls: int = 0
    retries: int = 0
    timeouts: int = 0

    TOKEN_FIELDS: ClassVar[tuple[str, ...]] = (
        "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")

    @property
    def tokens(self) -> int:
        return sum(getattr(self, name) for name in self.TOKEN_FIELDS)

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    @property
    def cache_creation_5m_input_tokens(self) -> int:
        return self.cache_creation_input_tokens - self.cache_creation_1h_input_tokens

    @property
    def cached_share(self) -> float | None:
        """The share of prompt tokens served from the cache."""
        return self.cache_read_input_tokens / self.prompt_tokens if self.prompt_tokens else None

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                        for f in dataclasses.fields(self)})

    def to_dict(self) -> dict[str, Any]:
        return encode(self)
