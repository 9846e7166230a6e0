"""program.md: defaults, the bundled program, errors that name file/field/line, overrides."""
from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from agent.record.records import Direction
from agent.researchers.settings import ClaudeSettings, OpenAISettings, Prices
from agent.program import (FullScale, Program, ProgramError, ResourceLimits, SeedPlan,
                           load_program, parse_duration, parse_memory, parse_program)

REPO = Path(__file__).resolve().parents[1]


def write(folder: Path, text: str, name: str = "program.md") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def error_of(text: str, overrides: dict | None = None) -> str:
    with pytest.raises(ProgramError) as caught:
        parse_program(text, "program.md", overrides)
    return str(caught.value)


# ---- Defaults and the bundled program ----

@pytest.mark.parametrize("front, evaluate, edits", [
    ("", "python train/evaluate.py", "free"),                                # the bundled command
    ("command: python mine.py\nmetric: loss\n", None, "free"),                # a script of yours
    ("command: python mine.py\nmetric: loss\nevaluate: python score.py {train_out}\n",
     "python score.py {train_out}", "free"),
    ("command: python mine.py\nmetric: loss\nevaluate: null\n", None, "free"),
    ("target: conf.yaml\ncommand: python mine.py\nmetric: loss\n", None, "knobs"),  # a config target
    ("edits: knobs\n", "python train/evaluate.py", "knobs"),
])
def test_evaluate_and_edits_auto_follow_the_fields_they_depend_on(tmp_path, front, evaluate, edits):
    program = load_program(write(tmp_path, f"---\n{front}---\nbrief\n"))
    assert (program.evaluate, program.edits) == (evaluate, edits)


@pytest.mark.parametrize("front", [
    "command: python makemore.py -i names.txt\n",                          # a script of yours
    "evaluate: python score.py {train_out}\n",                             # an evaluator of yours
    "command: python makemore.py\nevaluate: null\n",
])
def test_a_script_of_yours_must_name_its_metric(tmp_path, front):
    # The bundled example's val_bpb taken silently made a later error name a metric the user
    # never wrote; the error now names the file, the field and the line to add.
    message = error_of(f"---\n{front}---\n")
    assert message.startswith("program.md: field 'metric': missing")
    assert "val_bpb" in message and "Add `metric: val_loss`" in message and "metric_pattern:" in message


def test_the_bundled_scripts_keep_the_default_metric_and_an_override_names_one(tmp_path):
    assert parse_program("---\nevaluate: null\n---\n", "program.md").metric == "val_bpb"
    assert parse_program("---\ncommand: python x.py\nevaluate: python train/evaluate.py\n---\n",
                         "program.md").metric == "val_bpb"
    given = parse_program("---\ncommand: python x.py\n---\n", "program.md", {"metric": "loss"})
    assert given.metric == "loss" and given.with_overrides(budget="2s").metric == "loss"


def test_train_out_belongs_to_the_evaluation_step(tmp_path):
    with pytest.raises(ProgramError, match=r"program.md:2: field 'command': \{train_out\} is the evaluation step's"):
        load_program(write(tmp_path, "---\ncommand: python t.py --model {train_out}\n---\n"))
    with pytest.raises(ProgramError, match=r"field 'edits': expected one of auto, free, knobs"):
        load_program(write(tmp_path, "---\nedits: some\n---\n"))


def test_a_file_without_front_matter_is_all_prose_and_all_defaults(tmp_path):
    program = load_program(write(tmp_path, "# Brief\n\nMake it better.\n"))
    assert program.prose == "# Brief\n\nMake it better."
    assert program.path == (tmp_path / "program.md").resolve()
    assert program.target == "train/train.py"
    assert program.protected == ("train/prepare.py", "train/evaluate.py", "train/artifact.py", "train/schema.py", "train/graph.py", "train/guard.py", "train/model_process.py")
    assert program.prepare == "python train/prepare.py"
    assert (program.evaluate, program.edits, program.report_tolerance) == ("python train/evaluate.py", "free", 0.05)
    assert (program.metric, program.direction) == ("val_bpb", Direction.MINIMIZE)
    assert (program.budget_s, program.grace_s, program.alpha, program.min_effect) == (60.0, 60.0, 0.04, 0.0)
    assert program.seeds == SeedPlan(baseline=2, screen=1, max=8)
    assert program.full_scale == FullScale(budget_s=600.0, seeds=5)
    assert program.limits == ResourceLimits(memory_mb=8192, pids=512, cpus=None)
    assert (program.decision, program.fdr, program.sandbox, program.researcher) == (
        "sequential", "none", "auto", "auto")
    assert (program.image, program.claude, program.openai) == (
        "nightshift:latest", ClaudeSettings(), OpenAISettings())


@pytest.mark.parametrize("text", ["", "---\n---\n", "\n---\n# only a comment\n---\nprose"])
def test_empty_front_matter_gives_defaults(text):
    program = parse_program(text, "program.md")
    assert program.budget_s == 60.0 and program.seeds == SeedPlan()


def test_the_bundled_program_parses_and_states_the_defaults():
    program = load_program(REPO / "program.md")
    defaults = parse_program("", REPO / "program.md")
    for item in dataclasses.fields(Program):
        if item.name not in ("prose", "locations"):
            assert getattr(program, item.name) == getattr(defaults, item.name), item.name
    assert program.root == REPO
    lines = program.prose.splitlines()
    assert 80 <= len(lines) <= 130
    for phrase in ("val_bpb", "train/train.py", "prepare.py", "prediction", "seed", "ledger"):
        assert phrase in program.prose


def test_the_root_is_the_git_toplevel_else_the_folder(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    nested = write(tmp_path / "repo" / "research", "prose")
    assert load_program(nested).root == (tmp_path / "repo").resolve()
    plain = write(tmp_path / "plain", "prose")
    assert load_program(plain).root == (tmp_path / "plain").resolve()


def test_every_field_is_read(tmp_path):
    text = """---
target: src/model.py
protected: [data/prep.py, ./eval.py]
command: python src/model.py --fast
prepare: null
metric: accuracy
direction: maximize
budget: 1.5m
grace: 10
seeds: {baseline: 3, screen: 2, max: 8}
alpha: 0.01
min_effect: 0.002
decision: noise_band
fdr: lord
full_scale: {budget: 1h, seeds: 10}
sandbox: docker
researcher: optuna
limits: {memory: 512m, pids: 64, cpus: 2}
image: mine:1
claude: {model: some-model, max_usd: 5}
---
Do research.
"""
    program = load_program(write(tmp_path, text))
    assert program.target == "src/model.py"
    assert program.protected == ("data/prep.py", "eval.py")
    assert program.prepare is None
    assert (program.metric, program.direction) == ("accuracy", Direction.MAXIMIZE)
    assert program.direction is Direction.MAXIMIZE and program.to_dict()["direction"] == "maximize"
    assert (program.budget_s, program.grace_s) == (90.0, 10.0)
    assert program.seeds == SeedPlan(baseline=3, screen=2, max=8)
    assert (program.alpha, program.min_effect) == (0.01, 0.002)
    assert (program.decision, program.fdr, program.sandbox, program.researcher) == (
        "noise_band", "lord", "docker", "optuna")
    assert program.full_scale == FullScale(budget_s=3600.0, seeds=10)
    assert program.limits == ResourceLimits(memory_mb=512, pids=64, cpus=2.0)
    assert program.image == "mine:1"
    assert program.claude == ClaudeSettings(model="some-model", max_usd=5.0)
    assert program.prose == "Do research."


def test_an_integer_seeds_sets_max():
    assert parse_program("---\nseeds: 3\n---\n", "p.md").seeds == SeedPlan(baseline=2, screen=1, max=3)


def test_to_dict_is_json_safe_and_the_program_is_frozen():
    program = parse_program("---\nclaude: {max_usd: 2}\n---\nx", "program.md")
    data = json.loads(json.dumps(program.to_dict()))
    assert data["budget_s"] == 60.0 and data["protected"] == ["train/prepare.py", "train/evaluate.py", "train/artifact.py", "train/schema.py", "train/graph.py", "train/guard.py", "train/model_process.py"]
    assert data["seeds"] == {"baseline": 2, "screen": 1, "max": 8, "repeat": 1}
    assert data["limits"]["memory_mb"] == 8192 and data["claude"]["max_usd"] == 2
    assert data["path"].endswith("program.md")
    with pytest.raises(dataclasses.FrozenInstanceError):
        program.budget_s = 1.0  # type: ignore[misc]


# ---- Errors name the file, the field and the line ----

MALFORMED = [
    # (front matter lines, line of the error, fragments the message must contain)
    ("# comment\nbudjet: 60s", 3, ["unknown field 'budjet'", "did you mean 'budget'", "known fields:"]),
    ("metric: val_bpb\nbudget: soon", 3, ["field 'budget'", "duration like 60s", "'soon'"]),
    ("budget: 0s", 2, ["field 'budget'", "positive duration"]),
    ("direction: minimise", 2, ["field 'direction'", "minimize, maximize", "did you mean 'minimize'"]),
    ("alpha: high", 2, ["field 'alpha'", "expected a number", "'high'"]),
    ("alpha: 0.7", 2, ["field 'alpha'", "(0, 0.5]"]),
    ("alpha: 0", 2, ["field 'alpha'", "(0, 0.5]"]),
    ("seeds: 0", 2, ["field 'seeds.max'", "at least 2"]),
    ("seeds: many", 2, ["field 'seeds.max'", "whole number"]),
    ("seeds:\n  baseline: 4\n  maxx: 3", 4, ["field 'seeds.maxx'", "did you mean 'max'"]),
    ("seeds:\n  screen: 4\n  max: 2", 3, ["field 'seeds.screen'", "exceeds max"]),
    ("seeds:\n  baseline: 1.5", 3, ["field 'seeds.baseline'", "whole number"]),
    ("full_scale: {budget: later}", 2, ["field 'full_scale.budget'", "duration"]),
    ("limits:\n  memory: lots", 3, ["field 'limits.memory'", "8g, 512m"]),
    ("protected: 3", 2, ["field 'protected'", "list of paths"]),
    ("command: [python, x.py]", 2, ["field 'command'", "string"]),
    ("claude: fast", 2, ["field 'claude'", "mapping"]),
    ("sandbox: k8s", 2, ["field 'sandbox'", "auto, local, docker"]),
    ("protected: [../secrets.py]", 2, ["field 'protected'", "without '..'"]),
    ("target: /etc/passwd", 2, ["field 'target'", "relative to the repository root"]),
    ("target: train/../../x.py", 2, ["field 'target'", "'..'"]),
    ("target: train/prepare.py", 2, ["field 'target'", "also protected"]),
    ("target: a.py\n\nprotected: [b.py, a.py]", 4, ["field 'protected'", "also protected"]),
    ("budget: 60s\nbudget: 90s", 3, ["field 'budget' is given twice", "line 2"]),
    ("budget: 60s\n  grace: [1", 3, ["not valid YAML"]),
    ("command: python x.py\nmetric: a: b", 3, ["not valid YAML", "quote"]),
    ("- budget: 60s", 2, ["must be 'field: value' lines"]),
    # the seed plan is bounded before anything runs (issue 14: seeds.max 100000 ran 80 s, then crashed)
    ("seeds: {max: 100000}", 2, ["field 'seeds.max'", "at most 100"]),
    ("seeds:\n  baseline: 1", 3, ["field 'seeds.baseline'", "at least 2"]),
    ("seeds:\n  baseline: 500", 3, ["field 'seeds.baseline'", "at most 100"]),
    ("seeds: {max: 1}", 2, ["field 'seeds.max'", "at least 2"]),
    ("full_scale: {seeds: 5000}", 2, ["field 'full_scale.seeds'", "at most 100"]),
    ("metric: val bpb", 2, ["field 'metric'", "letters, digits"]),
    ("metric: 'val_bpb: 3'", 2, ["field 'metric'", "letters, digits"]),
    # someone else's script (issue 12): every problem found before anything runs
    ("metric_pattern: 'val loss [0-9.]+'", 2, ["field 'metric_pattern'", "has 0 groups", "exactly one"]),
    ("metric_pattern: '(train|val) loss ([0-9.]+)'", 2, ["field 'metric_pattern'", "has 2 groups", "(?:...)"]),
    ("metric_pattern: 'val loss ([0-9.]+'", 2, ["field 'metric_pattern'", "not a valid regular expression", "missing )"]),
    ("metrics_pattern: 'loss ([0-9.]+)'", 2, ["field 'metrics_pattern'", "no named group", "(?P<"]),
    ("command: python train.py --seed={sede}", 2, ["field 'command'", "unknown placeholder {sede}",
                                                    "did you mean {seed}?", "{budget_s}"]),
    ("env:\n  OMP_NUM_THREADS: 1\n  WANDB_API_KEY: abc", 4, ["field 'env.WANDB_API_KEY'", "looks like a secret"]),
    ("env: {NIGHTSHIFT_SEED: 3}", 2, ["field 'env.NIGHTSHIFT_SEED'", "shadow", "{seed}"]),
    ("env: {PATH: /opt/bin}", 2, ["field 'env.PATH'", "set by the sandbox"]),
    ("knobs:\n  lr: 'float(0, 1)'\n  beta2: uniform(0.9, 1)", 4, ["field 'knobs.beta2'", "unknown search space kind 'uniform'"]),
    ("data: ../datasets", 2, ["field 'data'", "without '..'"]),
    ("keep: [3]", 2, ["field 'keep'", "file patterns"]),
]


@pytest.mark.parametrize("front, line, fragments", MALFORMED, ids=[case[0] for case in MALFORMED])
def test_a_malformed_program_names_the_file_field_and_line(front, line, fragments):
    message = error_of(f"---\n{front}\n---\nprose\n")
    assert message.startswith(f"program.md:{line}: "), message
    for fragment in fragments:
        assert fragment in message, message


def test_line_numbers_count_leading_blank_lines(tmp_path):
    path = write(tmp_path, "\n\n---\nmetric: x\ndirection: up\n---\n")
    with pytest.raises(ProgramError, match=r"program\.md:5: field 'direction'"):
        load_program(path)


def test_unclosed_front_matter_is_a_clear_error():
    message = error_of("---\nbudget: 60s\n\n# Goal\nwords\n")
    assert message.startswith("program.md:1: ") and "never closed" in message and "'---'" in message


def test_a_file_that_is_not_utf8_names_the_file_line_and_field(tmp_path):
    path = tmp_path / "program.md"
    path.write_bytes(b"---\nbudget: 60s\nmetric: val\xe9bpb\n---\nprose\n")
    with pytest.raises(ProgramError) as caught:
        load_program(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:3: field 'metric': "), message
    assert "not UTF-8" in message and "0xe9" in message and "save" in message


def test_a_non_utf8_prose_names_the_line(tmp_path):
    path = tmp_path / "program.md"
    path.write_bytes(b"---\nbudget: 60s\n---\n# Brief\n\nbetter \xff\n")
    with pytest.raises(ProgramError, match=r"program\.md:6: the prose: not UTF-8"):
        load_program(path)


def test_accepted_metric_names():
    for name in ("val_bpb", "eval/loss", "val-loss", "acc@1", "Top1.acc"):
        assert parse_program(f"---\nmetric: {name}\n---\n", "program.md").metric == name


def test_a_program_locates_its_fields_for_later_checks():
    program = parse_program("---\nbudget: 60s\n\ntarget: a.py\n---\n", "program.md")
    assert program.locate("target") == "program.md:4: field 'target'"
    assert program.locate("protected") == "program.md: field 'protected' (default ['train/prepare.py', 'train/evaluate.py', 'train/artifact.py', 'train/schema.py', 'train/graph.py', 'train/guard.py', 'train/model_process.py'])"
    moved = program.with_overrides(budget="5s")
    assert moved.locate("target") == "program.md:4: field 'target'"
    assert moved.locate("budget") == "program.md (override budget): field 'budget'"
    assert "locations" not in program.to_dict()


def test_a_missing_file_is_a_program_error(tmp_path):
    with pytest.raises(ProgramError, match="no such program file"):
        load_program(tmp_path / "nope.md")


# ---- Overrides: the same parsers, strings from the command line included ----

def test_overrides_are_parsed_like_file_values(tmp_path):
    path = write(tmp_path, "---\nbudget: 60s\nseeds: 3\n---\n")
    program = load_program(path, {
        "budget": "90s", "seeds.screen": "2", "alpha": "0.1", "prepare": "none",
        "limits.memory": "2g", "protected": "a.py,b.py", "evaluate": "none", "full_scale.seeds": 7,
        "researcher": None,  # a CLI passes every option; None means "not given"
    })
    assert program.budget_s == 90.0
    assert program.seeds == SeedPlan(baseline=2, screen=2, max=3)  # file's max kept
    assert program.alpha == 0.1 and program.prepare is None
    assert program.limits == ResourceLimits(memory_mb=2048, pids=512, cpus=None)
    assert program.protected == ("a.py", "b.py")
    assert program.full_scale == FullScale(budget_s=600.0, seeds=7)
    assert program.researcher == "auto"


def test_an_invalid_override_names_the_field():
    message = error_of("---\nbudget: 60s\n---\n", {"budget": "soon"})
    assert message == ("program.md (override budget): field 'budget': "
                       "expected a duration like 60s, 10m or 1.5h, got 'soon'")
    assert "field 'seeds.max'" in error_of("", {"seeds.max": "0"})
    assert "also protected" in error_of("", {"target": "train/prepare.py"})


def test_an_unknown_override_suggests_the_field():
    message = error_of("", {"budgte": "9s"})
    assert "(override)" in message and "did you mean 'budget'" in message
    assert "unknown field 'alpha.x'" in error_of("", {"alpha.x": 1})
    assert parse_program("", "p.md", {"claude.model": "m"}).claude.model == "m"


def test_file_errors_are_reported_before_overrides():
    message = error_of("---\nbudget: soon\n---\n", {"budget": "60s"})
    assert message.startswith("program.md:2: field 'budget'")


def test_with_overrides_revalidates_and_accepts_attribute_names():
    program = parse_program("---\nseeds: {baseline: 2, max: 4}\n---\nbrief", "program.md")
    changed = program.with_overrides(budget_s=5, **{"seeds.max": 9})
    assert (changed.budget_s, changed.seeds, changed.prose) == (5.0, SeedPlan(2, 1, 9), "brief")
    assert program.budget_s == 60.0
    with pytest.raises(ProgramError, match="field 'direction'"):
        program.with_overrides(direction="down")


# ---- Units ----

@pytest.mark.parametrize("value, seconds", [
    (60, 60.0), (90.5, 90.5), ("60", 60.0), ("60s", 60.0), ("90.5s", 90.5), ("10m", 600.0),
    ("1.5h", 5400.0), ("2min", 120.0), (" 3 s ", 3.0), ("0", 0.0), ("1H", 3600.0),
])
def test_durations(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["soon", "1d", "-5s", "", "nan", True, None, [60]])
def test_bad_durations(value):
    with pytest.raises(Exception, match="duration like 60s"):
        parse_duration(value)


@pytest.mark.parametrize("value, mb", [
    (8192, 8192), ("8192", 8192), ("8g", 8192), ("8G", 8192), ("8gb", 8192), ("8GiB", 8192),
    ("512m", 512), ("512MB", 512), ("1.5g", 1536), ("1t", 1024 * 1024), (None, None), ("none", None),
])
def test_memory_sizes(value, mb):
    assert parse_memory(value) == mb


@pytest.mark.parametrize("value", ["lots", "8x", "0", 0.5, True, "-1g"])
def test_bad_memory_sizes(value):
    with pytest.raises(Exception, match="memory size like 8g"):
        parse_memory(value)


# ---- the researchers' settings: program.md's own table, its own line numbers -------------

LLM_PROGRAM = """---
researcher: claude
claude:
  model: claude-opus-5-5
  cache_ttl: 5m
  effort: high
  fallback_model: claude-sonnet-5-5
openai:
  model: qwen3-coder
  base_url: http://127.0.0.1:8000/v1
  prices: {input: 0.2, output: 0.6}
---
"""


def test_researcher_settings_are_typed():
    program = parse_program(LLM_PROGRAM, "program.md")
    assert program.claude == ClaudeSettings(model="claude-opus-5-5", cache_ttl="5m", effort="high",
                                            fallback_model="claude-sonnet-5-5")
    assert program.openai.prices == Prices(input=0.2, output=0.6)
    assert program.openai.base_url == "http://127.0.0.1:8000/v1"
    assert program.with_overrides(**{"claude.max_usd": "3"}).claude.max_usd == 3.0
    assert json.loads(json.dumps(program.to_dict()))["openai"]["prices"]["input"] == 0.2


@pytest.mark.parametrize("old, new, message", [
    ("cache_ttl: 5m", "cache_ttl: 2h", "program.md:5: field 'claude.cache_ttl': expected one of 5m, 1h, got '2h'"),
    ("effort: high", "effort: extreme", "program.md:6: field 'claude.effort': expected one of low, medium"),
    ("effort: high", "max_tokens: 64000", "program.md:6: field 'claude.max_tokens': at most 21333 per turn"),
    ("fallback_model: claude-sonnet-5-5", "fallback_model: claude-opus-5-5",
     "program.md:7: field 'claude.fallback_model': is the same as model"),
    ("cache_ttl: 5m", "cache_tll: 5m", "program.md:5: field 'claude.cache_tll': unknown key 'cache_tll' "
                                       "(did you mean 'cache_ttl'?)"),
    ("effort: high", "max_usd: ten", "program.md:6: field 'claude.max_usd': expected a number, got 'ten'"),
    ("effort: high", "max_turns: 0", "program.md:6: field 'claude.max_turns': expected a whole number >= 1"),
    ("input: 0.2", "input: cheap", "program.md:11: field 'openai.prices.input': expected a number"),
])
def test_a_bad_researcher_setting_names_programs_line_and_field(old, new, message):
    assert error_of(LLM_PROGRAM.replace(old, new)).startswith(message)
# ---- Someone else's script: the new fields, and knobs checked against the target ----

def test_the_fields_for_someone_elses_script_parse(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "train_char.py").write_text("learning_rate = 1e-3\nbeta2 = 0.99\n")
    program = load_program(write(tmp_path, """---
target: config/train_char.py
command: python train.py config/train_char.py --seed={seed} --out_dir={out}
metric: val_loss
metric_pattern: 'val loss ([0-9.]+)'
metrics_pattern: 'iter (?P<iter>\\d+): loss (?P<train_loss>[0-9.]+)'
env: {OMP_NUM_THREADS: 1, TOKENIZERS_PARALLELISM: 'false'}
knobs:
  learning_rate: log(1e-4, 1e-2)
  beta2: float(0.9, 0.999)
data: data/shakespeare_char
keep: ['*.json', 'samples/*.txt']
---
"""))
    assert program.metric_pattern == "val loss ([0-9.]+)"
    assert program.metrics_pattern == r"iter (?P<iter>\d+): loss (?P<train_loss>[0-9.]+)"
    assert program.env == {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    assert program.knobs == {"learning_rate": "log(1e-4, 1e-2)", "beta2": "float(0.9, 0.999)"}
    assert (program.data, program.keep) == ("data/shakespeare_char", ("*.json", "samples/*.txt"))
    json.dumps(program.to_dict())


def test_a_knob_not_in_the_target_is_an_error_at_load_naming_its_line(tmp_path):
    (tmp_path / "config.py").write_text("learning_rate = 1e-3\nn_layer = 6\n")
    path = write(tmp_path, "---\ntarget: config.py\nknobs:\n  n_layer: int(2, 8)\n"
                           "  learnin_rate: log(1e-4, 1e-2)\n---\n")
    with pytest.raises(ProgramError) as caught:
        load_program(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:5: field 'knobs.learnin_rate': "), message
    assert "did you mean 'learning_rate'" in message and "rename" not in message


def test_declared_knobs_need_the_target_to_exist(tmp_path):
    path = write(tmp_path, "---\ntarget: conf.yaml\nknobs: {lr: 'log(1e-5, 1e-2)'}\n---\n")
    with pytest.raises(ProgramError, match=r"program.md:3: field 'knobs': the target conf.yaml does not exist"):
        load_program(path)


def test_a_broken_annotation_is_found_at_load_for_the_optuna_researcher(tmp_path):
    write(tmp_path, "LR = 1e-3  # search: log(0, 1)\n", "train/train.py")
    path = write(tmp_path, "---\nresearcher: optuna\n---\n")
    with pytest.raises(ProgramError, match=r"field 'target': train/train.py: line 1: log\(lo, hi\) needs lo > 0"):
        load_program(path)
    load_program(write(tmp_path, "---\nresearcher: scripted\n---\n"))   # no knobs read: fine


def test_the_bundled_evaluator_needs_its_own_files_protected(tmp_path):
    """It runs in a snapshot of the protected files alone: without artifact.py, schema.py, graph.py,
    guard.py or model_process.py every run would be a bad artifact, so the program is refused, with the fix."""
    path = write(tmp_path, "---\nprotected: [train/prepare.py, train/evaluate.py]\n---\n")
    for name in ("prepare", "evaluate", "artifact", "schema", "graph", "guard", "model_process"):   # the bundled target's files
        (tmp_path / "train").mkdir(exist_ok=True)
        (tmp_path / "train" / f"{name}.py").write_text("# the evaluator\n")
    with pytest.raises(ProgramError, match=r"field 'protected'.*needs train/artifact.py, train/schema.py, train/graph.py, train/guard.py, train/model_process.py; add them"):
        load_program(path)
