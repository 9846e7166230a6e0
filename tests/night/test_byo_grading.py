"""The grader apart for someone else's script: a nanoGPT-shaped repository whose config file
is Python that the training script runs as code. Under `edits: knobs` (the default once
program.md names knobs) an edit may change only knob values; the protected `evaluate:`
command scores the checkpoint training left, and its value is the metric recorded.
"""
import json

import pytest

from tests.loop_helpers import cli_env, loop_state, make_repo, nightshift

CONFIG = "learning_rate = 0.01  # the step size\nn_layer = 4\nbatch_size = 12\n"
TRAIN = '''import json, os, random, sys
config = {}
exec(open(sys.argv[1]).read(), config)          # nanoGPT's configurator: the config is code
seed, out = int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed)
quality = 2.0 + 40 * (config["learning_rate"] - 0.03) ** 2 + 0.01 * config["n_layer"] + rng.gauss(0, 0.01)
json.dump({"quality": quality}, open(os.path.join(out, "ckpt.json"), "w"))
print(f"step 100: train loss {quality + 0.1:.4f}, val loss {quality:.4f}")   # its own claim
'''
EVALUATE = '''import json, os, sys
ckpt = json.load(open(os.path.join(sys.argv[1], "ckpt.json")))
print("---")
print(f"val_loss: {ckpt['quality'] + 0.0005:.6f}")   # the evaluator's own measurement
'''
PROGRAM = """---
target: config/cfg.py
protected: [train.py, evaluate.py]
command: python train.py config/cfg.py {seed} {out}
evaluate: python evaluate.py {train_out}
prepare: null
metric: val_loss
metric_pattern: 'val loss ([0-9.]+)'
budget: 2s
grace: 20s
knobs:
  learning_rate: log(1e-3, 1e-1)
  n_layer: int(2, 8)
seeds: {baseline: 2, screen: 2, max: 2}
sandbox: local
researcher: scripted
---
Lower val_loss.
"""


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "user", {"config/cfg.py": CONFIG, "train.py": TRAIN,
                                         "evaluate.py": EVALUATE, "program.md": PROGRAM})


def test_knob_edits_only_and_the_evaluators_metric_is_recorded(repo, tmp_path):
    script = tmp_path / "proposals.json"
    script.write_text(json.dumps([
        {"replace": ["learning_rate = 0.01", "learning_rate = 0.03"], "description": "a knob value"},
        {"replace": ["batch_size = 12\n", "batch_size = 12\nimport os\n"], "description": "a statement"},
        {"replace": ["batch_size = 12", "batch_size = 64"], "description": "a line that is no knob"},
        {"replace": ["n_layer = 4", "n_layer = 12"], "description": "a knob out of its space"},
    ]))
    done = nightshift(repo, "run", "--tag", "byo", "--script", str(script), "--max-experiments", "4",
                      env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "metric: measured apart: `python evaluate.py {train_out}`" in " ".join(done.stdout.split())
    state = loop_state(repo, "byo")
    first, statement, other, outside = (state.experiments[f"e000{i}"] for i in range(1, 5))
    assert first.verdict.value in ("keep", "discard", "inconclusive")
    for name, experiment in (("statement", statement), ("other", other), ("outside", outside)):
        assert experiment.verdict.value == "invalid", name
    assert "edits are limited to the knobs' values" in statement.invalid_reason
    assert "line 4: 'import os'" in statement.invalid_reason
    assert "batch_size = 64" in other.invalid_reason
    assert "n_layer = 12" in outside.invalid_reason and "outside their search space" in outside.invalid_reason
    for run in state.runs:   # every value is the evaluator's, the script's own claim beside it
        assert run.ok and run.measured_by == "evaluator"
        assert run.metric == pytest.approx(run.reported + 0.0005, abs=1e-4)
    evaluated = repo / "results" / "byo" / "runs" / state.runs[0].run_id / "eval" / "log.txt"
    assert "val_loss:" in evaluated.read_text()


def test_a_free_edit_target_without_an_evaluator_is_said_plainly(repo, tmp_path):
    program = repo / "program.md"
    program.write_text(PROGRAM.replace("evaluate: python evaluate.py {train_out}\n", "evaluate: null\n")
                       .replace("researcher: scripted", "researcher: optuna\nedits: free"))
    done = nightshift(repo, "check", env=cli_env(tmp_path / "data"))
    out = " ".join(done.stdout.split())
    assert "the metric comes from code the researcher may edit" in out
    assert "an LLM researcher can change how it is measured" in out and "Add `evaluate:`" in out
