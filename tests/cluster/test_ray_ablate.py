"""`nightshift ablate --cluster ray`: the leave-one-out runs go to the Ray cluster like a
night's, each recorded with the node it ran on, and the answer is the same kind of record."""
import json


from agent.record.events import AblationChange, AblationRun, AblationSummary
from agent.record.ledger import read_events
from tests.cluster.test_ray import ray_env
from tests.loop_helpers import make_repo, nightshift
from tests.review.test_ablate import PROGRAM, SCRIPT, TOY
from tests.needs import needs

pytestmark = needs("ray")


def test_ablate_runs_on_the_ray_cluster(tmp_path, ray_address):
    repo = make_repo(tmp_path / "repo", {"program.md": PROGRAM, "train.py": TOY})
    (tmp_path / "proposals.json").write_text(json.dumps(SCRIPT[:2]))
    env = ray_env(tmp_path, ray_address)
    night = nightshift(repo, "run", "--tag", "r", "--max-experiments", "2",
                       "--script", str(tmp_path / "proposals.json"), env=env)
    assert night.returncode == 0, night.stdout + night.stderr
    done = nightshift(repo, "ablate", "--tag", "r", "--cluster", "ray", "--workers", "2",
                      "--seeds", "3", env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    events = list(read_events(repo / "results" / "r"))
    runs = [e for e in events if isinstance(e, AblationRun)]
    assert len(runs) == 4 * 3 and all(r.status.value == "ok" for r in runs)
    summary = next(e for e in events if isinstance(e, AblationSummary))
    (folder,) = (repo / "results" / "r" / "ablations").iterdir()
    finished = [e for e in read_events(folder) if e.kind == "run_finished"]
    assert len(finished) == 12 and all(e.node for e in finished)   # each ran on a Ray node
    changes = {e.experiment: e for e in events if isinstance(e, AblationChange)}
    assert changes["e0001"].interval[0] > 0 and changes["e0002"].interval[0] > 0
    assert summary.measured == ("e0001", "e0002")
