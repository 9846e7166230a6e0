"""A night on a machine whose speed drifts (issue 29): benchmarks/keep_rule/loop_nights.py's
target, where a seed fixes the run and the metric falls with wall-clock time, through the real
`nightshift run`. Before the drift guard such a night kept inert edits paired against
incumbent runs made long before them; now a keep that rests on one waits for the incumbent
to run that seed again after the candidate (a bracket), and the drift between the two cancels."""
import json

import pytest

from agent.record.events import Role, Verdict
from benchmarks.keep_rule.loop_nights import INERT, KIND, NULLS, WINS, one_night
from tests.loop_helpers import loop_state

pytestmark = pytest.mark.slow


def test_a_drifting_night_brackets_its_keeps_and_keeps_no_inert_edit(tmp_path):
    knobs = list(WINS) + list(NULLS) + list(INERT)
    # night 1's order puts inert edits after a keep in the paired regime; the machine gets
    # 0.4 faster over 15 s, 80 times the rerun jitter
    ours, _, floor = one_night(1, knobs, drift=-0.4, night_s=15.0, workdir=tmp_path)
    repo = tmp_path / "night1-drift" / "repo"
    state = loop_state(repo, "bench")
    brackets = [r for r in state.runs if r.role == Role.REFERENCE and r.experiment]
    assert brackets, "no keep waited for a bracket: the guard never fired"
    by_id = state.experiments
    for run in brackets:
        experiment = by_id[run.experiment]
        # the bracket came after the candidate's run on the same seed, for a look that would
        # have kept on the older incumbent run alone
        mine = [r for r in experiment.runs if r.seed == run.seed]
        assert mine and state.runs.index(mine[0]) < state.runs.index(run)
        if KIND[experiment.description.split()[0]] in ("inert", "null"):
            assert experiment.verdict != Verdict.KEEP, experiment.decision.reason
    kept = {KIND[e.description.split()[0]] for e in state.experiments.values()
            if e.verdict == Verdict.KEEP}
    assert ours.keeps["inert"] == 0 and ours.keeps["null"] == 0, kept
    assert ours.keeps["win"] >= 2
    # the sound floor is a floor: the real rule, which must learn what the oracle is told,
    # never spends fewer runs than it owes (benchmarks/keep_rule/loop_nights.sound_floor)
    assert ours.total_runs >= floor.total_runs
    # the ledger names what the bracket was for
    lines = [json.loads(line) for line in (repo / "results" / "bench" / "ledger.jsonl").read_text().splitlines()]
    assert any(e["event"] == "run_finished" and e["role"] == "reference" and e.get("experiment")
               for e in lines)
