"""The research program: `program.md`, YAML front matter for the harness, prose for the researcher.

Contract:
- every field has a default, so a file without front matter is valid (all prose), except
  `metric:` for a command of the user's own (the default, val_bpb, is the bundled example's);
- values come from the file, then from overrides (CLI flags, `Program.with_overrides`),
  and both pass through the same parsers in `_FIELDS`;
- anything wrong raises `ProgramError` naming the file, the field, the line and the fix,
  e.g. ``program.md:7: field 'budget': expected a duration like 60s, 10m or 1.5h, got 'soon'``.
Paths (`target`, `protected`, `data`) are relative to `Program.root`, the repository holding
program.md. What can be checked without running anything is checked here, before any run: the
command's placeholders, the metric patterns, the `env:` names, and the knobs (program.md's
`knobs:`, or the target's `# search:` annotations for the optuna researcher) against the
target file.

Layout: `values.py` parses one value, `frontmatter.py` reads the file (YAML, lines, UTF-8);
this module holds the records, the field table and the build that joins them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agent.decide import fdr, rules
from agent.decide.compute import ComputePolicy, parse_policy
from agent.decide.decision import RuleSettings, SeedPlan
from agent.decide.early_stop import EarlyStopSettings
from agent.program import values as v
from agent.program.frontmatter import ProgramError, compose, decode, line_of, split
from agent.publish.hooks import Hooks
from agent.publish.settings import WANDB_MODES, MlflowSettings, Tracking, WandbSettings
from agent.program.values import MAX_SEEDS, Parser, parse_duration, parse_memory  # noqa: F401 (public)
from agent.record.records import Direction
from agent.researchers import settings as llm
from agent.researchers.registry import RESEARCHER_NAMES, resolve_researcher_name
from agent.target.knobs import DeclaredKnobError, KnobError, find_knobs
from agent.target.overrides import overridden
from cluster.select import CLUSTERS
from cluster.slurm_settings import STARTUP_S, SlurmSettings, sbatch_problem
from sandbox.select import BACKENDS


@dataclass(frozen=True)
class FullScale:
    budget_s: float = 600.0  # per-run budget when replaying kept commits
    seeds: int = 5


@dataclass(frozen=True)
class ResourceLimits:
    memory_mb: int | None = 8192
    pids: int = 512
    cpus: float | None = None


@dataclass(frozen=True)
class ViewSettings:
    add: tuple[str, ...] = ()     # host paths a run may read besides its view (sandbox.view)


@dataclass(frozen=True)
class Program:
    path: Path                    # the program.md file (absolute)
    root: Path                    # git toplevel containing program.md, else its folder
    prose: str                    # everything after the front matter: the researcher's brief
    target: str = "train/train.py"
    protected: tuple[str, ...] = ("train/prepare.py", "train/evaluate.py", "train/artifact.py", "train/schema.py",
                                  "train/graph.py", "train/guard.py", "train/model_process.py")
    command: str = "python train/train.py"   # may use {seed} {budget_s} {out} {data} {split}
    # The evaluation step (docs/integrity.md): run after training, over the protected files
    # only, it computes the metric from what training left in {train_out}. None: the metric
    # is the training command's own. program.md's `auto` is resolved when the file is read.
    evaluate: str | None = "python train/evaluate.py"
    edits: str = "free"           # free | knobs: only new values of the declared knobs
    prepare: str | None = "python train/prepare.py"  # run once on the host; None = no data
    metric: str = "val_bpb"
    result_file: str = "result.json"    # the JSON file in $NIGHTSHIFT_OUT holding the metric
    metric_pattern: str | None = None   # regex with one group: the metric from the log's last match
    metrics_pattern: str | None = None  # regex with named groups: more figures from the log
    report_tolerance: float = 0.05      # relative: the script's reported metric vs the measured one
    env: dict[str, str] = field(default_factory=dict)   # extra, non-secret variables of every run
    knobs: dict[str, str] = field(default_factory=dict)  # name in the target -> search space
    data: str | None = None             # a folder of the repository, mounted read-only there in runs
    keep: tuple[str, ...] | None = None  # globs of run outputs to keep; None: result.json + small files
    direction: Direction = Direction.MINIMIZE
    budget_s: float = 60.0        # YAML `budget`
    grace_s: float = 60.0         # YAML `grace`: startup + final evaluation past the budget
    # YAML `compute`: how much more run time than the incumbent's a keep may spend (equal,
    # +25%, free; agent/decide/compute.py): a win that is only a bigger model is not kept
    compute: ComputePolicy = field(default_factory=ComputePolicy)
    seeds: SeedPlan = field(default_factory=SeedPlan)
    alpha: float = RuleSettings.alpha
    min_effect: float = RuleSettings.min_effect   # smallest improvement worth keeping, metric units
    decision: str = rules.RULES[0]
    fdr: str = RuleSettings.fdr
    early_stop: EarlyStopSettings = field(default_factory=EarlyStopSettings)
    full_scale: FullScale = field(default_factory=FullScale)
    sandbox: str = "auto"
    researcher: str = "auto"
    workers: int | None = None    # runs in flight at once; None (`auto`): one per GPU, else 1
    overlap: bool = True          # the researcher prepares proposals while runs train
    control: float = 0.0          # share of experiments proposed by the LLM-free control arm
    cluster: str = CLUSTERS[0]    # where runs execute: this machine, a Ray or a Slurm cluster
    cluster_address: str | None = None   # a Ray cluster's address (default: $RAY_ADDRESS)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)   # cluster: slurm's request
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    view: ViewSettings = field(default_factory=ViewSettings)
    image: str = "nightshift:latest"
    # your commands on a keep and at the night's end, the event as JSON on stdin
    # (agent/publish/hooks.py); `hook_env:` names the variables they may see besides PATH & co
    on_keep: str | None = None
    on_stop: str | None = None
    hook_env: tuple[str, ...] = ()
    # where the night's numbers go as it runs besides the ledger: MLflow, W&B (agent/publish)
    tracking: Tracking = field(default_factory=Tracking)
    claude: llm.ClaudeSettings = field(default_factory=llm.ClaudeSettings)
    openai: llm.OpenAISettings = field(default_factory=llm.OpenAISettings)
    # YAML key -> where its value came from ("program.md:7", "program.md (override budget)"),
    # so checks made later (agent/preflight/check.py) name the line as parse errors do
    locations: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "direction", Direction(self.direction))   # a str given in code

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, attribute names as keys (budget_s, not budget), for the ledger."""
        data = dataclasses.asdict(self)
        data.pop("locations")
        data.update(path=str(self.path), root=str(self.root), direction=self.direction.value, protected=list(self.protected),
                    keep=None if self.keep is None else list(self.keep), hook_env=list(self.hook_env))
        return data

    def locate(self, key: str) -> str:
        """Where field `key` was set, as error messages start: `program.md:7: field 'target'`,
        or `program.md: field 'target' (default train/train.py)` for a default."""
        if key in self.locations:
            return f"{self.locations[key]}: field {key!r}"
        value = getattr(self, _FIELDS[key][0]) if key in _FIELDS else None
        return f"{self.locations.get('', self.path.name)}: field {key!r} (default {_unparse(key, value)})"

    @property
    def hooks(self) -> Hooks:
        """The hook fields together, for the follower that runs them (agent/publish)."""
        return Hooks(on_keep=self.on_keep, on_stop=self.on_stop, env=self.hook_env)

    @property
    def rule_settings(self) -> RuleSettings:
        """What the keep rule is told (agent.decide.rules.make_rule)."""
        return RuleSettings(alpha=self.alpha, min_effect=self.min_effect, fdr=self.fdr, seeds=self.seeds)

    def with_overrides(self, **fields: Any) -> "Program":
        """A copy with `fields` (YAML keys, attribute names or dotted `seeds.max`) validated
        exactly like file values."""
        raw = {key: _unparse(key, getattr(self, attr)) for key, (attr, _) in _FIELDS.items()}
        shown = Path(self.locations.get("", self.path))    # errors name the file as given
        program = _build(shown, self.root, self.prose, raw, {}, fields)
        given = {key: where for key, where in program.locations.items() if "(override" in where}
        return dataclasses.replace(program, path=self.path, locations={**self.locations, **given})



def _field(spec: llm.Field) -> Parser:
    """The parser of one researcher setting, from its declaration in researchers/settings.py."""
    if spec.kind == "prices":
        parser = v.record(llm.Prices, _table(llm.PRICE_FIELDS))
    elif spec.kind == "choice":
        parser = v.choice(*spec.choices)
    else:
        parser = {"text": v.nonempty, "int": v.whole, "number": v.number}[spec.kind]
        if spec.minimum is not None:
            what = f"a{' whole' if spec.kind == 'int' else ''} number >= {spec.minimum:g}"
            parser = v.check(parser, lambda v, least=spec.minimum: v >= least, what)
    return v.optional(parser) if spec.optional else parser


def _table(fields: dict[str, llm.Field]) -> dict[str, tuple[str, Parser]]:
    return {key: (key, _field(spec)) for key, spec in fields.items()}


def _cross_check(check: Callable[[Any], list[tuple[str, str]]]) -> Callable[[Any], None]:
    def run(record: Any) -> None:
        for key, message in check(record):
            raise v.Invalid(message, key=key)
    return run


def _gpus(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    try:
        count = None if isinstance(value, bool) else v.whole(value)
    except v.Invalid:
        count = None
    if count in (0, 1):
        return count
    raise v.Invalid(f"expected auto (1 GPU per run where the partition has GPUs), 0 or 1 "
                    f"(a run sees one GPU), got {value!r}")


def _sbatch_options(value: Any) -> dict[str, str | bool]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise v.Invalid(f"expected a mapping of sbatch options to values, like "
                        f"{{constraint: a100, mail-type: END}}, got {value!r}")
    options: dict[str, str | bool] = {}
    for option, item in value.items():
        problem = sbatch_problem(str(option), item)
        if problem:
            raise v.Invalid(problem, key=str(option))
        options[str(option)] = item if isinstance(item, bool) else str(item).strip()
    return options


def _compute_policy(value: Any) -> ComputePolicy:
    try:
        return parse_policy(value)
    except ValueError as exc:
        raise v.Invalid(str(exc)) from None


def _seed_check(plan: SeedPlan) -> None:
    if plan.screen > plan.max:
        raise v.Invalid(f"screen ({plan.screen}) exceeds max ({plan.max}); "
                       f"raise max or lower screen", key="screen")


_RECORDS: dict[str, dict[str, tuple[str, Parser]]] = {
    "seeds": {"baseline": ("baseline", v.seed_count(2, "two runs are the least that measure spread")),
              "screen": ("screen", v.seed_count(1, "a candidate runs once before the first look")),
              "max": ("max", v.seed_count(2, "a keep needs two paired seeds")),
              "repeat": ("repeat", v.check(v.whole, lambda n: 0 <= n <= 1,
                                           "0 or 1 (one baseline seed run twice, once a night)"))},
    "early_stop": {"mode": ("mode", v.on_off("auto", "off")),
                   "checkpoints": ("checkpoints", v.budget_fractions),
                   "confidence": ("confidence", v.check(v.number, lambda c: 0.5 < c < 1,
                                                        "a number in (0.5, 1), like 0.99"))},
    "full_scale": {"budget": ("budget_s", v.budget),
                   "seeds": ("seeds", v.seed_count(1, "a replay runs each commit once at least"))},
    "limits": {"memory": ("memory_mb", parse_memory), "pids": ("pids", v.count),
               "cpus": ("cpus", v.optional(v.check(v.number, lambda c: c > 0, "a positive number")))},
    "view": {"add": ("add", v.absolute_paths)},
    "slurm": {"shared_dir": ("shared_dir", v.optional(v.absolute_path)),
              "partition": ("partition", v.optional(v.name_word)),
              "account": ("account", v.optional(v.name_word)),
              "qos": ("qos", v.optional(v.name_word)),
              "time": ("time_s", v.optional(v.budget)),
              "gpus": ("gpus", _gpus),
              "setup": ("setup", v.lines),
              "sbatch": ("sbatch", _sbatch_options)},
    "claude": _table(llm.CLAUDE_FIELDS),
    "openai": _table(llm.OPENAI_FIELDS),
}
_mlflow = v.record(MlflowSettings, {"uri": ("uri", v.optional(v.tracking_uri)),
                                    "experiment": ("experiment", v.nonempty)})
_RECORDS["tracking"] = {
    "mlflow": ("mlflow", lambda x: _mlflow({"uri": x} if isinstance(x, str) else x)),   # or the URI alone
    "wandb": ("wandb", v.record(WandbSettings, {"project": ("project", v.optional(v.name_word)),
                                                "entity": ("entity", v.optional(v.name_word)),
                                                "mode": ("mode", v.choice(*WANDB_MODES))})),
}
_seed_plan = v.record(SeedPlan, _RECORDS["seeds"], _seed_check)
_early_stop = v.record(EarlyStopSettings, _RECORDS["early_stop"])

EDITS = ("auto", "free", "knobs")
BUNDLED_COMMAND, BUNDLED_EVALUATE = "python train/train.py", "python train/evaluate.py"
BUNDLED_EVALUATOR_FILES = ("train/prepare.py", "train/evaluate.py", "train/artifact.py", "train/schema.py",
                           "train/graph.py", "train/guard.py", "train/model_process.py")
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml", ".ini", ".cfg")

# The validation table: YAML key -> (Program attribute, parser).
_FIELDS: dict[str, tuple[str, Parser]] = {
    "target": ("target", v.relative_path),
    "protected": ("protected", v.relative_paths),
    "command": ("command", v.command),
    "evaluate": ("evaluate", lambda x: "auto" if x == "auto" else v.optional(v.evaluate_command)(x)),
    "edits": ("edits", v.choice(*EDITS)),
    "prepare": ("prepare", v.optional(v.nonempty)),
    "metric": ("metric", v.metric_name),
    "result_file": ("result_file", v.relative_path),
    "metric_pattern": ("metric_pattern", v.optional(v.regex("one"))),
    "metrics_pattern": ("metrics_pattern", v.optional(v.regex("named"))),
    "report_tolerance": ("report_tolerance",
                         v.check(v.number, lambda t: 0 < t < 1, "a share in (0, 1), like 0.05")),
    "env": ("env", v.env_vars),
    "knobs": ("knobs", v.knob_spaces),
    "data": ("data", v.optional(v.relative_path)),
    "keep": ("keep", v.globs),
    "direction": ("direction", lambda x: Direction(v.choice(*(d.value for d in Direction))(x))),
    "budget": ("budget_s", v.budget),
    "grace": ("grace_s", parse_duration),
    "compute": ("compute", _compute_policy),
    "seeds": ("seeds", lambda v: _seed_plan(v if isinstance(v, dict) or v is None else {"max": v})),
    "alpha": ("alpha", v.check(v.number, lambda a: 0 < a <= 0.5, "a number in (0, 0.5]")),
    "min_effect": ("min_effect", v.check(v.number, lambda x: x >= 0, "a number >= 0")),
    "decision": ("decision", v.choice(*rules.RULES)),
    "fdr": ("fdr", v.choice(*fdr.METHODS)),
    "early_stop": ("early_stop", lambda v: _early_stop(v if isinstance(v, dict) or v is None
                                                       else {"mode": v})),
    "full_scale": ("full_scale", v.record(FullScale, _RECORDS["full_scale"])),
    "sandbox": ("sandbox", v.choice(*BACKENDS)),
    "researcher": ("researcher", v.choice(*RESEARCHER_NAMES)),
    "limits": ("limits", v.record(ResourceLimits, _RECORDS["limits"])),
    "view": ("view", v.record(ViewSettings, _RECORDS["view"])),
    "image": ("image", v.nonempty),
    "on_keep": ("on_keep", v.optional(v.nonempty)),
    "on_stop": ("on_stop", v.optional(v.nonempty)),
    "hook_env": ("hook_env", v.env_names),
    "tracking": ("tracking", v.record(Tracking, _RECORDS["tracking"])),
    "workers": ("workers", v.workers),
    "overlap": ("overlap", v.boolean),
    "control": ("control", v.check(v.number, lambda c: 0 <= c <= 0.9, "a share in [0, 0.9], like 0.25")),
    "cluster": ("cluster", v.choice(*CLUSTERS)),
    "cluster_address": ("cluster_address", v.optional(v.nonempty)),
    "slurm": ("slurm", v.record(SlurmSettings, _RECORDS["slurm"])),
    "claude": ("claude", v.record(llm.ClaudeSettings, _RECORDS["claude"], _cross_check(llm.check_claude))),
    "openai": ("openai", v.record(llm.OpenAISettings, _RECORDS["openai"], _cross_check(llm.check_llm))),
}
_BY_ATTR = {attr: key for key, (attr, _) in _FIELDS.items()}


def _unparse(key: str, value: Any) -> Any:
    """A parsed value back in a form its parser accepts (for with_overrides)."""
    if isinstance(value, ComputePolicy):
        return str(value)
    if key not in _RECORDS:
        return list(value) if isinstance(value, tuple) else value
    return {sub: dataclasses.asdict(item) if dataclasses.is_dataclass(item) else item
            for sub, (attr, _) in _RECORDS[key].items() for item in [getattr(value, attr)]}



def _build(path: Path, root: Path, prose: str, raw: dict[str, Any], lines: dict[str, int],
           overrides: dict[str, Any]) -> Program:
    name, values, where = str(path), {}, {}
    known = list(_FIELDS)

    def parse(key: str, value: Any, locate: Callable[[str], str]) -> None:
        attr, parser = _FIELDS[key]
        try:
            values[attr] = parser(value)
        except v.Invalid as bad:
            field_name = f"{key}.{bad.key}" if bad.key else key
            raise ProgramError(f"{locate(field_name)}: field {field_name!r}: {bad}") from None
        where[key] = locate(key)

    for key, value in raw.items():
        if key not in _FIELDS:
            raise ProgramError(f"{name}:{lines.get(key, '?')}: unknown field {key!r}"
                               f"{v.did_you_mean(key, known)}; known fields: {', '.join(known)}")
        parse(key, value, lambda dotted: f"{name}:{line_of(lines, dotted)}")
    for given, value in overrides.items():
        top, _, sub = given.partition(".")
        top = _BY_ATTR.get(top, top)
        if top not in _FIELDS or (sub and top not in _RECORDS):
            raise ProgramError(f"{name} (override): unknown field {given!r}"
                               f"{v.did_you_mean(top, known)}; known fields: {', '.join(known)}")
        if sub:
            base = raw.get(top)
            base = {"max": base} if top == "seeds" and not isinstance(base, (dict, type(None))) else base
            value = {**(base or {}), sub: value}
        raw[top] = value
        parse(top, value, lambda dotted: f"{name} (override {dotted})")

    values, where = _resolve_auto(values, where)
    program = Program(path=path, root=root, prose=prose, **values, locations={"": name, **where})
    _check_metric_named(program, where, name)
    if program.target in program.protected:
        blamed = "protected" if "protected" in where else "target"
        raise ProgramError(f"{where.get(blamed, name)}: field {blamed!r}: "
                           f"the target {program.target!r} is also protected; the researcher must be "
                           f"able to edit it, so remove it from protected or choose another target")
    bundled = program.evaluate == BUNDLED_EVALUATE and program.target == Program.target
    missing = [f for f in BUNDLED_EVALUATOR_FILES if bundled and f not in program.protected
               and (program.root / f).is_file()]
    if missing:
        raise ProgramError(f"{where.get('protected', name)}: field 'protected': the bundled evaluator "
                           f"({BUNDLED_EVALUATE}) runs from the protected files alone and needs "
                           f"{', '.join(missing)}; add them: protected: [{', '.join(Program.protected)}]")
    _check_slurm(program, where, lambda dotted: f"{name}:{line_of(lines, dotted)}")
    _check_knobs(program, lambda dotted: f"{name}:{lines.get(dotted, lines.get(dotted.split('.')[0], '?'))}")
    return program


def _check_metric_named(program: Program, where: dict[str, str], name: str) -> None:
    """`metric:` is required unless the bundled scripts measure it: the default (val_bpb) is the
    bundled example's, and a script of yours taking it silently would fail later on a metric
    its author never wrote."""
    if "metric" in where:
        return
    bundled = program.evaluate == BUNDLED_EVALUATE or (
        program.evaluate is None and program.command == BUNDLED_COMMAND)
    if bundled:
        return
    raise ProgramError(
        f"{name}: field 'metric': missing; the command ({program.command}) is not the bundled one, "
        f"so the bundled example's {Program.metric} is not its metric. Add `metric: val_loss` "
        f"naming the number your script prints (a key of result.json or a `val_loss: 1.23` line), "
        f"with `metric_pattern: 'val loss ([0-9.]+)'` if it prints it as text")


def _resolve_auto(values: dict[str, Any], where: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """`evaluate: auto` and `edits: auto`, from the fields they depend on:
    - evaluate: the bundled evaluator for the bundled command, else none (a script of yours
      has no evaluator unless you name one);
    - edits: `knobs` when program.md names knobs (`knobs:`, assignments where you keep them)
      or the target is a config file (.yaml, .json, ...), else `free`."""
    values, where = dict(values), dict(where)
    if values.get("evaluate", "auto") == "auto":
        bundled = values.get("command", Program.command) == BUNDLED_COMMAND
        values["evaluate"] = BUNDLED_EVALUATE if bundled else None
        where.setdefault("evaluate", f"{where.get('', 'program.md')}: evaluate auto")
    if values.get("edits", "auto") == "auto":
        config = bool(values.get("knobs")) or str(values.get("target", Program.target)).endswith(CONFIG_SUFFIXES)
        values["edits"] = "knobs" if config else "free"
    return values, where


def _check_slurm(program: Program, where: dict[str, str], locate: Callable[[str], str]) -> None:
    """What `slurm:` must say when the runs go to Slurm, and its time limit against the
    budget (a limit the sandbox's own deadline outlasts would cut runs short)."""
    slurm = program.slurm
    if program.cluster == "slurm" and not slurm.shared_dir:
        raise ProgramError(f"{where.get('slurm', where.get('cluster', program.path))}: field "
                           f"'slurm.shared_dir': cluster slurm needs a folder every node sees at the "
                           f"same path, e.g. slurm: {{shared_dir: /checkpoint/$USER/nightshift}}; the "
                           f"snapshots, the data and the runs' outputs travel through it")
    deadline = program.budget_s + program.grace_s
    if slurm.time_s is not None and slurm.time_s < deadline + 60:
        least = math.ceil((deadline + STARTUP_S) / 60)
        raise ProgramError(f"{locate('slurm.time')}: field 'slurm.time': {slurm.time_s / 60:g} min is "
                           f"too short for budget + grace ({deadline / 60:g} min) and the node's "
                           f"start-up: Slurm would end runs the sandbox lets finish; set it to "
                           f"{least}m or more, or leave it out (derived from budget + grace)")


def _check_knobs(program: Program, locate: Callable[[str], str]) -> None:
    """The knobs against the target file, before any run: program.md's `knobs:` always, the
    `# search:` annotations when the optuna researcher will read them."""
    declared = program.knobs
    if not declared:
        try:
            optuna = resolve_researcher_name(program.researcher)[0] == "optuna"
        except Exception:
            optuna = False
        if not optuna:
            return
    path = program.root / program.target
    if not path.is_file():
        if declared:
            raise ProgramError(f"{locate('knobs')}: field 'knobs': the target {program.target} does "
                               f"not exist in {program.root}; set target to the file that assigns them")
        return   # nothing to read yet; `nightshift check` says so
    source = path.read_text(encoding="utf-8", errors="replace")
    try:
        knobs = find_knobs(source, path=program.target, declared=declared)
    except DeclaredKnobError as exc:
        raise ProgramError(f"{locate('knobs.' + exc.knob)}: field 'knobs.{exc.knob}': {exc}") from None
    except (KnobError, SyntaxError) as exc:
        raise ProgramError(f"{locate('target')}: field 'target': {program.target}: {exc}; fix that "
                           f"`# search:` annotation, or name the knobs in program.md's knobs: "
                           f"(which replaces the annotations)") from None
    dead = overridden(source, program.target, program.command)
    for knob in knobs:
        # the knob's own line first: makemore's `n_layer` is --n-layer's default, not the
        # ModelConfig.n_layer field that the same flag also overrides
        hit = next((o for o in sorted(dead, key=lambda o: o.line != knob.line) if o.hits(knob.name, knob.line)), None)
        if hit is not None:
            field_name = f"knobs.{knob.name}" if declared else "command"
            raise ProgramError(
                f"{locate(field_name)}: field {field_name!r}: the command passes "
                f"{hit.flag.text}, which overrides {hit.what()} in {program.target} (line {hit.line}): "
                f"the researcher's edits to it would do nothing. Remove {hit.flag.text} from command "
                f"(the target's value is what runs then), or drop the knob")


def _repo_root(path: Path) -> Path:
    return next((folder for folder in path.parents if (folder / ".git").exists()), path.parent)


def parse_program(text: str, path: Path | str, overrides: dict[str, Any] | None = None) -> Program:
    """Parse program.md's text; `path` names it in errors and locates the repository root."""
    shown = Path(path)
    front, prose, first = split(text, str(shown))
    raw, lines = compose(front, str(shown), first)
    absolute = shown.resolve()
    program = _build(shown, _repo_root(absolute), prose, raw, lines, dict(overrides or {}))
    return dataclasses.replace(program, path=absolute)


def load_program(path: Path | str, overrides: dict[str, Any] | None = None) -> Program:
    """Read and validate program.md. `overrides` maps YAML keys (or attribute names, or dotted
    `seeds.max`) to values, strings from the command line included; None values are skipped,
    so a CLI may pass every option it has."""
    path = Path(path)
    if not path.is_file():
        raise ProgramError(f"{path}: no such program file; pass the path of your program.md "
                           f"(the bundled one is at the root of the nightshift repository)")
    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    return parse_program(decode(path.read_bytes(), path), path, given)
