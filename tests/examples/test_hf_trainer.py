"""examples/hf_trainer/program.md over an imitation of a Hugging Face Trainer script.

The metric is read from the JSON file the Trainer writes (all_results.json, `result_file`),
the seed and the output folder are flags (`--seed {seed} --output_dir {out}`), the knobs are
field(default=...) values of its arguments dataclass, and checkpoint-N/ folders are dropped.
"""
import json

from tests.examples.conftest import example_repo
from tests.loop_helpers import cli_env, git_out, loop_state, nightshift


def test_a_night_over_a_trainer_script(tmp_path, data_root):
    repo = example_repo(tmp_path / "finetune", "hf_trainer")
    head = git_out(repo, "rev-parse", "HEAD")
    done = nightshift(repo, "run", "--tag", "hf", "--max-experiments", "1", env=cli_env(data_root))
    assert done.returncode == 0, done.stdout + done.stderr
    state = loop_state(repo, "hf")
    baseline = [r for r in state.runs if r.commit == head]
    assert all(r.ok and r.metrics["eval_accuracy"] > 0 for r in baseline)
    assert len({r.metric for r in baseline}) == len({r.seed for r in baseline})
    run_dir = repo / "results" / "hf" / "runs" / baseline[0].run_id
    assert json.loads((run_dir / "out" / "all_results.json").read_text())["eval_loss"] == baseline[0].metric
    assert not (run_dir / "out" / "checkpoint-300").exists()
    outputs = json.loads((run_dir / "provenance.json").read_text())["outputs"]
    assert set(outputs["dropped"]["out"]) == {"checkpoint-300/pytorch_model.bin", "checkpoint-300/trainer_state.json"}
    assert set(outputs["kept"]["out"]) == {"all_results.json"}     # a checkpoint folder goes whole
    (experiment,) = state.experiments.values()
    assert git_out(repo, "diff", "--name-only", head, experiment.commit) == "run_train.py"
    diff = git_out(repo, "diff", "-U0", head, experiment.commit)
    assert "field(default=" in diff and set(experiment.extra["params"]) <= {
        "learning_rate", "warmup_steps", "weight_decay", "lr_scheduler_type"}
