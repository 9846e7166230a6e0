"""The knob annotation grammar: parsing, errors that name the line, and value rewriting."""
import json
from pathlib import Path

import pytest

from agent.target.knobs import (
    DeclaredKnobError, KnobError, find_knobs, format_float, format_sig, knob_values, parse_assignments,
    parse_knobs, set_knobs,
)

SOURCE = '''"""A fake target. # search: log(1, 2) inside a string is not an annotation."""
import math

# ---- knobs
LR = 3e-3              # peak learning rate  # search: log(1e-4, 3e-2)
N_LAYER: int = 4       # transformer blocks  # search: int(2, 8)
OPTIMIZER = "adamw"    # search: choice("adamw", 'muon', None)
USE_BIAS = False       # search: choice(True, False)
WEIGHT_DECAY = 0       # search: float(0, 0.3)
TOKENS = 1_000_000     # search: int(1_000, 10_000_000)
NOT_A_KNOB = 7         # plain comment
lowercase = 1

def f():
    BATCH = 2  # search: int(1, 3)
'''


def _without_function(source: str) -> str:
    return source.split("\ndef f")[0] + "\n"


def test_parses_every_space_kind_with_lines_and_docs():
    knobs = {k.name: k for k in parse_knobs(_without_function(SOURCE))}
    assert list(knobs) == ["LR", "N_LAYER", "OPTIMIZER", "USE_BIAS", "WEIGHT_DECAY", "TOKENS"]
    lr = knobs["LR"]
    assert (lr.kind, lr.value, lr.low, lr.high, lr.line, lr.doc) == ("log", 3e-3, 1e-4, 3e-2, 5, "peak learning rate")
    assert (knobs["N_LAYER"].kind, knobs["N_LAYER"].value, knobs["N_LAYER"].low, knobs["N_LAYER"].high) == ("int", 4, 2, 8)
    assert knobs["OPTIMIZER"].choices == ("adamw", "muon", None)
    assert knobs["USE_BIAS"].choices == (True, False) and knobs["USE_BIAS"].value is False
    assert knobs["WEIGHT_DECAY"].kind == "float" and knobs["WEIGHT_DECAY"].low == 0.0
    assert knobs["TOKENS"].value == 1_000_000 and knobs["TOKENS"].high == 10_000_000


def test_annotation_off_an_assignment_line_is_an_error_naming_it():
    with pytest.raises(KnobError, match=r"line 15: a '# search:' annotation must end"):
        parse_knobs(SOURCE)


@pytest.mark.parametrize("line, message", [
    ("X = 1  # search: uniform(0, 1)", r"line 2: unknown search space kind 'uniform'"),
    ("X = 1.0  # search: float(1, 1)", r"line 2: float\(lo, hi\) needs lo < hi"),
    ("X = 1.0  # search: float(2, 1)", r"line 2: .*lo < hi"),
    ("X = 0.1  # search: log(0, 1)", r"line 2: log\(lo, hi\) needs lo > 0"),
    ("X = 2  # search: int(1.5, 4)", r"line 2: int\(lo, hi\) needs integer bounds"),
    ("X = 2.5  # search: int(1, 4)", r"line 2: .*not an int"),
    ("X = 'a'  # search: float(0, 1)", r"line 2: .*is not a number"),
    ("X = 2 * 3  # search: int(1, 9)", r"line 2: the value of knob X must be a literal"),
    ("X = 1  # search: choice(1)", r"line 2: choice\(...\) needs at least two options"),
    ("X = 1  # search: choice(1, 1)", r"line 2: choice\(...\) lists an option twice"),
    ("X = 1  # search: choice(1, [2])", r"line 2: choice options must be"),
    ("X = 1  # search: int(1, 3) trailing", r"line 2: cannot read the annotation"),
    ("X = Y = 1  # search: int(1, 3)", r"line 2: a knob assigns exactly one name"),
])
def test_errors_name_the_line_and_the_problem(line, message):
    with pytest.raises(KnobError, match=message):
        parse_knobs(f"import os\n{line}\n")


def test_duplicate_and_reassigned_knobs_are_errors():
    with pytest.raises(KnobError, match=r"line 2: duplicate knob X \(first annotated on line 1\)"):
        parse_knobs("X = 1  # search: int(1, 3)\nX = 2  # search: int(1, 3)\n")
    with pytest.raises(KnobError, match=r"line 3: knob X \(annotated on line 1\) is assigned again"):
        parse_knobs("X = 1  # search: int(1, 3)\nY = 2\nX += 1\n")


def test_multi_line_assignment_cannot_be_a_knob():
    with pytest.raises(KnobError, match="line 3"):
        parse_knobs("X = (\n  1 +\n  2)  # search: int(1, 9)\n")


def test_value_outside_the_space_parses_and_contains_says_so():
    (knob,) = parse_knobs("LR = 0.5  # search: log(1e-4, 3e-2)\n")
    assert knob.value == 0.5 and not knob.contains(0.5) and knob.contains(1e-3)
    (choice,) = parse_knobs("B = True  # search: choice(1, 2)\n")
    assert not choice.contains(True) and choice.contains(1)   # True is not 1 here


def test_set_knobs_round_trips_and_keeps_comment_columns():
    source = _without_function(SOURCE)
    new = {"LR": 0.00012345, "N_LAYER": 6.0, "OPTIMIZER": "muon", "USE_BIAS": True,
           "WEIGHT_DECAY": 0.1, "TOKENS": 20000}
    out = set_knobs(source, new)
    values = knob_values(out)
    assert values == {**new, "N_LAYER": 6}
    assert isinstance(values["N_LAYER"], int) and isinstance(values["WEIGHT_DECAY"], float)
    before, after = source.splitlines(), out.splitlines()
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert [before[i].split("=")[0] for i in changed] == ["LR ", "N_LAYER: int ", "OPTIMIZER ",
                                                           "USE_BIAS ", "WEIGHT_DECAY ", "TOKENS "]
    for i in changed:   # the comment stays in its column and the text after the value is intact
        assert before[i].index("#") == after[i].index("#")
        assert before[i][before[i].index("#"):] == after[i][after[i].index("#"):]
    assert "LR = 1.2345e-4         # peak" in out
    assert 'OPTIMIZER = "muon"' in out          # keeps the double quotes of the original
    assert "TOKENS = 20_000" in out              # keeps the digit grouping of the original


def test_long_value_pushes_comment_keeping_two_spaces():
    out = set_knobs("LR = 1e-3  # search: float(0, 1)\n", {"LR": 0.123456789})
    assert out == "LR = 0.123456789  # search: float(0, 1)\n"


def test_set_knobs_rejects_unknown_names_and_wrong_types():
    source = "LR = 1e-3  # search: log(1e-4, 1e-1)\nN = 2  # search: int(1, 4)\n"
    with pytest.raises(KnobError, match="no annotated knob named FOO"):
        set_knobs(source, {"FOO": 1})
    with pytest.raises(KnobError, match="N .*takes an int"):
        set_knobs(source, {"N": 2.5})
    with pytest.raises(KnobError, match="LR .*takes a number"):
        set_knobs(source, {"LR": "fast"})


@pytest.mark.parametrize("value, text", [
    (0.003, "3e-3"), (1e-5, "1e-5"), (0.05, "0.05"), (1.5, "1.5"), (0.0, "0.0"),
    (123456.0, "1.23456e5"), (-2e-7, "-2e-7"), (100.0, "100.0"), (0.00012345, "1.2345e-4"),
])
def test_float_formatting_is_compact_and_round_trips(value, text):
    assert format_float(value) == text
    assert float(text) == value


@pytest.mark.parametrize("value, text", [
    (0.0031, "+0.0031"), (0.00314159, "+0.00314"), (-0.0123456, "-0.0123"), (12.345, "+12.3"),
    (1234.5, "+1230"), (3.1e-7, "+3.1e-7"), (0.0, "0"), (-0.0, "0"), (-0.5, "-0.5"),
])
def test_a_delta_prints_signed_with_its_significant_digits(value, text):
    # a small delta printed as "+0." read as a number cut off
    assert format_sig(value) == text


@pytest.mark.parametrize("text, expected", [
    ("LR=1e-3", {"LR": 1e-3}),
    ("set N_LAYER to 6", {"N_LAYER": 6}),
    ("try lr = 1e-3, n_layer = 3.", {"LR": 1e-3, "N_LAYER": 3}),
    ("set OPTIMIZER to muon", {"OPTIMIZER": "muon"}),
    ("LR: 0.01 and USE_BIAS = True", {"LR": 0.01, "USE_BIAS": True}),
])
def test_assignment_hypotheses_are_read(text, expected):
    knobs = parse_knobs(_without_function(SOURCE))
    assert parse_assignments(text, knobs) == expected


@pytest.mark.parametrize("text", ["try RoPE base 50k", "FOO=1", "N_LAYER=2.5", "make LR bigger", ""])
def test_prose_hypotheses_are_refused(text):
    with pytest.raises(KnobError):
        parse_assignments(text, parse_knobs(_without_function(SOURCE)))


def test_the_real_training_script_parses_and_round_trips():
    path = Path(__file__).resolve().parents[2] / "train" / "train.py"
    source = path.read_text()
    knobs = parse_knobs(source)
    assert {"LR", "N_LAYER"} <= {k.name for k in knobs}
    assert all(k.contains(k.value) for k in knobs), "the shipped defaults lie inside their spaces"
    lr = next(k for k in knobs if k.name == "LR")
    out = set_knobs(source, {"LR": lr.low})
    assert knob_values(out)["LR"] == lr.low
    assert len(out.splitlines()) == len(source.splitlines())
    assert sum(a != b for a, b in zip(out.splitlines(), source.splitlines())) == 1


def test_an_annotated_knob_may_have_any_case():
    """Scripts like nanoGPT read lower-case globals; renaming one would make it do nothing."""
    (knob,) = parse_knobs("learning_rate = 6e-4  # search: log(1e-4, 1e-2)\n")
    assert (knob.name, knob.value) == ("learning_rate", 6e-4)


# ---- program.md's `knobs:` over the user's own assignments ----------------------------------

CONFIG_PY = """# config for training a character-level model
out_dir = 'out-shakespeare-char'
eval_interval = 250 # keep frequent because we'll overfit
learning_rate = 1e-3 # with baby networks can afford to go a bit higher
beta2 = 0.99 # make a bit bigger because number of tokens per iter is small
n_layer = 6
dropout = 0.2
n_embd = 64 * 6
"""

DATACLASS_PY = """from dataclasses import dataclass

@dataclass
class TrainConfig:
    lr: float = 3e-4          # peak
    warmup: int = 100
    optimizer: str = "adamw"

@dataclass
class ModelConfig:
    warmup: int = 0
"""

CONFIG_YAML = """# training settings
model:
  n_layer: 4      # blocks
  act: gelu
optimizer:
  lr: 3.0e-4      # peak learning rate
  beta2: 0.99
  name: 'adamw'
seed: 1
"""


def test_declared_knobs_find_lower_case_assignments_and_edit_only_their_values():
    declared = {"learning_rate": "log(1e-4, 1e-2)", "beta2": "float(0.9, 0.999)", "n_layer": "int(2, 8)"}
    knobs = {k.name: k for k in find_knobs(CONFIG_PY, path="config/c.py", declared=declared)}
    assert {n: (k.value, k.line) for n, k in knobs.items()} == {
        "learning_rate": (1e-3, 4), "beta2": (0.99, 5), "n_layer": (6, 6)}
    out = set_knobs(CONFIG_PY, {"learning_rate": 2.5e-3, "n_layer": 4}, path="config/c.py", declared=declared)
    before, after = CONFIG_PY.splitlines(), out.splitlines()
    assert [i for i, (a, b) in enumerate(zip(before, after)) if a != b] == [3, 5]
    assert after[3] == "learning_rate = 2.5e-3 # with baby networks can afford to go a bit higher"
    assert after[5] == "n_layer = 4"


def test_declared_dataclass_field_defaults():
    declared = {"lr": "log(1e-5, 1e-3)", "TrainConfig.warmup": "int(0, 500)", "optimizer": "choice('adamw', 'sgd')"}
    knobs = {k.name: k for k in find_knobs(DATACLASS_PY, path="cfg.py", declared=declared)}
    assert (knobs["lr"].value, knobs["TrainConfig.warmup"].value, knobs["optimizer"].value) == (3e-4, 100, "adamw")
    out = set_knobs(DATACLASS_PY, {"lr": 1e-4, "TrainConfig.warmup": 200, "optimizer": "sgd"},
                    path="cfg.py", declared=declared)
    assert "    lr: float = 1e-4          # peak" in out and "    warmup: int = 200" in out
    assert '    optimizer: str = "sgd"' in out and "class ModelConfig:\n    warmup: int = 0" in out


def test_declared_yaml_keys_keep_the_file_and_write_yaml_values():
    declared = {"optimizer.lr": "log(1e-5, 1e-2)", "model.n_layer": "int(2, 8)",
                "optimizer.name": "choice('adamw', 'lion')", "model.act": "choice('gelu', 'relu')"}
    knobs = {k.name: k for k in find_knobs(CONFIG_YAML, path="conf/train.yaml", declared=declared)}
    assert knobs["optimizer.lr"].value == 3e-4 and knobs["optimizer.lr"].line == 6
    out = set_knobs(CONFIG_YAML, {"optimizer.lr": 1.2e-3, "model.n_layer": 6, "optimizer.name": "lion",
                                  "model.act": "relu"}, path="conf/train.yaml", declared=declared)
    import yaml
    assert yaml.safe_load(out) == {"model": {"n_layer": 6, "act": "relu"},
                                   "optimizer": {"lr": 1.2e-3, "beta2": 0.99, "name": "lion"}, "seed": 1}
    assert "  lr: 1.2e-3      # peak learning rate" in out and "  name: 'lion'" in out
    assert out.startswith("# training settings\n") and out.endswith("seed: 1\n")
    small = set_knobs(CONFIG_YAML, {"optimizer.lr": 2e-5}, path="conf/train.yaml", declared=declared)
    assert yaml.safe_load(small)["optimizer"]["lr"] == 2e-5      # PyYAML reads 2.0e-5, not 2e-5


@pytest.mark.parametrize("source, path, declared, message", [
    (CONFIG_PY, "c.py", {"learning_rat": "log(1e-4, 1e-2)"}, r"no assignment `learning_rat = \.\.\.`.*did you mean 'learning_rate'"),
    (CONFIG_PY, "c.py", {"n_embd": "int(64, 512)"}, r"c.py:8: n_embd = 64 \* 6 is an expression"),
    (CONFIG_PY, "c.py", {"out_dir": "float(0, 1)"}, r"c.py:2: out_dir is 'out-shakespeare-char', not a number"),
    (CONFIG_PY, "c.py", {"dropout": "uniform(0, 1)"}, r"unknown search space kind 'uniform'"),
    ("lr = 1\nlr = 2\n", "c.py", {"lr": "int(1, 3)"}, r"assigns lr on lines 1, 2"),
    (DATACLASS_PY, "c.py", {"Model.warmup": "int(0, 9)"}, r"in class Model"),
    (CONFIG_YAML, "t.yaml", {"optimizer.learning_rate": "log(1e-5, 1e-2)"}, r"no key 'optimizer.learning_rate'.*keys under optimizer: lr, beta2, name"),
    (CONFIG_YAML, "t.yaml", {"model": "int(1, 3)"}, r"t.yaml:3: model holds a list or mapping"),
    ("x: 1\n", "t.toml", {"x": "int(1, 3)"}, r"Python \(.py\), YAML"),
])
def test_declared_knob_errors_name_the_knob_and_keep_the_script_working(source, path, declared, message):
    with pytest.raises(DeclaredKnobError, match=message) as caught:
        find_knobs(source, path=path, declared=declared)
    assert caught.value.knob == next(iter(declared))
    assert "rename" not in str(caught.value)


def test_declared_field_defaults_of_an_arguments_dataclass():
    """HfArgumentParser-style scripts keep defaults in field(default=..., metadata=...)."""
    source = """from dataclasses import dataclass, field

@dataclass
class TrainingArguments:
    learning_rate: float = field(
        default=5e-5, metadata={"help": "peak learning rate"})
    warmup_ratio: float = field(default=0.0, metadata={"help": "warmup share"})
"""
    declared = {"learning_rate": "log(1e-6, 1e-3)", "TrainingArguments.warmup_ratio": "float(0, 0.2)"}
    knobs = {k.name: k for k in find_knobs(source, path="run.py", declared=declared)}
    assert (knobs["learning_rate"].value, knobs["learning_rate"].line) == (5e-5, 6)
    out = set_knobs(source, {"learning_rate": 1e-4, "TrainingArguments.warmup_ratio": 0.1},
                    path="run.py", declared=declared)
    assert "        default=1e-4, metadata=" in out and "field(default=0.1, metadata=" in out


def test_declared_keys_of_a_json_config():
    source = '{\n  "learning_rate": 5e-05,\n  "optim": "adamw_torch",\n  "epochs": 3\n}\n'
    declared = {"learning_rate": "log(1e-6, 1e-3)", "optim": "choice('adamw_torch', 'sgd')"}
    out = set_knobs(source, {"learning_rate": 2e-4, "optim": "sgd"}, path="args.json", declared=declared)
    assert json.loads(out) == {"learning_rate": 2e-4, "optim": "sgd", "epochs": 3}
