"""Compute is part of the comparison, and a change that does nothing is said: a night on a
step-count script (it runs its work, however long that takes, never looking at the budget).

WIDTH buys quality with time (a bigger model that trains longer); LR is a free win; UNUSED
is a constant the script never reads. Under the default `compute: equal` the bigger model's
win is not kept and says what it cost; the unused constant's runs equal the incumbent's on
the same seeds: `no_effect`, not a discard with an invented effect; every decision records
the candidate's run time against the incumbent's.
"""
import json

import pytest

from agent.record.events import Verdict
from tests.loop_helpers import cli_env, loop_state, make_repo, nightshift

TRAIN = '''import json, math, os, random, sys, time
WIDTH = 64
LR = 0.01
UNUSED = 1
seed = int(sys.argv[1])
time.sleep(1.0 * WIDTH / 64)          # the work: a wider model takes longer, step for step
rng = random.Random(seed)
loss = 2.0 - 0.2 * math.log2(WIDTH / 64) + 40 * (LR - 0.03) ** 2 + rng.gauss(0, 0.002)
print(f"params: {WIDTH * 1000}")
print(f"val_loss: {loss:.6f}")
'''
PROGRAM = """---
target: train.py
command: python train.py {seed}
prepare: null
evaluate: null
metric: val_loss
metric_pattern: 'val_loss: ([0-9.]+)'
metrics_pattern: 'params: (?P<params>[0-9]+)'
budget: 30s
grace: 20s
seeds: {baseline: 2, screen: 2, max: 3}
early_stop: off
sandbox: local
researcher: scripted
---
Lower val_loss.
"""


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "user", {"train.py": TRAIN, "program.md": PROGRAM})


def test_a_win_bought_with_compute_is_refused_and_an_inert_change_is_no_effect(repo, tmp_path):
    script = tmp_path / "proposals.json"
    script.write_text(json.dumps([
        {"replace": ["WIDTH = 64", "WIDTH = 256"], "description": "a model four times wider"},
        {"replace": ["UNUSED = 1", "UNUSED = 2"], "description": "a constant nothing reads"},
        {"replace": ["LR = 0.01", "LR = 0.03"], "description": "a better learning rate"},
    ]))
    done = nightshift(repo, "run", "--tag", "c1", "--script", str(script), "--max-experiments", "3",
                      env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = " ".join(done.stdout.split())
    state = loop_state(repo, "c1")
    wider, unused, lr = (state.experiments[f"e000{i}"] for i in range(1, 4))
    made = {d.id: d for d in state.decisions}

    # The wider model wins by 0.4 (200 noise sds), in four times the incumbent's time: refused.
    assert wider.verdict == Verdict.DISCARD, made["e0001"].reason
    cost = made["e0001"].compute
    assert cost is not None and cost.over and cost.ratio > 3 and cost.allowed < cost.ratio
    assert cost.candidate_params == 256_000 and cost.incumbent_params == 64_000
    assert made["e0001"].evidence == {"refused": "compute"}
    assert "not kept: a win bought with compute" in made["e0001"].reason   # the rule would have kept it
    assert "compute: equal allows" in made["e0001"].reason and made["e0001"].decision.verdict == Verdict.KEEP
    assert "compute 3." in out or "compute 4." in out     # the console line shows what it cost

    # The unused constant: the incumbent's exact values on the same seeds.
    assert unused.verdict == Verdict.NO_EFFECT and made["e0002"].decision is None
    assert "no effect: its runs equal the incumbent's" in made["e0002"].reason

    # The free win costs what the incumbent costs: compute within its allowance.
    assert made["e0003"].compute is not None and not made["e0003"].compute.over
    assert made["e0003"].compute.ratio < 1.5
    assert state.incumbent != wider.commit


def test_compute_free_lets_a_keep_buy_compute(repo, tmp_path):
    script = tmp_path / "proposals.json"
    script.write_text(json.dumps([
        {"replace": ["WIDTH = 64", "WIDTH = 192"], "description": "a model three times wider"}]))
    done = nightshift(repo, "run", "--tag", "c2", "--script", str(script), "--max-experiments", "1",
                      "--compute", "free", env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    state = loop_state(repo, "c2")
    made = state.decisions[-1]
    assert made.verdict == Verdict.KEEP, made.reason
    assert made.compute.allowed is None and made.compute.ratio > 2
