"""examples/yaml_config/program.md over an imitation of a Lightning-style script whose
settings live in configs/base.yaml.

The script stops at `--trainer.max_time {budget_s}` (a wall-clock budget), prints
`val_loss=` in its progress lines, needs OMP_NUM_THREADS from program.md's `env:`; the
researcher edits dotted YAML keys and nothing else of the file; `keep:` globs keep
hparams.yaml and drop the .ckpt files.
"""
import json

import yaml

from tests.examples.conftest import example_repo
from tests.loop_helpers import cli_env, git_out, loop_state, nightshift


def test_a_night_over_a_yaml_config(tmp_path, data_root):
    repo = example_repo(tmp_path / "lit", "yaml_config", budget="0.5s", grace="20s")
    head = git_out(repo, "rev-parse", "HEAD")
    config_before = (repo / "configs" / "base.yaml").read_text()
    done = nightshift(repo, "run", "--tag", "y", "--max-experiments", "1", env=cli_env(data_root))
    assert done.returncode == 0, done.stdout + done.stderr
    state = loop_state(repo, "y")
    baseline = [r for r in state.runs if r.commit == head]
    assert all(r.ok and r.metrics["epochs"] > 0 for r in baseline)
    run_dir = repo / "results" / "y" / "runs" / baseline[0].run_id
    log = (run_dir / "log.txt").read_text()
    assert "OMP_NUM_THREADS=1" in log and "Time limit reached" in log
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["determinism"]["budget_kind"] == "wall_clock"
    assert provenance["outputs"]["kept"]["out"] == {"lightning_logs/version_0/hparams.yaml":
                                                    (run_dir / "out/lightning_logs/version_0/hparams.yaml").stat().st_size}
    assert list(provenance["outputs"]["dropped"]["out"])[0].endswith(".ckpt")
    (experiment,) = state.experiments.values()
    assert git_out(repo, "diff", "--name-only", head, experiment.commit) == "configs/base.yaml"
    new = git_out(repo, "show", f"{experiment.commit}:configs/base.yaml") + "\n"
    before, after = yaml.safe_load(config_before), yaml.safe_load(new)
    changed = {f"{k}.{sub}" for k in ("model", "optimizer") for sub in before[k] if before[k][sub] != after[k][sub]}
    assert changed == set(experiment.extra["params"])
    assert len(new.splitlines()) == len(config_before.splitlines())
    kept_lines = [a for a, b in zip(config_before.splitlines(), new.splitlines()) if a == b]
    assert len(kept_lines) >= len(config_before.splitlines()) - 2        # comments and layout stay
