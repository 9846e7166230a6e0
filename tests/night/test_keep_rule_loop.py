"""The keep rule at loop level: a training script whose metric is pure noise.

Every candidate is a no-op (its knobs change nothing), so every keep is a false keep.
The single-run rule ("keep when one run beats the best so far") would keep the records
of a noisy sequence (about ln N of N); Nightshift's rule must keep nothing or almost.
"""
import pytest

from tests.loop_helpers import cli_env, loop_state, make_repo, nightshift

NOISE_SCRIPT = '''\
import json, os, random

# These knobs do nothing at all: any "improvement" the loop keeps is noise.
WIDTH = 64          # search: int(16, 256)
SCALE = 1.0         # search: log(0.1, 10.0)
MODE = "a"          # search: choice("a", "b", "c")

# Noise drawn from the seed and the knobs: runs look independent (every setting draws anew),
# yet the night is the same every time, so this test cannot pass or fail by luck.
value = 2.0 + random.Random(f"{os.environ['NIGHTSHIFT_SEED']}/{WIDTH}/{SCALE}/{MODE}").gauss(0.0, 0.05)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
    json.dump({"val_bpb": value}, out)
print("---")
print(f"val_bpb: {value:.6f}")
'''

PROGRAM = '''\
---
target: noise.py
protected: []
command: python noise.py
prepare: null
budget: 1s
grace: 30s
seeds: {baseline: 4, screen: 1, max: 6}
sandbox: local
researcher: optuna
metric: val_bpb
---
Pure noise: nothing here can be improved.
'''

EXPERIMENTS = 30


def single_run_keeps(state) -> int:
    """What autoresearch's rule would have kept: first runs that beat the best so far."""
    best = state.reference(state.base_commit)[min(state.reference(state.base_commit))]
    keeps = 0
    for experiment in state.experiments.values():
        if not experiment.runs:
            continue
        first = experiment.runs[0].metric
        if first is not None and first < best:
            best, keeps = first, keeps + 1
    return keeps


@pytest.mark.slow
def test_pure_noise_keeps_almost_nothing(tmp_path):
    repo = make_repo(tmp_path / "user", {"noise.py": NOISE_SCRIPT, "program.md": PROGRAM})
    done = nightshift(repo, "run", "--tag", "noise", "--max-experiments", str(EXPERIMENTS),
                      env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    state = loop_state(repo, "noise")
    decided = [e for e in state.experiments.values() if e.decided]
    assert len(decided) == EXPERIMENTS
    kept = len(state.kept())
    naive = single_run_keeps(state)
    print(f"pure noise, {EXPERIMENTS} candidates: nightshift kept {kept}, "
          f"the single-run rule would have kept {naive}")
    assert kept <= 1
    assert naive >= kept
    # Every decision carries its evidence.
    for experiment in decided:
        decision = experiment.decision.decision
        assert decision.p_value is not None and decision.interval is not None
        assert set(decision.candidate_values) <= set(decision.seeds)
