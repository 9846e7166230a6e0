"""The efficiency figure of a real night (agent/review/efficiency.py): benchmarks/keep_rule/loop_nights.py's
target with known effects through the real CLI, then the figure against the runs the ledger
holds, counted line by line from the file, and its estimate against the known effect."""
import json

import pytest

from agent.record.events import Verdict
from benchmarks.keep_rule.loop_nights import EFFECT, run_night, target_source, write_repo
from tests.loop_helpers import loop_state

pytestmark = pytest.mark.slow


def test_the_figure_counts_the_runs_a_real_night_ran(tmp_path):
    knobs = ["WIDER", "TIE_EMBED"]                     # a win of 0.30 and a null
    script = [{"knobs": {name: 1}, "description": f"{name} on"} for name in knobs]
    repo = write_repo(tmp_path / "repo", target_source(knobs, salt=7, start=0.0, night_s=1.0, drift=0.0),
                      script)
    run_night(repo, len(script), timeout=600)
    lines = [json.loads(line) for line in (repo / "results" / "bench" / "ledger.jsonl").read_text().splitlines()]
    program = next(e for e in lines if e["event"] == "loop_started")["program"]
    baseline = set(range(program["seeds"]["baseline"]))
    stopped = {e["run_id"] for e in lines if e["event"] == "run_stopped_early"}
    started = {e["run_id"] for e in lines if e["event"] == "run_started"}
    finished = [e for e in lines if e["event"] == "run_finished" and e["run_id"] not in stopped]
    ok = [e for e in finished if e["status"] == "ok"]
    hand = {"calibration": sum(e["role"] == "reference" and e["seed"] in baseline for e in ok),
            "paired": sum(e["role"] == "reference" and e["seed"] not in baseline for e in ok),
            "candidates": sum(e["role"] == "candidate" for e in ok),
            "stopped": len(stopped),
            "failed": len(started) - len(ok) - len(stopped), "other": 0}

    from agent.review.efficiency import calibration_seeds, night_efficiency

    state = loop_state(repo, "bench")
    figure = night_efficiency(state, "minimize", calibration_seeds(program))
    assert figure.counts() == hand and figure.runs == len(started)
    assert hand["calibration"] >= len(baseline) and hand["candidates"] >= 2
    assert sum(figure.shares().values()) == pytest.approx(1.0)
    kept = [e.description.split()[0] for e in state.experiments.values() if e.verdict == Verdict.KEEP]
    assert kept == ["WIDER"], [e.decision.reason for e in state.experiments.values()]
    # the estimate: the win on the incumbent's fresh seeds against the baseline's, paired on
    # the calibration seeds (a seed fixes the run: only the rerun jitter, sd 0.005, remains)
    assert figure.improvement == pytest.approx(-EFFECT["WIDER"], abs=0.02)
    assert figure.per_run == pytest.approx(figure.improvement / len(started))
    assert figure.run_s > 0 and figure.per_hour > 0
