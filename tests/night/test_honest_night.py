"""On a pure-noise night, kept commits are shown at their fresh-seed values: results.tsv,
`status` and the report, through the real CLI.

The script's value is noise drawn from (seed, its own source): deterministic, different for
every commit, and with no real effect anywhere, so every keep is a false keep and its
selecting runs are lucky by construction. A lax alpha makes keeps happen in a short night.
"""
import csv
import statistics

import pytest

from agent.review.report import build_context
from tests.loop_helpers import cli_env, loop_state, make_repo, nightshift

NOISE = '''\
import hashlib, json, os, random
WIDTH = 64          # search: int(16, 256)
SCALE = 1.0         # search: log(0.1, 10.0)
source = open(__file__, "rb").read()
rng = random.Random(f"{os.environ['NIGHTSHIFT_SEED']}-{hashlib.sha256(source).hexdigest()}")
value = 2.0 + rng.gauss(0.0, 0.05)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
    json.dump({"val_bpb": value}, out)
'''

PROGRAM = '''\
---
target: noise.py
protected: []
command: python noise.py
prepare: null
budget: 5s
grace: 30s
alpha: 0.5
seeds: {baseline: 3, screen: 1, max: 2}
sandbox: local
researcher: optuna
metric: val_bpb
---
Pure noise: nothing here can be improved.
'''


@pytest.mark.slow
def test_kept_commits_of_a_pure_noise_night_are_shown_at_their_fresh_seed_values(tmp_path):
    repo = make_repo(tmp_path / "user", {"noise.py": NOISE, "program.md": PROGRAM})
    done = nightshift(repo, "run", "--tag", "pn", "--max-experiments", "8",
                      env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    state = loop_state(repo, "pn")
    kept = state.kept()
    assert kept, "a lax alpha on pure noise keeps something"
    with open(repo / "results" / "pn" / "results.tsv", newline="") as handle:
        rows = {row["commit"]: row for row in csv.DictReader(handle, delimiter="\t")}
    for experiment in kept:
        fresh = state.reference(experiment.commit)
        assert len(fresh) >= 3, "every kept commit is measured on its fresh seeds before the stop"
        shown = float(rows[experiment.commit[:7]]["val_bpb"])
        assert shown == pytest.approx(statistics.fmean(fresh.values()), abs=1e-6)
        assert shown != pytest.approx(experiment.mean(), abs=1e-6)     # never the selecting mean
    incumbent = statistics.fmean(state.reference(state.incumbent).values())
    assert f"incumbent {state.incumbent[:8]}  val_bpb {incumbent:.4f}" in done.stdout
    context = build_context(repo / "results" / "pn")
    assert context["best"]["mean"] == pytest.approx(incumbent)
    if state.incumbent != state.base_commit:
        improvement = context["improvement"]
        lo, hi = improvement["interval"]
        assert lo <= improvement["value"] <= hi and improvement["paired"] == 3
