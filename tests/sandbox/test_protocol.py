"""RunSpec: the one place that names the run protocol's values, for the env and the command."""
from pathlib import Path

from sandbox.protocol import RunSpec, expand_command, unknown_placeholders


def spec(command: str, **kw) -> RunSpec:
    return RunSpec(command=command, snapshot_dir=Path("/s"), data_dir=Path("/d"),
                   out_dir=Path("/runs/r 1/out"), seed=7, budget_s=90.0, metric="m", **kw)


def test_placeholders_take_the_values_of_the_env_vars():
    run = spec("python train.py --seed={seed} --budget {budget_s} --out_dir={out} "
               "--data={data} --split={split}")
    env = run.protocol_env()
    assert run.shell_command() == ("python train.py --seed=7 --budget 90 --out_dir='/runs/r 1/out' "
                                   "--data=/d --split=val")
    assert (env["NIGHTSHIFT_SEED"], env["NIGHTSHIFT_BUDGET_S"], env["NIGHTSHIFT_OUT"]) == ("7", "90", "/runs/r 1/out")


def test_paths_as_the_run_sees_them():
    run = spec("train --out={out} --data={data}")
    assert run.shell_command(out="/out", data="/data") == "train --out=/out --data=/data"
    env = run.protocol_env(out="/out", data="/data")
    assert (env["NIGHTSHIFT_OUT"], env["NIGHTSHIFT_DATA"]) == ("/out", "/data")


def test_python_words_become_the_interpreter_and_paths_win():
    command = "python train.py && python3 -m x; /usr/bin/python y.py; cp python.cfg a; mypython z"
    assert expand_command(command, {}, "/venv/bin/python") == (
        "/venv/bin/python train.py && /venv/bin/python -m x; /usr/bin/python y.py; "
        "cp python.cfg a; mypython z")
    assert expand_command(command, {}, None) == command


def test_other_braces_are_left_to_the_shell_and_typos_are_found():
    command = "python t.py --cfg '{\"a\": 1}' ${HOME} {sede} {seed}"
    assert unknown_placeholders(command) == ["sede"]
    assert expand_command(command, {"seed": "1"}) == "python t.py --cfg '{\"a\": 1}' ${HOME} {sede} 1"
