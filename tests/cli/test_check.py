"""`nightshift check` through the real CLI, over the nanoGPT imitation: one line per check,
exit 0 when everything holds, 1 listing every problem with its fix."""
import re

import pytest

from tests.examples.conftest import example_repo
from tests.loop_helpers import cli_env, git_out, nightshift
from tests.needs import needs

CHECKS = ("program valid", "metric measured apart", "target and knobs", "lines the command overrides",
          "prepare step", "data folder", "sandbox", "view", "interpreter",
          "metric found", "seeds change the result", "budget respected",
          "nothing written outside the allowed places", "progress lines read", "knobs live",
          "your checkout untouched")


def lines(text: str) -> dict[str, str]:
    """check name -> its line (mark and detail), from check's output."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"^(ok  |FAIL|--  ) ([a-z ]+): ", line)
        if match:
            found[match.group(2)] = line
    return found


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def test_check_passes_on_the_nanogpt_example(tmp_path, data_root):
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt")
    done = nightshift(repo, "check", env=cli_env(data_root))
    assert done.returncode == 0, done.stdout + done.stderr
    found = lines(done.stdout)
    assert set(found) == set(CHECKS), done.stdout
    assert all(not line.startswith("FAIL") for line in found.values())
    assert "6 knobs: n_layer=6 in int(2, 8)" in found["target and knobs"]
    dead = found["lines the command overrides"]     # nanoGPT's CPU flags make these lines dead
    assert "8 of config/train_shakespeare_char.py: eval_iters (line 6) by --eval_iters=20" in dead
    for line in ("batch_size (line 18) by --batch_size=12", "block_size (line 19) by --block_size=64",
                 "n_head (line 23) by --n_head=4", "n_embd (line 24) by --n_embd=128"):
        assert line in dead
    assert "torch" in found["interpreter"] and "local sandbox" in found["interpreter"]
    assert "data/shakespeare_char of your checkout" in found["data folder"]
    assert "step-budgeted: 500 steps" in found["budget respected"]
    assert "the count its command or target sets" in found["budget respected"]
    assert "edits are limited to the knobs' values" in found["metric measured apart"]   # knobs: declared
    assert "out-shakespeare-char/ckpt.pt (1.5 MB)" in found["nothing written outside the allowed places"]
    # its metrics_pattern's iter and loss are the curve early stopping compares, step for step
    assert found["progress lines read"].startswith("ok") and "step for step" in found["progress lines read"]
    # each knob moved in a short probe run changed what the script printed (the config file it
    # echoes does not count); dropout 0.2 -> 0.0 prints the same loss (0.1 is its best), 0.3 not
    assert found["knobs live"].startswith("ok   knobs live: 6 of 6 proven live: n_layer (6 -> 2): output line")
    assert "dropout (0.2 -> 0.3): output line" in found["knobs live"]
    assert "warmup_iters (100 -> 500)" in found["knobs live"]
    assert "all checks passed" in done.stdout
    # it leaves no branch or worktree behind, only the logs of its runs
    assert "nightshift/nightshift-check" not in git_out(repo, "branch", "--list", "nightshift/*")
    assert list((repo / "results" / "nightshift-check" / "runs").glob("*/log.txt"))


def test_check_fails_listing_every_problem_with_its_fix(tmp_path, data_root):
    """A seed-ignoring command that also runs past its budget: two problems, two fixes."""
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", budget="1s", grace="10s", command=(
        "python train.py config/train_shakespeare_char.py --device=cpu --max_iters=250 --iter_sleep=0.03"))
    done = nightshift(repo, "check", env=cli_env(data_root))
    assert done.returncode == 1, done.stdout + done.stderr
    found = lines(done.stdout)
    assert found["seeds change the result"].startswith("FAIL seeds change the result: observed identical: val_loss")
    assert found["budget respected"].startswith("FAIL budget respected: ran ")
    assert "step-budgeted (250 steps" in found["budget respected"]
    assert found["metric found"].startswith("ok")
    tail = " ".join(done.stdout[done.stdout.index("2 problems:"):].split())
    assert "1. seeds change the result: fix: pass the seed to the script: put {seed} in command" in tail
    assert ("2. budget respected: fix: the script runs a step count (--max_iters=250 in command), "
            "not the budget") in tail


def test_a_knob_passed_as_a_flag_is_refused_naming_the_flag(tmp_path, data_root):
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", command=(
        "python train.py config/train_shakespeare_char.py --device=cpu --dropout=0.0"))
    done = nightshift(repo, "check", env=cli_env(data_root))
    assert done.returncode == 1
    found = lines(done.stdout)
    assert list(found) == ["program valid"], done.stdout
    message = " ".join(found["program valid"].split())
    assert re.search(r"program\.md:\d+: field 'knobs\.dropout': the command passes --dropout=0\.0, which "
                     r"overrides dropout in config/train_shakespeare_char\.py \(line 25\)", message), message
    assert "Remove --dropout=0.0 from command" in message and not (repo / "results").exists()


def test_check_stops_a_run_that_cannot_finish_and_runs_no_second_seed(tmp_path, data_root):
    """nanoGPT-shaped: a slow first evaluation, then 2000 iterations of 50 ms against a 4 s
    budget. check times the iterations as they come, says how long the run would take, stops
    it, and does not start seed 1; the fixes name this script's own flag."""
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", budget="4s", grace="8s", command=(
        "python train.py config/train_shakespeare_char.py --device=cpu --max_iters=2000 "
        "--lr_decay_iters=2000 --iter_sleep=0.05 --eval_sleep=1.5"))
    done = nightshift(repo, "check", env=cli_env(data_root))
    assert done.returncode == 1, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    estimate = re.search(r"seed 0: at (\d+) ms per iteration, 2000 iterations take about ([0-9.]+) min "
                         r"\(--max_iters=2000 in command\); your budget is 4 s: stopping it now", out)
    assert estimate and 45 <= int(estimate.group(1)) <= 200, out
    assert "running 00000000 on seed 1" not in out and "on seed 1 (" not in out
    found = lines(done.stdout)
    assert found["budget respected"].startswith("FAIL budget respected: seed 0: at ")
    assert "every run would be killed at 12 s" in found["budget respected"]
    assert found["metric found"].startswith("--") and found["seeds change the result"].startswith("--")
    assert found["knobs live"].startswith("--   knobs live: not probed: a run cannot finish in its budget")
    fix = out[out.index("1. budget respected: fix:"):]
    assert "budget: " in fix and "in program.md" in fix
    assert "--max_iters=2000 in command down to about" in fix and "and --lr_decay_iters=2000 with it" in fix
    runs = list((repo / "results" / "nightshift-check" / "runs").iterdir())
    assert len(runs) == 1 and "-s0-" in runs[0].name                 # seed 1 never started
    log = (runs[0] / "log.txt").read_text()
    assert "step 0: train loss" in log and "step 2000" not in log     # stopped long before its end


def test_check_of_an_invalid_program_says_so_without_running(tmp_path, data_root):
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", metric_pattern="'val loss [0-9.]+'")
    done = nightshift(repo, "check", env=cli_env(data_root))
    assert done.returncode == 1
    found = lines(done.stdout)
    assert list(found) == ["program valid"] and "field 'metric_pattern'" in found["program valid"]
    assert "has 0 groups" in found["program valid"] and not (repo / "results").exists()


@needs("docker")
def test_check_in_docker_sees_the_data_and_the_out_folder_where_the_container_has_them(tmp_path, data_root):
    from sandbox.docker import connect
    from sandbox.image import build_host_image

    from tests.night.test_loop_docker import IMAGE

    build_host_image(connect(timeout_s=3), IMAGE)   # offline, about a second
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", sandbox="docker", image=IMAGE)
    done = nightshift(repo, "check", env=cli_env(data_root))
    assert done.returncode == 0, done.stdout + done.stderr
    found = lines(done.stdout)
    assert "docker sandbox" in found["interpreter"] and found["seeds change the result"].startswith("ok")
    logs = list((repo / "results" / "nightshift-check" / "runs").glob("*-s0-*/log.txt"))
    log = logs[0].read_text()
    assert "Overriding config with /out/seed.py" in log and "found 20000 train" in log


def test_a_run_whose_first_evaluation_outlasts_the_deadline_is_said_so_and_ends_check(tmp_path, data_root):
    """Real nanoGPT's GPU-sized config on 2 busy cores: the first evaluation took 410 s, so
    the first iteration line came just before the kill at 420 s and no step could be timed.
    check says what it saw, names the step flag, and runs no second seed."""
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", budget="2s", grace="4s", command=(
        "python train.py config/train_shakespeare_char.py --device=cpu --max_iters=2000 "
        "--iter_sleep=4.0 --eval_sleep=2.5"))
    done = nightshift(repo, "check", env=cli_env(data_root))
    assert done.returncode == 1, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert re.search(r"seed 0 was killed at budget \+ grace: its first progress line \(iteration 0 of 2000 "
                     r"\(--max_iters=2000 in command\)\) came only after \d s, so not one step could be timed", out), out
    assert "on seed 1 (" not in out
    found = lines(done.stdout)
    assert found["metric found"].startswith("--   metric found: not known: seed 0 was killed")
    assert found["budget respected"].startswith("FAIL budget respected: seed 0 was still running past budget + grace")
    assert "its first progress line" in found["budget respected"]
    assert "1 problem:" in done.stdout and "--max_iters=2000 in command" in out.split("1 problem:")[1]
