"""`nightshift ablate`: leave one out at full scale, on a real scripted night.

The toy's metric is arithmetic in three knobs plus seeded noise: A and B help at any budget,
C helps only at the night's short budget (a proxy win that is inert at full scale). The real
loop keeps all three; the ablation, at the full-scale budget, must find A and B matter (their
intervals exclude 0) and C does not (its interval covers 0), with the whole gain explained
by the sum (the interaction's interval covers 0)."""
import json
import subprocess
import sys

import pytest

from agent.record.events import (AblationChange, AblationPlanned, AblationRun, AblationSummary,
                                 DecisionMade, ExperimentProposed, LoopStarted, Verdict)
from agent.record.ledger import Ledger, read_events
from agent.record.records import Direction
from agent.record.state import fold
from agent.review.ablate import ABLATION_SEEDS, AblationError, plan_variants
from agent.review.contributions import estimate, holm, leave_one_out
from agent.review.report import build_context, write_report
from agent.workspace.repo import Workspace
from tests.loop_helpers import cli_env, git_out, make_repo, nightshift

pytestmark = pytest.mark.slow

TOY = """import json, os, random

A = 0    # helps by 0.3 at any budget
B = 0    # helps by 0.2 at any budget
C = 0    # helps by 0.2 below a 2 s budget only: inert at full scale

seed = int(os.environ["NIGHTSHIFT_SEED"])
budget = float(os.environ["NIGHTSHIFT_BUDGET_S"])
noise = random.Random(f"{seed}|{A}|{B}|{C}").gauss(0, 0.01)
score = 1.0 - 0.3 * A - 0.2 * B - (0.2 * C if budget < 2 else 0.0) + noise
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as f:
    json.dump({"score": score}, f)
print("score:", score)
"""

PROGRAM = """---
target: train.py
protected: []
command: python train.py
prepare: null
metric: score
direction: minimize
budget: 1s
grace: 60s
sandbox: local
researcher: scripted
seeds: {baseline: 3, screen: 1, max: 4}
full_scale: {budget: 3s, seeds: 4}
---
A toy: three knobs, one of which only helps at the proxy budget.
"""

SCRIPT = [{"replace": ["A = 0 ", "A = 1 "], "description": "A on"},
          {"replace": ["B = 0 ", "B = 1 "], "description": "B on"},
          {"replace": ["C = 0 ", "C = 1 "], "description": "C on"}]


@pytest.fixture(scope="module")
def ablated(tmp_path_factory):
    root = tmp_path_factory.mktemp("ablate")
    repo = make_repo(root / "repo", {"program.md": PROGRAM, "train.py": TOY})
    (root / "proposals.json").write_text(json.dumps(SCRIPT))
    env = cli_env(root / "data")
    night = nightshift(repo, "run", "--tag", "toy", "--max-experiments", "3",
                       "--script", str(root / "proposals.json"), env=env)
    assert night.returncode == 0, night.stdout + night.stderr
    state = fold(read_events(repo / "results" / "toy"))
    assert [e.verdict for e in state.experiments.values()] == [Verdict.KEEP] * 3, night.stdout
    done = nightshift(repo, "ablate", "--tag", "toy", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"repo": repo, "out": done.stdout, "events": list(read_events(repo / "results" / "toy")),
            "state": state}


def test_the_real_changes_matter_and_the_inert_one_does_not(ablated):
    changes = {e.experiment: e for e in ablated["events"] if isinstance(e, AblationChange)}
    assert set(changes) == {"e0001", "e0002", "e0003"}
    for experiment, size in (("e0001", 0.3), ("e0002", 0.2)):
        change = changes[experiment]
        assert change.status == "measured" and change.n == 4
        assert change.interval[0] > 0, f"{experiment} matters: {change}"
        assert change.contribution == pytest.approx(size, abs=0.03)
        assert change.p_value < 0.01
    inert = changes["e0003"]
    assert inert.interval[0] <= 0 <= inert.interval[1], f"C is inert at full scale: {inert}"
    assert inert.p_value > 0.05 and inert.p_adjusted >= inert.p_value
    summary = next(e for e in ablated["events"] if isinstance(e, AblationSummary))
    assert summary.full_gain == pytest.approx(0.5, abs=0.03)
    assert summary.sum_contributions == pytest.approx(summary.full_gain, abs=0.05)
    assert summary.interaction_interval[0] <= 0 <= summary.interaction_interval[1]
    assert summary.measured == ("e0001", "e0002", "e0003") and summary.not_measured == ()
    assert summary.budget_s == 3.0 and len(summary.seeds) == 4
    assert "not distinguishable from 0" in ablated["out"] and "helps" in ablated["out"]


def test_every_variant_runs_on_the_same_fresh_seeds_and_is_pinned(ablated):
    repo, state = ablated["repo"], ablated["state"]
    runs = [e for e in ablated["events"] if isinstance(e, AblationRun)]
    assert len(runs) == 5 * 4 and all(r.status.value == "ok" for r in runs)
    fresh = [ABLATION_SEEDS + i for i in range(4)]
    assert not set(fresh) & {r.seed for r in state.runs}   # never a seed of the night
    for variant in ("incumbent", "base", "e0001", "e0002", "e0003"):
        assert sorted(r.seed for r in runs if r.variant == variant) == fresh
    planned = next(e for e in ablated["events"] if isinstance(e, AblationPlanned))
    assert planned.incumbent == state.incumbent and planned.base == state.base_commit
    for variant in planned.variants:
        ref = f"refs/nightshift/toy/ablations/{planned.ablation_id}-{variant['experiment']}"
        sha = git_out(repo, "rev-parse", ref)
        assert sha == variant["variant_commit"]
        assert git_out(repo, "rev-parse", f"{sha}^") == state.incumbent
        source = git_out(repo, "show", f"{sha}:train.py")
        knob = {"e0001": "A", "e0002": "B", "e0003": "C"}[variant["experiment"]]
        for name in "ABC":   # the incumbent with exactly that one change reverted
            assert f"\n{name} = {0 if name == knob else 1} " in source
    # the runs live in the ablation's own ledger, never among the night's measurements
    assert not [r for r in fold(read_events(repo / "results" / "toy")).runs if r.role == "ablation"]


def test_the_report_shows_the_ablation(ablated, tmp_path):
    context = build_context(ablated["repo"] / "results" / "toy")
    (ablation,) = context["ablations"]
    assert [row["experiment"] for row in ablation["changes"]] == ["e0001", "e0002", "e0003"]
    assert [row["matters"] for row in ablation["changes"]] == ["helps", "helps", "no"]
    page = write_report(ablated["repo"] / "results" / "toy", out=tmp_path / "r.html").html.read_text()
    assert 'id="ablation"' in page and "interaction" in page and 'href="#x-e0003"' in page


def test_a_revert_that_conflicts_is_reported_not_guessed(tmp_path):
    repo = make_repo(tmp_path / "repo", {"program.md": PROGRAM, "train.py": TOY})
    workspace = Workspace.open(repo, "c", tmp_path / "wt")
    base = workspace.head()
    first = workspace.commit_candidate("train.py", TOY.replace("A = 0 ", "A = 1 "), "A 1", parent=base)
    second = workspace.commit_candidate("train.py", TOY.replace("A = 0 ", "A = 2 "), "A 2", parent=first)
    third = workspace.commit_candidate("train.py", TOY.replace("A = 0 ", "A = 2 ").replace("B = 0 ", "B = 1 "),
                                       "B 1", parent=second)
    ledger = Ledger(tmp_path / "results")
    ledger.append(LoopStarted(tag="c", base_commit=base))
    for i, (commit, parent) in enumerate(((first, base), (second, first), (third, second)), start=1):
        ledger.append(ExperimentProposed(id=f"e{i:04d}", commit=commit, parent=parent,
                                         description=f"change {i}"))
        ledger.append(DecisionMade(id=f"e{i:04d}", commit=commit, incumbent=parent,
                                   verdict=Verdict.KEEP))
    variants = {v.name: v for v in plan_variants(ledger.state, workspace, "train.py", "t1")}
    assert variants["e0001"].status == "conflict" and variants["e0001"].commit is None
    assert "conflicts" in variants["e0001"].reason
    assert variants["e0002"].status == "planned"   # A 2 -> 1, B stays 1
    reverted = workspace.read("train.py", variants["e0002"].commit)
    assert "\nA = 1 " in reverted and "\nB = 1 " in reverted
    assert "\nA = 2 " in workspace.read("train.py", variants["e0003"].commit)
    assert "\nB = 0 " in workspace.read("train.py", variants["e0003"].commit)
    empty = Ledger(tmp_path / "none")
    empty.append(LoopStarted(tag="n", base_commit=base))
    with pytest.raises(AblationError, match="no kept commit"):
        plan_variants(empty.state, workspace, "train.py", "t2")
    workspace.close()


def test_the_statistics_pair_on_seeds_and_show_what_the_sum_misses():
    seeds = range(6)
    jitter = [0.01, -0.02, 0.015, -0.005, 0.0, 0.012]
    incumbent = {s: 1.0 + jitter[s] for s in seeds}
    base = {s: 1.5 + jitter[s] for s in seeds}          # gain 0.5 on every seed, minimised
    # two changes that each do the whole job: removing either alone costs nothing
    without = {"x": {s: incumbent[s] + 0.001 * (-1) ** s for s in seeds},
               "y": {s: incumbent[s] - 0.001 * (-1) ** s for s in seeds}}
    found = leave_one_out(incumbent, base, without, Direction.MINIMIZE)
    assert found.gain.value == pytest.approx(0.5) and found.gain.excludes_zero
    assert not found.contributions["x"].excludes_zero and not found.contributions["y"].excludes_zero
    assert found.interaction.value == pytest.approx(0.5) and found.interaction.excludes_zero
    maximised = leave_one_out(base, incumbent, {}, Direction.MAXIMIZE)
    assert maximised.gain.value == pytest.approx(0.5)
    assert estimate({0: 1.0}).interval is None and estimate({}).value is None
    assert estimate({0: 0.2, 1: 0.2}).interval == (0.2, 0.2)
    assert holm([0.01, None, 0.04, 0.03]) == [0.03, None, 0.06, 0.06]


def test_cli_ablate_refuses_a_tag_without_keeps(tmp_path):
    repo = make_repo(tmp_path / "repo", {"program.md": PROGRAM, "train.py": TOY})
    Ledger(repo / "results" / "none").append(LoopStarted(tag="none", base_commit=git_out(repo, "rev-parse", "HEAD")))
    done = subprocess.run([sys.executable, "-m", "agent.cli", "ablate", "--tag", "none"], cwd=repo,
                          env=cli_env(tmp_path / "data"), capture_output=True, text=True)
    assert done.returncode == 1 and "no kept commit" in done.stderr
    assert not (repo / "results" / "none" / "ablations").exists() or \
        not any((repo / "results" / "none" / "ablations").iterdir())
