"""examples/makemore/program.md over karpathy/makemore as shipped (tests/fixtures/makemore, byte
for byte), through the real CLI: a repository nobody here wrote, whose settings are argparse
flags and whose run length is a step count.

The researcher changes the flags' defaults and nothing else. A deeper, wider model wins by
training longer: under compute: equal it is not kept, and its decision says what it cost.
`--n-embd2` is a flag the transformer never reads: the run is the incumbent's, to the last
digit, and the night records no_effect instead of a discard with an invented effect.
"""
import json
import re
from pathlib import Path

from agent.record.events import Verdict
from tests.loop_helpers import PROJECT, cli_env, git_out, loop_state, make_repo, nightshift, set_front_matter
from tests.needs import needs

MAKEMORE = PROJECT / "tests" / "fixtures" / "makemore"


def makemore_repo(root: Path, **front_matter: str) -> Path:
    """A user's makemore checkout with the example's program.md at its root."""
    program = set_front_matter((PROJECT / "examples" / "makemore" / "program.md").read_text(), **front_matter)
    files = {name: (MAKEMORE / name).read_text() for name in ("makemore.py", "names.txt", "LICENSE")}
    return make_repo(root, {**files, "program.md": program})


def flag_default(flag: str, old: str, new: str) -> list[str]:
    """A scripted edit of one argparse default (the line as makemore writes it)."""
    line = next(line for line in (MAKEMORE / "makemore.py").read_text().splitlines()
                if f"add_argument('{flag}'" in line)
    return [line, line.replace(f"default={old},", f"default={new},")]


@needs("makemore")
def test_a_night_on_makemore_refuses_bought_compute_and_names_an_inert_flag(tmp_path):
    repo = makemore_repo(
        tmp_path / "makemore", sandbox="local", researcher="scripted",
        seeds="{baseline: 2, screen: 1, max: 2, repeat: 0}", early_stop="off",   # its own test, below
        knobs="{n_layer: 'int(2, 8)', n_embd: 'choice(32, 64, 128)', n_embd2: 'choice(32, 64, 128)', "
              "learning_rate: 'log(1e-4, 1e-2)'}")
    head = git_out(repo, "rev-parse", "HEAD")
    script = tmp_path / "proposals.json"
    script.write_text(json.dumps([
        {"replace": [flag_default("--n-layer", "4", "8"), flag_default("--n-embd", "64", "128")],
         "description": "twice as deep and twice as wide"},
        {"replace": [flag_default("--n-embd2", "64", "128")], "description": "wider n_embd2"},
        {"replace": [flag_default("--learning-rate", "5e-4", "1e-3")], "description": "learning rate 1e-3"},
    ]))
    done = nightshift(repo, "run", "--tag", "mm", "--script", str(script), "--max-experiments", "3",
                      env=cli_env(tmp_path / "data"), timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    state = loop_state(repo, "mm")
    made = {d.id: d for d in state.decisions}
    bigger, inert, lr = (state.experiments[f"e000{i}"] for i in range(1, 4))

    # The seed reached makemore through its --seed flag, and the parameter count its print.
    baseline = [r for r in state.runs if r.commit == head]
    assert len({r.metric for r in baseline}) == len(baseline) >= 2
    assert baseline[0].metrics["params"] == 204544 and baseline[0].metrics["steps"] == 500

    # The bigger model: more parameters, several times the run time, not kept.
    assert bigger.verdict == Verdict.DISCARD and made["e0001"].evidence == {"refused": "compute"}
    cost = made["e0001"].compute
    assert cost.over and cost.ratio > 2 and cost.candidate_params == 1595392
    assert "a win bought with compute" in made["e0001"].reason or cost.ratio > cost.allowed

    # --n-embd2 changes nothing a transformer computes: the incumbent's exact value.
    assert inert.verdict == Verdict.NO_EFFECT, made["e0002"].reason
    assert made["e0002"].decision is None

    # An honest change costs what the incumbent costs, and is decided by the keep rule.
    assert lr.verdict in (Verdict.KEEP, Verdict.DISCARD, Verdict.INCONCLUSIVE)
    assert not made["e0003"].compute.over and made["e0003"].evidence == {}

    # Only the flags' defaults changed; the user's checkout is untouched.
    for experiment in (bigger, inert, lr):
        diff = git_out(repo, "diff", "-U0", head, experiment.commit, "--", "makemore.py")
        changed = [l for l in diff.splitlines() if l[:1] in "+-" and l[:3] not in ("+++", "---")]
        assert changed and all("parser.add_argument('--" in l for l in changed), changed
    assert git_out(repo, "rev-parse", "HEAD") == head and git_out(repo, "status", "--porcelain") == ""
    out = " ".join(done.stdout.split())
    assert "e0002 NO_EFFECT" in out                                   # the console says it, and what
    assert re.search(r"e0003 \w+ .*; compute \d\.\d\dx \(\d+\.\d s vs \d+\.\d s\)", out)   # it cost


@needs("makemore")
def test_makemores_progress_lines_are_its_curve_and_a_clear_loser_stops_early(tmp_path):
    # makemore prints `step N | loss X | step time Yms` every ten steps and no clock of its own:
    # its curve is placed by its steps over the incumbent's, and a learning rate a hundred times
    # too small (a wider range than the example's, so that the loser is beyond doubt) is far
    # behind and not closing at the first checkpoint that can tell.
    repo = makemore_repo(
        tmp_path / "makemore", sandbox="local", researcher="scripted",
        seeds="{baseline: 2, screen: 1, max: 2, repeat: 0}", knobs="{learning_rate: 'log(1e-6, 1e-2)'}")
    script = tmp_path / "proposals.json"
    script.write_text(json.dumps([{"replace": flag_default("--learning-rate", "5e-4", "5e-6"),
                                   "description": "learning rate 5e-6"}]))
    done = nightshift(repo, "run", "--tag", "mm", "--script", str(script), "--max-experiments", "1",
                      env=cli_env(tmp_path / "data"), timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    state = loop_state(repo, "mm")
    curves = [r.curve for r in state.runs if r.ok]
    assert curves and all(c is not None and len(c.points) >= 20 for c in curves)
    assert all(p.loss is not None and p.step is not None for c in curves for p in c.points)
    assert not state.unpaired, [u.reason for u in state.unpaired.values()]
    loser = state.experiments["e0001"]
    assert loser.stopped_early is not None, loser.decision
    assert loser.verdict == Verdict.DISCARD and loser.decision.decision.rule == "early_stop"
    assert loser.stopped_early.reached < 0.8 and loser.stopped_early.saved_s > 0
    assert "stopped early" in done.stdout


@needs("makemore")
def test_check_names_makemores_dead_flag_and_proves_the_others_live(tmp_path):
    """`--n-embd2` only sizes the MLP, RNN and BoW models: for the transformer it is dead. The
    probe sees through makemore's `print(vars(args))`, which echoes every flag's value."""
    repo = makemore_repo(tmp_path / "makemore", sandbox="local",
                         knobs="{n_layer: 'int(2, 8)', n_embd2: 'choice(32, 64, 128)', "
                               "learning_rate: 'log(1e-4, 1e-2)'}")
    done = nightshift(repo, "check", env=cli_env(tmp_path / "data"), timeout=600)
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, out[-3000:]
    assert "FAIL knobs live: dead: n_embd2: changing n_embd2 64 -> 32 or 128 changed nothing" in out
    assert "n_layer (4 -> 8): output line" in out and "number of parameters: 0.20M" in out
    assert "learning_rate (5e-4 -> 0.01): output line" in out and "loss" in out
