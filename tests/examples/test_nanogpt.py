"""examples/nanogpt/program.md over an imitation of nanoGPT, through the real CLI, unchanged.

The metric comes from `step N: train loss A, val loss B` in stdout, the seed reaches a
script that seeds itself with 1337 through a `{seed}` placeholder, the data is the user's
git-ignored data/shakespeare_char/ mounted where train.py reads it, the Optuna researcher
edits lower-case assignments of the config file and nothing else, and checkpoints are not
kept. Then the same script with the seed left out: the loop stops before any candidate.
"""
import json
import re


from tests.examples.conftest import example_repo
from tests.loop_helpers import cli_env, git_out, loop_state, nightshift, seeds_reach_the_metric

NO_SEED = ("python train.py config/train_shakespeare_char.py --device=cpu --compile=False "
           "--max_iters=500 --iter_sleep=0.007")


def test_a_night_over_nanogpt_without_editing_it(tmp_path, data_root):
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt")
    head = git_out(repo, "rev-parse", "HEAD")
    data_before = {p.name: p.read_bytes() for p in (repo / "data" / "shakespeare_char").iterdir()}
    done = nightshift(repo, "run", "--tag", "n1", "--max-experiments", "2", env=cli_env(data_root))
    assert done.returncode == 0, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "ok seeds change the result: observed to vary" in out and "ok metric found" in out
    assert "step-budgeted" in out and "dropped after each run (not in keep:): out-shakespeare-char/ckpt.pt" in out

    state = loop_state(repo, "n1")
    baseline = [r for r in state.runs if r.commit == head]
    assert seeds_reach_the_metric(baseline)        # the seed reached it
    first = baseline[0]
    assert set(first.metrics) >= {"val_loss", "iter", "train_loss", "ms_per_iter"}   # from the patterns
    assert first.metrics["iter"] == 500 and first.over_budget_s is None
    # its `iter N: loss X` lines, read live through metrics_pattern: the curve early stopping
    # compares, step for step (no training clock printed)
    assert first.curve.placed == "clock" and first.curve.points[-1].step == 500
    run_dir = repo / "results" / "n1" / "runs" / first.run_id
    log = (run_dir / "log.txt").read_text()
    assert f"Overriding config with {run_dir / 'out' / 'seed.py'}" in log        # {out}, {seed}
    assert "found 20000 train and 2000 val tokens in data/shakespeare_char" in log   # the mount
    # ms_per_iter is an iteration's own time, not the last one's, which includes the final eval
    assert first.metrics["ms_per_iter"] == float(re.search(r"iter 499: .*time ([0-9.]+)ms", log).group(1))
    provenance = json.loads((run_dir / "provenance.json").read_text())
    from agent.run.data import content_hash

    assert provenance["data_hash"] == first.data_hash == content_hash(repo / "data" / "shakespeare_char")
    from agent.review.report import build_context

    context = build_context(repo / "results" / "n1")
    assert context["environment"]["data"]["corpus_hash"] == first.data_hash    # the report's data corpus
    assert context["facts"]["corpus_hash"] == first.data_hash
    assert provenance["determinism"]["budget_kind"] == "step"
    assert provenance["run_env"] == {"OMP_NUM_THREADS": "1"}
    assert provenance["data_mount"][0]["path"] == "data/shakespeare_char"
    assert provenance["outputs"]["dropped"]["work"] == {"out-shakespeare-char/ckpt.pt": 1_500_000}
    assert not (run_dir / "work" / "out-shakespeare-char" / "ckpt.pt").exists()
    second = json.loads((repo / "results" / "n1" / baseline[1].provenance).read_text())
    assert second["determinism"]["seeding"] == "varies"

    # The researcher edited knob lines of the config file only; every other file is the user's.
    knobs = ("learning_rate", "min_lr", "beta2", "dropout", "warmup_iters", "n_layer")
    for experiment in state.experiments.values():
        assert experiment.commit, experiment.invalid_reason
        assert git_out(repo, "diff", "--name-only", head, experiment.commit) == "config/train_shakespeare_char.py"
        diff = git_out(repo, "diff", "-U0", head, experiment.commit, "--", "config/train_shakespeare_char.py")
        changed = [line[1:] for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        assert changed and all(re.match(rf"({'|'.join(knobs)}) = ", line) for line in changed), changed
    assert git_out(repo, "rev-parse", "HEAD") == head and git_out(repo, "status", "--porcelain") == ""
    assert {p.name: p.read_bytes() for p in (repo / "data" / "shakespeare_char").iterdir()} == data_before


def test_a_seed_ignoring_over_budget_script_is_stopped_before_any_candidate(tmp_path, data_root):
    """Without {seed} the imitation always seeds 1337: identical baselines. It also sleeps
    3.5 s against a 1 s budget (step-budgeted, like nanoGPT's max_iters): flagged."""
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", command=NO_SEED, budget="1s", grace="4s")
    env = cli_env(data_root)
    done = nightshift(repo, "run", "--tag", "same", "--max-experiments", "3", env=env)
    assert done.returncode == 4, done.stdout + done.stderr
    message = " ".join(done.stderr.split())
    assert "the baseline's seeds gave identical results" in message
    assert "put {seed} in command" in message and "NIGHTSHIFT_SEED" in message
    assert "FAIL budget respected" in " ".join(done.stdout.split())
    state = loop_state(repo, "same")
    assert not state.experiments                                # no candidate was ever proposed
    assert {r.role.value for r in state.runs} == {"reference"} and len(state.runs) == 2
    assert all(r.over_budget_s and r.over_budget_s > 2 for r in state.runs)
    status = nightshift(repo, "status", "--tag", "same", env=env)
    assert "past budget: 2 of 2 runs ran past their 1s budget" in " ".join(status.stdout.split())
    quick = repo / "quick.md"   # the same script without the sleep, for `noise`
    quick.write_text((repo / "program.md").read_text().replace(" --iter_sleep=0.007", ""))
    noise = nightshift(repo, "noise", "--program", str(quick), "--tag", "quick", "--seeds", "2", env=env)
    assert noise.returncode == 1 and "Traceback" not in noise.stderr
    assert "the script ignores the seed" in " ".join(noise.stderr.split())


def test_a_misspelled_placeholder_stops_before_anything_runs(tmp_path, data_root):
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", command="python train.py --seed={sede}")
    done = nightshift(repo, "run", "--tag", "typo", env=cli_env(data_root))
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert re.search(r"program\.md:\d+: field 'command': unknown placeholder \{sede\} \(did you mean \{seed\}\?\)", message)
    assert not (repo / "results" / "typo").exists()


def test_the_guide_shows_the_nanogpt_example_in_full():
    from tests.loop_helpers import PROJECT

    guide = (PROJECT / "docs" / "guides" / "your-script.md").read_text()
    block = guide.split("```yaml\n---\n# karpathy/nanoGPT", 1)[1].split("```", 1)[0]
    block = "---\n# karpathy/nanoGPT" + block
    example = (PROJECT / "examples" / "nanogpt" / "program.md").read_text()
    assert example.startswith(block)


def test_run_warns_at_the_start_when_a_run_cannot_finish_in_its_budget(tmp_path, data_root):
    """The estimate `check` gives, said once while the night's first run goes: 2000
    iterations of 50 ms cannot end inside 2 s + 3 s of grace, so every run would be killed."""
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", budget="2s", grace="3s", command=(
        "python train.py config/train_shakespeare_char.py --device=cpu --max_iters=2000 "
        "--iter_sleep=0.05 --eval_sleep=0.5"))
    done = nightshift(repo, "run", "--tag", "slow", "--max-experiments", "1", env=cli_env(data_root))
    out = " ".join(done.stdout.split())
    assert done.returncode == 4, done.stdout + done.stderr          # the baseline is killed
    assert out.count("warning: at ") == 1, out
    assert re.search(r"warning: at \d+ ms per iteration, 2000 iterations take about [0-9.]+ min "
                     r"\(--max_iters=2000 in command\); your budget is 2 s, and grace 3 s: every run "
                     r"of this night would be killed at 5 s", out), out
    assert "--max_iters=2000 in command down to about" in out


def test_an_llm_researcher_is_told_which_config_lines_the_command_fixes(tmp_path):
    """The example's prose no longer invites width, batch or context changes, and the brief an
    LLM researcher reads names the lines nanoGPT's CPU flags override as fixed."""
    from agent.night.context import evaluation_plan, research_context
    from agent.program import load_program
    from agent.record.events import LoopStarted
    from agent.record.state import fold
    from agent.workspace.repo import Workspace

    repo = example_repo(tmp_path / "nanoGPT", "nanogpt")
    program = load_program(repo / "program.md")
    workspace = Workspace.open(repo, "brief", tmp_path / "worktree")
    try:
        state = fold([LoopStarted(tag="brief", base_commit=workspace.head())])
        context = research_context(state, program, workspace, evaluation_plan(program, 300.0, "sequential"),
                                   offset=0, deadline=None)
    finally:
        workspace.remove(delete_branch=True)
    setup = " ".join(context.brief.setup.split())
    assert "Fixed by the command: its flags override these lines of config/train_shakespeare_char.py" in setup
    for line in ("batch_size (line 18) by --batch_size=12", "block_size (line 19) by --block_size=64",
                 "n_head (line 23) by --n_head=4", "n_embd (line 24) by --n_embd=128",
                 "max_iters (line 28) by --max_iters=500"):
        assert line in setup
    assert "width, batch and context size" not in program.prose
