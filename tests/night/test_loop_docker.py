"""`nightshift run --sandbox docker`: the whole loop with every run in a container."""
import pytest

from tests.loop_helpers import cli_env, events, loop_state, make_repo, nightshift
from tests.needs import needs
from tests.night.test_keep_rule_loop import NOISE_SCRIPT, PROGRAM

pytestmark = needs("docker")
IMAGE = "nightshift:test-loop"


@pytest.fixture(scope="module")
def client():
    from sandbox.docker import connect
    from sandbox.image import build_host_image

    client = connect(timeout_s=3)
    build_host_image(client, IMAGE)
    return client


def test_loop_runs_every_experiment_in_a_container(tmp_path, client):
    program = PROGRAM.replace("sandbox: local", f"sandbox: local\nimage: {IMAGE}")
    repo = make_repo(tmp_path / "user", {"noise.py": NOISE_SCRIPT, "program.md": program})
    done = nightshift(repo, "run", "--tag", "dock", "--max-experiments", "3",
                      "--sandbox", "docker", env=cli_env(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sandbox: docker" in done.stdout
    state = loop_state(repo, "dock")
    assert len(state.experiments) == 3 and all(e.decided for e in state.experiments.values())
    assert state.runs and all(r.backend == "docker" for r in state.runs)
    started = next(e for e in events(repo, "dock") if e["event"] == "loop_started")
    assert started["sandbox"] == "docker"
    leftovers = client.containers.list(all=True, filters={"label": "nightshift.run"})
    assert leftovers == []
