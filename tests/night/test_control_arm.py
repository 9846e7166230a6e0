"""program.md `control: 0.5`: an LLM night with its LLM-free control arm.

The Claude researcher (against the strict local fake of the Messages API) and the Optuna
researcher propose on the same harness, incumbent and seeds; the arm furthest below its share
proposes next; each arm learns only from its own experiments; the report compares the two per
run and per dollar.
"""
import optuna
import pytest

from agent.night.proposals import Researchers
from agent.night.session import build_session
from agent.program import ProgramError, load_program
from agent.researchers.optuna_researcher import STUDY_NAME
from agent.review.report import build_context
from agent.run.observer import QuietObserver
from tests.fakes.anthropic_api import FakeAnthropic, message, tool_use
from tests.loop_helpers import cli_env, loop_state, make_repo, nightshift, set_front_matter

SECRET = "sk-ant-control-arm-1234abcd"

# LEVEL is the knob both arms can move; OFFSET and SHIFT have no search space, so only Claude
# edits them (its second proposal is prepared while its first runs, so it edits another line).
SCRIPT = '''\
import json, os, random
LEVEL = 2.0         # search: float(1.0, 3.0)

OFFSET = 0.0

SHIFT = 0.0
value = LEVEL + OFFSET + SHIFT + random.Random(f"{os.environ['NIGHTSHIFT_SEED']}/{LEVEL}/{OFFSET}/{SHIFT}").gauss(0.0, 0.01)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
    json.dump({"val_bpb": value}, out)
'''

PROGRAM = '''\
---
target: level.py
protected: []
command: python level.py
prepare: null
budget: 1s
grace: 30s
seeds: {baseline: 3, screen: 1, max: 4}
sandbox: local
researcher: claude
control: 0.5
workers: 1
metric: val_bpb
---
LEVEL + OFFSET + SHIFT is the metric: lower is better.
'''
PREDICTION = {"direction": "improve", "expected_delta": -0.3, "interval": [-0.6, -0.05],
              "confidence": 0.8, "rationale": "the metric is LEVEL + OFFSET"}


def _claude_experiment(old: str, new: str) -> list:
    return [message([tool_use("edit_file", {"path": "level.py", "old_string": old, "new_string": new})]),
            message([tool_use("submit", {"description": f"{old} -> {new}", "hypothesis": "lower is better",
                                         "prediction": PREDICTION})])]


def test_an_llm_night_with_a_control_arm_shares_the_experiments_and_compares_them(tmp_path):
    repo = make_repo(tmp_path / "user", {"level.py": SCRIPT, "program.md": PROGRAM})
    replies = _claude_experiment("OFFSET = 0.0", "OFFSET = -0.5") + _claude_experiment("SHIFT = 0.0", "SHIFT = -0.2")
    env = cli_env(tmp_path / "data")
    env.update(ANTHROPIC_API_KEY=SECRET)
    with FakeAnthropic(replies, credentials=[SECRET]) as fake:
        env["ANTHROPIC_BASE_URL"] = fake.url
        done = nightshift(repo, "run", "--tag", "arms", "--max-experiments", "4", env=env)
        sent = list(fake.requests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "control arm: optuna proposes 50% of the experiments" in done.stdout

    state = loop_state(repo, "arms")
    by_arm: dict[str, list] = {}
    for experiment in state.experiments.values():
        by_arm.setdefault(experiment.researcher, []).append(experiment)
    assert sorted(by_arm) == ["claude", "optuna"]
    assert len(by_arm["claude"]) == len(by_arm["optuna"]) == 2        # half each, as asked
    assert len(sent) == 4                                              # two turns per Claude proposal
    assert all(e.usage is not None and e.usage.usd > 0 for e in by_arm["claude"])
    assert all(not (e.usage and e.usage.usd) for e in by_arm["optuna"])
    # each arm proposed against the incumbent of its time, on the same seeds scheme
    assert {r.seed for e in by_arm["claude"] for r in e.runs} & {r.seed for e in by_arm["optuna"] for r in e.runs}
    # the control arm's study lives apart from the main researcher's state, and only holds its own trials
    study = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{repo}/results/arms/researcher/control/optuna.db")
    assert len([t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]) == 2

    arms = {row["researcher"]: row for row in build_context(repo / "results" / "arms")["arms"]}
    assert set(arms) == {"claude", "optuna"}
    assert arms["claude"]["runs"] == sum(len(e.runs) for e in by_arm["claude"])
    assert arms["claude"]["keeps"] >= 1 and arms["claude"]["progress"] > 0.3   # OFFSET -0.5 kept
    assert arms["claude"]["per_usd"] is not None and arms["optuna"]["per_usd"] is None
    report = nightshift(repo, "report", "--tag", "arms", env=env)
    assert report.returncode == 0, report.stdout + report.stderr
    html = (repo / "results" / "arms" / "report.html").read_text()
    assert '<h2 id="arms">Arms</h2>' in html


class _Named:
    def __init__(self, name):
        self.name = name

    def propose(self, context):
        raise AssertionError("not called: the threads are never started here")

    def observe(self, experiment, outcome):
        pass


def test_the_arm_furthest_below_its_share_proposes_next():
    arms = Researchers([(_Named("claude"), 0.75), (_Named("optuna"), 0.25)], deliver=lambda r: None)
    proposed = {"claude": 0, "optuna": 0}
    order = []
    for _ in range(40):
        arm = arms.next_arm(proposed)
        proposed[arm.name] += 1
        order.append(arm.name)
    assert proposed == {"claude": 30, "optuna": 10}
    assert order[:4].count("optuna") == 1          # the control arm starts early, not at the end
    arms.stop()


@pytest.mark.parametrize("value, message", [("1.5", "expected a share in [0, 0.9], like 0.25"),
                                            ("lots", "expected a number")])
def test_a_bad_control_share_names_the_file_the_field_and_the_fix(tmp_path, value, message):
    path = tmp_path / "program.md"
    path.write_text(set_front_matter(PROGRAM, control=value))
    with pytest.raises(ProgramError) as raised:
        load_program(path)
    assert "program.md:" in str(raised.value) and "'control'" in str(raised.value)
    assert message in str(raised.value)


def test_a_control_arm_needs_an_llm_researcher_beside_it(tmp_path):
    repo = make_repo(tmp_path / "user", {"level.py": SCRIPT,
                                         "program.md": PROGRAM.replace("researcher: claude", "researcher: optuna")})
    program = load_program(repo / "program.md")
    with pytest.raises(ValueError, match="control: 0.5 .* researcher is optuna already"):
        build_session(program, "x", researcher="optuna", sandbox="local", observer=QuietObserver())
