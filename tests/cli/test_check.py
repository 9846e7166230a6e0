"""`nightshift check` through the real CLI, over the nanoGPT imitation: one line per check,
exit 0 when everything holds, 1 listing every problem with its fix."""
import re

import pytest

from tests.examples.conftest import example_repo
from tests.loop_helpers import cli_env, git_out, nightshift

CHECKS = ("program valid", "metric measured apart", "target and knobs", "prepare step", "data folder", "sandbox", "interpreter",
          "metric found", "seeds change the result", "budget respected",
          "nothing written outside the allowed places", "progress lines read", "your checkout untouched")


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
    assert "torch" in found["interpreter"] and "local sandbox" in found["interpreter"]
    assert "data/shakespeare_char of your checkout" in found["data folder"]
    assert "step-budgeted" in found["budget respected"]
    assert "edits are limited to the knobs' values" in found["metric measured apart"]   # knobs: declared
    assert "out-shakespeare-char/ckpt.pt (1.5 MB)" in found["nothing written outside the allowed places"]
    # its metrics_pattern's iter and loss are the curve early stopping compares, step for step
    assert found["progress lines read"].startswith("ok") and "step for step" in found["progress lines read"]
    assert "all checks passed" in done.stdout
    # it leaves no branch or worktree behind, only the logs of its runs
    assert "nightshift/nightshift-check" not in git_out(repo, "branch", "--list", "nightshift/*")
    assert list((repo / "results" / "nightshift-check" / "runs").glob("*/log.txt"))


def test_check_fails_listing_every_problem_with_its_fix(tmp_path, data_root):
    """A seed-ignoring command that also passes a knob as a flag: two problems, two fixes."""
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", command=(
        "python train.py config/train_shakespeare_char.py --device=cpu --dropout=0.0"))
    done = nightshift(repo, "check", env=cli_env(data_root))
    assert done.returncode == 1, done.stdout + done.stderr
    found = lines(done.stdout)
    assert found["seeds change the result"].startswith("FAIL seeds change the result: observed identical: val_loss")
    assert found["target and knobs"].startswith("FAIL target and knobs: the command passes --dropout")
    assert found["metric found"].startswith("ok")
    tail = done.stdout[done.stdout.index("2 problems:"):]
    assert "1. target and knobs: fix: remove those flags" in tail
    assert "2. seeds change the result: fix: pass the seed to the script: put {seed} in command" in " ".join(tail.split())


def test_check_of_an_invalid_program_says_so_without_running(tmp_path, data_root):
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", metric_pattern="'val loss [0-9.]+'")
    done = nightshift(repo, "check", env=cli_env(data_root))
    assert done.returncode == 1
    found = lines(done.stdout)
    assert list(found) == ["program valid"] and "field 'metric_pattern'" in found["program valid"]
    assert "has 0 groups" in found["program valid"] and not (repo / "results").exists()


@pytest.mark.docker
def test_check_in_docker_sees_the_data_and_the_out_folder_where_the_container_has_them(tmp_path, data_root):
    import os

    from sandbox import SandboxUnavailable
    from sandbox.select import make_runner

    try:
        make_runner("docker")
    except SandboxUnavailable as exc:
        if os.environ.get("NIGHTSHIFT_REQUIRE_DOCKER"):
            pytest.fail(f"NIGHTSHIFT_REQUIRE_DOCKER is set but {exc}")
        pytest.skip(f"no Docker engine with the nightshift image: {exc}")
    repo = example_repo(tmp_path / "nanoGPT", "nanogpt", sandbox="docker")
    done = nightshift(repo, "check", env=cli_env(data_root))
    assert done.returncode == 0, done.stdout + done.stderr
    found = lines(done.stdout)
    assert "docker sandbox" in found["interpreter"] and found["seeds change the result"].startswith("ok")
    logs = list((repo / "results" / "nightshift-check" / "runs").glob("*-s0-*/log.txt"))
    log = logs[0].read_text()
    assert "Overriding config with /out/seed.py" in log and "found 20000 train" in log
