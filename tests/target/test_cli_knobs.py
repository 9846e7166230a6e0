"""program.md's knobs over command-line settings: argparse and click defaults, found, checked
and rewritten in place, on karpathy/makemore as shipped and on small scripts."""
import ast
from pathlib import Path

import pytest

from agent.program import ProgramError, load_program
from agent.record.records import Direction
from agent.researchers.base import ResearchContext
from agent.researchers.optuna_researcher import OptunaResearcher
from agent.target.knobs import DeclaredKnobError, KnobError, find_knobs, knob_edit, parse_assignments, set_knobs
from agent.target.overrides import overridden

MAKEMORE = Path(__file__).resolve().parents[1] / "fixtures" / "makemore" / "makemore.py"
SOURCE = MAKEMORE.read_text()
DECLARED = {"n_layer": "int(2, 8)", "learning_rate": "log(1e-4, 1e-2)", "batch_size": "int(8, 128)",
            "--n-embd": "choice(32, 64, 128)"}


def defaults(source: str) -> dict[str, object]:
    """{first flag: literal default} of every add_argument call, read back with ast."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            if default is not None:
                found[node.args[0].value] = ast.literal_eval(default)
    return found


def test_makemore_flags_are_found_by_dest_and_by_flag_at_their_lines():
    knobs = {k.name: k for k in find_knobs(SOURCE, path="makemore.py", declared=DECLARED)}
    assert {n: (k.value, k.line, k.kind, SOURCE[k.start:k.end]) for n, k in knobs.items()} == {
        "n_layer": (4, 611, "int", "4"),
        "--n-embd": (64, 613, "choice", "64"),
        "batch_size": (32, 616, "int", "32"),
        "learning_rate": (5e-4, 617, "log", "5e-4"),
    }
    # n_layer is also ModelConfig.n_layer (line 37), which makemore fills from the flag
    assert SOURCE.splitlines()[36] == "    n_layer: int = 4"


def test_set_knobs_on_makemore_changes_only_the_default_texts():
    out = set_knobs(SOURCE, {"n_layer": 6, "learning_rate": 1.5e-3, "batch_size": 64, "--n-embd": 128},
                    path="makemore.py", declared=DECLARED)
    expected = SOURCE.splitlines(keepends=True)
    for line, old, new in [(611, "default=4,", "default=6,"), (613, "default=64,", "default=128,"),
                           (616, "default=32,", "default=64,"), (617, "default=5e-4,", "default=1.5e-3,")]:
        assert expected[line - 1].count(old) == 1
        expected[line - 1] = expected[line - 1].replace(old, new)
    assert out == "".join(expected)
    changed = [i for i, (a, b) in enumerate(zip(SOURCE.splitlines(), out.splitlines()), 1) if a != b]
    assert changed == [611, 613, 616, 617]
    ast.parse(out)
    before, after = defaults(SOURCE), defaults(out)
    assert {f: v for f, v in after.items() if before[f] != v} == {
        "--n-layer": 6, "--n-embd": 128, "--batch-size": 64, "--learning-rate": 1.5e-3}
    assert {k.name: k.value for k in find_knobs(out, path="makemore.py", declared=DECLARED)} == {
        "n_layer": 6, "--n-embd": 128, "batch_size": 64, "learning_rate": 1.5e-3}


def test_an_edit_of_makemore_is_a_knob_edit_only_when_it_touches_defaults_alone():
    new = SOURCE.replace("'--n-layer', type=int, default=4,", "'--n-layer', type=int, default=3,")
    assert knob_edit(SOURCE, new, path="makemore.py", declared=DECLARED) == {"n_layer": 3}
    help_too = new.replace('help="number of layers"', 'help="layers"')
    with pytest.raises(KnobError, match="line 611"):
        knob_edit(SOURCE, help_too, path="makemore.py", declared=DECLARED)


def test_assignment_hypotheses_name_flag_knobs_either_way():
    knobs = find_knobs(SOURCE, path="makemore.py", declared=DECLARED)
    assert parse_assignments("--n-layer 6, n_embd=128", knobs) == {"n_layer": 6, "--n-embd": 128}
    assert parse_assignments("set --learning-rate to 2e-3", knobs) == {"learning_rate": 2e-3}
    with pytest.raises(KnobError):
        parse_assignments("n_layer 6", knobs)   # a bare name still needs = or to


def test_the_optuna_researcher_rewrites_makemore_defaults(tmp_path):
    context = ResearchContext(
        program_text="", target="makemore.py", incumbent_source=SOURCE, incumbent_commit="c0",
        protected={}, ledger_summary="", metric="test_loss", direction=Direction.MINIMIZE,
        noise_sd=0.01, incumbent_value=1.0, experiment_index=1)
    proposal = OptunaResearcher(tmp_path, seed=3, knobs=DECLARED).propose(context)
    before, after = defaults(SOURCE), defaults(proposal.source)
    changed = {f for f in before if before[f] != after[f]}
    assert changed and changed <= {"--n-layer", "--n-embd", "--batch-size", "--learning-rate"}
    assert len(proposal.source.splitlines()) == len(SOURCE.splitlines())


def test_a_command_that_passes_the_flag_makes_its_default_dead(tmp_path):
    dead = overridden(SOURCE, "makemore.py", "python makemore.py --n-layer 6 --seed {seed} -i names.txt")
    assert [(o.name, o.line) for o in dead] == [("ModelConfig.n_layer", 37), ("--seed", 606), ("--n-layer", 611)]
    assert dead[2].describe() == "the default of --n-layer (line 611) by --n-layer 6"
    (tmp_path / "makemore.py").write_text(SOURCE)
    program = tmp_path / "program.md"
    program.write_text("---\ntarget: makemore.py\ncommand: python makemore.py --n-layer 6 --seed {seed}\n"
                       "knobs:\n  n_layer: int(2, 8)\n  --n-embd: choice(32, 64, 128)\nmetric: test_loss\n---\n")
    with pytest.raises(ProgramError) as caught:
        load_program(program)
    message = str(caught.value)
    assert "field 'knobs.n_layer': the command passes --n-layer 6, which overrides the default of " \
           "--n-layer in makemore.py (line 611)" in message, message
    program.write_text(program.read_text().replace(" --n-layer 6", " --n-embd=128"))
    with pytest.raises(ProgramError, match=r"program.md:6: field 'knobs.--n-embd': the command passes "
                                           r"--n-embd=128, which overrides the default of --n-embd"):
        load_program(program)
    program.write_text(program.read_text().replace(" --n-embd=128", ""))
    assert load_program(program).knobs == {"n_layer": "int(2, 8)", "--n-embd": "choice(32, 64, 128)"}


# ---- small scripts ------------------------------------------------------------------------

ARGPARSE = """import argparse

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--learning-rate", dest="lr", type=float, default=3e-4)
    p.add_argument("--warmup", type=int, default=-100)
    p.add_argument("--optim", type=str, default="adamw")
    p.add_argument("--steps", type=int, default=int(1e4))
    p.add_argument("--decay", type=float)
    return p.parse_args()
"""


def test_an_explicit_dest_names_the_flag_and_negative_literals_are_editable():
    declared = {"lr": "log(1e-5, 1e-2)", "warmup": "int(-200, 0)", "--optim": "choice('adamw', 'sgd')"}
    knobs = {k.name: k for k in find_knobs(ARGPARSE, path="t.py", declared=declared)}
    assert {n: (k.value, k.line) for n, k in knobs.items()} == {"lr": (3e-4, 5), "warmup": (-100, 6),
                                                                 "--optim": ("adamw", 7)}
    out = set_knobs(ARGPARSE, {"lr": 1e-3, "warmup": -20, "--optim": "sgd"}, path="t.py", declared=declared)
    assert out.splitlines()[4:7] == ['    p.add_argument("--learning-rate", dest="lr", type=float, default=1e-3)',
                                     '    p.add_argument("--warmup", type=int, default=-20)',
                                     '    p.add_argument("--optim", type=str, default="sgd")']
    with pytest.raises(DeclaredKnobError, match="no argparse argument or click option with the flag --lr"):
        find_knobs(ARGPARSE, path="t.py", declared={"--lr": "log(1e-5, 1e-2)"})   # the flag is --learning-rate


CLICK = """import click
from click import option as opt

@click.command()
@click.option("--lr", default=3e-4, type=float, help="peak")
@click.option("--n-layer", "-n", default=4)
@opt("--act", "activation", default="gelu")
def train(lr, n_layer, activation):
    pass
"""


def test_click_options_are_knobs_by_name_and_by_flag():
    declared = {"lr": "log(1e-5, 1e-2)", "--n-layer": "int(2, 8)", "activation": "choice('gelu', 'relu')"}
    knobs = {k.name: (k.value, k.line) for k in find_knobs(CLICK, path="t.py", declared=declared)}
    assert knobs == {"lr": (3e-4, 5), "--n-layer": (4, 6), "activation": ("gelu", 7)}
    out = set_knobs(CLICK, {"lr": 1e-3, "--n-layer": 6, "activation": "relu"}, path="t.py", declared=declared)
    assert '@click.option("--lr", default=1e-3, type=float, help="peak")' in out
    assert '@click.option("--n-layer", "-n", default=6)' in out and '@opt("--act", "activation", default="relu")' in out


@pytest.mark.parametrize("source, declared, message", [
    (ARGPARSE, {"steps": "int(100, 10000)"}, r"t.py:8: --steps default=int\(1e4\) is an expression, not a literal"),
    (ARGPARSE, {"decay": "float(0, 0.1)"}, r"t.py:9: --decay has no default=.*drop the knob"),
    (ARGPARSE + "    p.add_argument('--warmup', type=int, default=5)\n", {"warmup": "int(0, 9)"},
     r"t.py declares warmup on lines 6, 11"),
    (ARGPARSE, {"warmup": "log(1e-3, 1.0)"}, r"t.py:6: --warmup has type=int, which takes whole numbers, but a "
                                              r"log\(\.\.\.\) space draws floats: use int\(lo, hi\)"),
    (ARGPARSE, {"lr": "int(1, 3)"}, r"t.py:5: lr is 0.0003, not a whole number"),
    (ARGPARSE, {"--optim": "float(0, 1)"}, r"--optim has type=str, which takes text, but a float"),
    (ARGPARSE, {"warmup": "choice(1, 'a')"}, r"choice\(\.\.\.\) lists 'a'; list whole numbers only"),
    (ARGPARSE + "    p.set_defaults(lr=1e-3)\n", {"lr": "log(1e-5, 1e-2)"},
     r"t.py:11: set_defaults\(lr=\.\.\.\) replaces the default of --learning-rate \(line 5\)"),
    (ARGPARSE, {"warmpu": "int(0, 9)"}, r"did you mean 'warmup'"),
], ids=["non-literal", "no-default", "declared-twice", "int-flag-log-space", "float-default-int-space",
        "str-flag-float-space", "int-flag-word-choice", "set-defaults", "misspelt"])
def test_flag_knob_errors_name_the_knob_the_line_and_a_fix(source, declared, message):
    with pytest.raises(DeclaredKnobError, match=message) as caught:
        find_knobs(source, path="t.py", declared=declared)
    assert caught.value.knob == next(iter(declared))


FIELD_AND_FLAG = """import argparse
from dataclasses import dataclass

@dataclass
class ModelConfig:
    n_layer: int = 4

parser = argparse.ArgumentParser()
parser.add_argument('--n-layer', type=int, default=6)
args = parser.parse_args()
config = ModelConfig(n_layer=args.n_layer)
small = ModelConfig()
"""


def test_a_name_of_a_flag_and_of_a_field_the_script_may_read_is_ambiguous():
    with pytest.raises(DeclaredKnobError) as caught:
        find_knobs(FIELD_AND_FLAG, path="t.py", declared={"n_layer": "int(2, 8)"})
    message = str(caught.value)
    assert "n_layer names two settings: the argparse flag --n-layer (line 9; name it `--n-layer`)" in message
    assert "the field ModelConfig.n_layer (line 6; name it `ModelConfig.n_layer`)" in message
    assert "ModelConfig(...) on line 12 does not pass n_layer=args.n_layer, so the script reads the " \
           "field's default there" in message
    # each named its own way is fine
    both = {"--n-layer": "int(2, 8)", "ModelConfig.n_layer": "int(2, 8)"}
    assert [(k.name, k.value, k.line) for k in find_knobs(FIELD_AND_FLAG, path="t.py", declared=both)] == [
        ("ModelConfig.n_layer", 4, 6), ("--n-layer", 6, 9)]
    # every construction filled from the flag: the flag is the knob
    proven = FIELD_AND_FLAG.replace("small = ModelConfig()\n", "")
    assert [(k.name, k.line) for k in find_knobs(proven, path="t.py", declared={"n_layer": "int(2, 8)"})] == [
        ("n_layer", 9)]


def test_a_module_level_name_and_a_flag_are_ambiguous_unless_the_name_is_the_flags_default():
    source = "import argparse\nlr = 1e-3\np = argparse.ArgumentParser()\np.add_argument('--lr', default=3e-4)\n" \
             "args = p.parse_args()\nprint(lr, args.lr)\n"
    with pytest.raises(DeclaredKnobError, match=r"the script reads lr on line 6 and the flag's value \(.lr\) on line 6"):
        find_knobs(source, path="t.py", declared={"lr": "log(1e-5, 1e-2)"})
    feeds = source.replace("default=3e-4", "default=lr")
    assert [(k.name, k.line, k.value) for k in find_knobs(feeds, path="t.py", declared={"lr": "log(1e-5, 1e-2)"})] \
        == [("lr", 2, 1e-3)]
