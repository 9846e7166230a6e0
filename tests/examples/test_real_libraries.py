"""The examples against the real libraries, not imitations: examples/hf_trainer's run_train.py
on the real `transformers` Trainer, and examples/yaml_config's train.py, a real torch script
driven by its YAML file. Each runs a night of 3 experiments through the real CLI with the
example's program.md as shipped (only the test's seeds, and for the YAML script a short
wall-clock budget).

transformers is an optional extra (`pip install -e '.[hf]'`): the Trainer's night is marked
`needs("hf")` (tests/needs.py), so CI, which requires every kind, fails where it is missing.
"""
import json
import re

import yaml

from tests.examples.conftest import FAST
from tests.loop_helpers import PROJECT, cli_env, git_out, loop_state, make_repo, nightshift, set_front_matter, seeds_reach_the_metric
from tests.needs import needs

def example(root, name: str, files: tuple[str, ...], **front_matter: str):
    folder = PROJECT / "examples" / name
    program = set_front_matter((folder / "program.md").read_text(), **{**FAST, **front_matter})
    return make_repo(root, {"program.md": program, **{f: (folder / f).read_text() for f in files}})


@needs("hf")
def test_a_night_over_the_real_hugging_face_trainer(tmp_path):
    repo = example(tmp_path / "clm", "hf_trainer", ("run_train.py",))
    head = git_out(repo, "rev-parse", "HEAD")
    done = nightshift(repo, "run", "--tag", "hf", "--max-experiments", "3", env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "ok seeds change the result: observed to vary" in out and "step-budgeted" in out
    # the Trainer's log dicts are its curve, on the steps of its progress bar: early stopping
    # compares them (transformers 4.4x+ prints their numbers as strings)
    assert "ok progress lines read:" in out and "placed on the steps it announced" in out
    state = loop_state(repo, "hf")
    baseline = [r for r in state.runs if r.commit == head and r.role.value == "reference"]
    assert len(baseline) >= 2 and all(r.ok for r in baseline)
    for run in baseline:     # 97-98 steps, a loss line every 20: four points, falling
        assert run.curve.placed == "steps" and 90 <= run.curve.total_steps <= 100, run.curve
        losses = [p.loss for p in run.curve.points]
        assert len(losses) == 4 and losses[-1] < losses[0] and run.curve.points[-1].fraction < 0.9
    assert seeds_reach_the_metric(baseline)           # set_seed(training_args.seed)
    run_dir = repo / "results" / "hf" / "runs" / baseline[0].run_id
    results = json.loads((run_dir / "out" / "all_results.json").read_text())   # the Trainer's own file
    assert results["eval_loss"] == baseline[0].metric and results["epoch"] == 1.0
    assert 0 < baseline[0].metric < 5.6                                 # below ln(256): it learned
    log = (run_dir / "log.txt").read_text()
    assert re.search(rf"seed={baseline[0].seed}\b", log) and "***** eval metrics *****" in log
    assert len(state.experiments) == 3
    knobs = {"learning_rate", "warmup_steps", "weight_decay", "lr_scheduler_type"}
    for experiment in state.experiments.values():
        assert experiment.commit, experiment.invalid_reason
        assert git_out(repo, "diff", "--name-only", head, experiment.commit) == "run_train.py"
        diff = git_out(repo, "diff", "-U0", head, experiment.commit)
        changed = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        assert changed and all("= field(default=" in line for line in changed), changed
        assert set(experiment.extra["params"]) <= knobs
        runs = [r for r in state.runs if r.experiment == experiment.id]
        assert runs and all(r.ok for r in runs), [r.reason for r in runs]


def test_a_night_over_a_real_yaml_driven_script(tmp_path):
    """examples/yaml_config: torch trains a byte model for the budget (--trainer.max_time
    {budget_s}), the researcher edits dotted YAML keys, keep: keeps hparams.yaml and the CSV."""
    files = ("train.py", "configs/base.yaml")
    repo = example(tmp_path / "lit", "yaml_config", files, budget="3s", grace="30s")
    head = git_out(repo, "rev-parse", "HEAD")
    config_before = (repo / "configs" / "base.yaml").read_text()
    done = nightshift(repo, "run", "--tag", "y", "--max-experiments", "3", env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    state = loop_state(repo, "y")
    baseline = [r for r in state.runs if r.commit == head and r.role.value == "reference"]
    # it trained: its progress lines were read (on busy cores a 3-s run may not leave epoch 0)
    # and its loss fell below a uniform guess over bytes (ln 256 = 5.55)
    assert len(baseline) >= 2 and all(r.ok and "epochs" in r.metrics for r in baseline)
    assert all(r.metrics["train_loss"] < 5.5 for r in baseline), [r.metrics for r in baseline]
    assert seeds_reach_the_metric(baseline) and all(r.metric < 5.6 for r in baseline)
    run_dir = repo / "results" / "y" / "runs" / baseline[0].run_id
    log = (run_dir / "log.txt").read_text()
    assert f"Seed set to {baseline[0].seed}" in log and "Time limit reached" in log
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["determinism"]["budget_kind"] == "wall_clock"
    kept = provenance["outputs"]["kept"]["out"]
    assert set(kept) == {"lightning_logs/version_0/hparams.yaml", "lightning_logs/version_0/metrics.csv"}
    assert [p for p in provenance["outputs"]["dropped"]["out"] if p.endswith(".ckpt")]
    assert len(state.experiments) == 3
    before = yaml.safe_load(config_before)
    for experiment in state.experiments.values():
        assert experiment.commit, experiment.invalid_reason
        assert git_out(repo, "diff", "--name-only", head, experiment.commit) == "configs/base.yaml"
        after = yaml.safe_load(git_out(repo, "show", f"{experiment.commit}:configs/base.yaml"))
        # what it changed is against its parent, the incumbent it was proposed on (after a keep,
        # not the night's first commit: the kept change is in the parent too)
        parent = yaml.safe_load(git_out(repo, "show", f"{experiment.parent}:configs/base.yaml"))
        changed = {f"{k}.{sub}" for k in ("model", "optimizer") for sub in parent[k] if parent[k][sub] != after[k][sub]}
        assert changed == set(experiment.extra["params"]) and changed
        assert {k: v for k, v in after.items() if k not in ("model", "optimizer")} == \
            {k: v for k, v in before.items() if k not in ("model", "optimizer")}
