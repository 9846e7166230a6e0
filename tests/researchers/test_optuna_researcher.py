"""The Optuna researcher: knob proposals, a persisted study, hypotheses, predictions."""
from pathlib import Path

import optuna
import pytest

from agent.record.records import Direction
from agent.target.knobs import knob_values, parse_knobs
from agent.researchers.prediction_stats import TriedConfig, knob_distance, predict_delta
from agent.record.state import Experiment
from agent.researchers.base import Outcome, Proposal, ResearchContext, ResearcherError
from agent.researchers.optuna_researcher import OptunaResearcher

SOURCE = '''"""A fake training script."""
LR = 3e-3              # peak learning rate  # search: log(1e-4, 3e-2)
N_LAYER = 4            # transformer blocks  # search: int(2, 8)
OPTIMIZER = "adamw"    # search: choice("adamw", "muon")
WARMUP_FRAC = 0.05     # search: float(0.0, 0.3)

print(LR * N_LAYER)
'''


def context(index: int, source: str = SOURCE, hypotheses=(), noise_sd=0.01,
            incumbent_value=1.0) -> ResearchContext:
    return ResearchContext(
        program_text="", target="train.py", incumbent_source=source, incumbent_commit="c0",
        protected={}, ledger_summary="", metric="val_bpb", direction=Direction.MINIMIZE,
        noise_sd=noise_sd, incumbent_value=incumbent_value, experiment_index=index,
        hypotheses=tuple(hypotheses))


def record(proposal: Proposal) -> Experiment:
    """The ledger's record of a proposal, as the loop hands it to `observe`."""
    return Experiment(id="e", commit=None, parent="c0", description=proposal.description,
                      hypothesis=proposal.hypothesis, prediction=proposal.prediction,
                      researcher="optuna", extra=dict(proposal.extra))


def fake_metric(source: str) -> float:
    """A deterministic landscape: best near LR=1e-3, deeper is slightly better."""
    import math
    v = knob_values(source)
    return 1.0 + 0.1 * abs(math.log10(v["LR"]) + 3) - 0.01 * v["N_LAYER"]


def run(researcher: OptunaResearcher, indices, source: str = SOURCE):
    proposals = []
    for i in indices:
        p = researcher.propose(context(i, source))
        researcher.observe(record(p), Outcome(f"e{i}", "discard", None, fake_metric(p.source)))
        proposals.append(p)
    return proposals


def completed(state_dir: Path) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name="nightshift", storage=f"sqlite:///{state_dir / 'optuna.db'}")
    return study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))


def test_proposals_change_one_or_two_knobs_within_bounds(tmp_path):
    knobs = {k.name: k for k in parse_knobs(SOURCE)}
    incumbent = knob_values(SOURCE)
    for p in run(OptunaResearcher(tmp_path, seed=3, startup=2), range(1, 9)):
        values = knob_values(p.source)
        changed = {n for n in values if values[n] != incumbent[n]}
        assert 1 <= len(changed) <= 2 and p.source != SOURCE
        assert all(knobs[n].contains(values[n]) for n in changed)
        assert set(p.extra["params"]) == changed
        assert p.source.splitlines()[5:] == SOURCE.splitlines()[5:]   # code untouched
        for name in changed:
            assert f"{name} " in p.description and " -> " in p.description


def test_same_seed_same_proposals_and_another_seed_differs(tmp_path):
    first = [p.source for p in run(OptunaResearcher(tmp_path / "a", seed=7), range(1, 4))]
    again = [p.source for p in run(OptunaResearcher(tmp_path / "b", seed=7), range(1, 4))]
    other = [p.source for p in run(OptunaResearcher(tmp_path / "c", seed=8), range(1, 4))]
    assert first == again
    assert first != other


def test_study_persists_and_a_new_researcher_continues_numbering(tmp_path):
    run(OptunaResearcher(tmp_path, seed=0), [1, 2])
    assert (tmp_path / "optuna.db").exists()
    resumed = OptunaResearcher(tmp_path, seed=0)
    (p,) = run(resumed, [3])
    assert p.extra["trial"] == 2
    assert [t.number for t in completed(tmp_path)] == [0, 1, 2]


def test_observe_without_a_value_marks_the_trial_failed(tmp_path):
    researcher = OptunaResearcher(tmp_path)
    p = researcher.propose(context(1))
    researcher.observe(record(p), Outcome("e1", "crash", None, None, "exit 1"))
    trial = researcher.study.trials[p.extra["trial"]]
    assert trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs["verdict"] == "crash"
    stranger = type(p)(source="", description="", hypothesis="", prediction=p.prediction,
                       extra={"trial": 99})
    researcher.observe(record(stranger), Outcome("e9", "discard", 0.0, 1.0))   # unknown trial: ignored
    assert len(researcher.study.trials) == 1


def test_trial_orphaned_by_a_restart_is_failed_then_recovered_when_observed(tmp_path):
    p = OptunaResearcher(tmp_path).propose(context(1))          # the process "dies" here
    resumed = OptunaResearcher(tmp_path)
    assert resumed.study.trials[p.extra["trial"]].state == optuna.trial.TrialState.FAIL
    resumed.observe(record(p), Outcome("e1", "discard", 0.02, 1.02))    # the loop finished it anyway
    resumed.observe(record(p), Outcome("e1", "discard", 0.02, 1.02))    # told twice: no crash, no copy
    (recovered,) = completed(tmp_path)
    assert recovered.value == 1.02 and recovered.user_attrs["recovered_from_trial"] == 0
    assert recovered.params == resumed.study.trials[0].params


def test_knob_assignment_hypothesis_goes_first_and_prose_is_left(tmp_path):
    researcher = OptunaResearcher(tmp_path)
    hypotheses = [("h1", "try RoPE base 50k"), ("h2", "set N_LAYER to 6")]
    p = researcher.propose(context(1, hypotheses=hypotheses))
    assert p.hypothesis_id == "h2" and p.hypothesis == "set N_LAYER to 6"
    assert knob_values(p.source) == {**knob_values(SOURCE), "N_LAYER": 6}
    assert p.description == "N_LAYER 4 -> 6"
    assert [s["id"] for s in p.extra["skipped_hypotheses"]] == ["h1"]
    assert researcher.study.trials[p.extra["trial"]].params["N_LAYER"] == 6


def test_hypothesis_outside_the_space_is_run_but_kept_out_of_the_study_params(tmp_path):
    researcher = OptunaResearcher(tmp_path)
    p = researcher.propose(context(1, hypotheses=[("h1", "LR=0.5")]))
    assert knob_values(p.source)["LR"] == 0.5 and p.hypothesis_id == "h1"
    trial = researcher.study.trials[p.extra["trial"]]
    assert "LR" not in trial.params and trial.user_attrs["config"]["LR"] == 0.5
    researcher.observe(record(p), Outcome("e1", "discard", 0.5, 1.5))   # and it can be told


def test_incumbent_outside_its_space_still_gets_proposals(tmp_path):
    source = SOURCE.replace("LR = 3e-3  ", "LR = 0.5   ")
    assert knob_values(source)["LR"] == 0.5
    for p in run(OptunaResearcher(tmp_path, seed=1), range(1, 5), source=source):
        assert p.source != source


def test_a_sampled_duplicate_of_the_incumbent_is_nudged(tmp_path):
    source = "USE_BIAS = True  # search: choice(True, False)\n"
    researcher = OptunaResearcher(tmp_path, seed=0, startup=0, local_share=0.0)   # TPE only
    for i in range(1, 5):
        p = researcher.propose(context(i, source))
        assert p.source == "USE_BIAS = False  # search: choice(True, False)\n"
        researcher.observe(record(p), Outcome(f"e{i}", "discard", 0.0, 1.0))
    skipped = [t for t in researcher.study.trials if "skipped" in t.user_attrs]
    assert skipped, "with this seed TPE draws the incumbent's value at least once"
    assert all(t.state == optuna.trial.TrialState.FAIL for t in skipped)


def test_predictions_come_from_the_studys_model_and_vary_with_history(tmp_path):
    researcher = OptunaResearcher(tmp_path, seed=2)
    first = researcher.propose(context(1, noise_sd=None, incumbent_value=None))
    assert first.extra["prediction_method"] == "gp prior" and "GP prior" in first.prediction.rationale
    assert first.prediction.expected_delta == 0.0 and first.prediction.confidence == 0.8
    researcher.observe(record(first), Outcome("e1", "discard", None, fake_metric(first.source)))
    later = run(researcher, range(2, 9))
    assert all(p.extra["prediction_method"] == "gp" for p in later)
    deltas = {round(p.prediction.expected_delta, 6) for p in later}
    widths = {round(p.prediction.interval[1] - p.prediction.interval[0], 6) for p in later}
    assert len(deltas) >= 4 and len(widths) >= 4                     # not one constant
    for p in later:
        lo, hi = p.prediction.interval
        assert lo <= p.prediction.expected_delta <= hi and hi - lo >= 2 * 1.28 * 0.01


def test_the_gp_follows_the_measured_landscape_and_scales_its_prior_with_the_move():
    (lr,) = parse_knobs("LR = 1e-3  # search: log(1e-4, 1e-1)\n")
    history = [TriedConfig({"LR": v}, value) for v, value in
               [(1e-4, 1.30), (2e-4, 1.28), (1e-3, 1.00), (1.2e-3, 1.01), (5e-2, 1.50), (1e-1, 1.60)]]
    common = dict(incumbent_value=1.0, noise_sd=0.01, direction=Direction.MINIMIZE)
    worse = predict_delta([lr], history, {"LR": 8e-2}, {"LR": 1e-3}, **common)
    assert worse.direction == "worsen" and 0.4 < worse.expected_delta < 0.7
    near = predict_delta([lr], history, {"LR": 1.1e-3}, {"LR": 1e-3}, **common)
    assert abs(near.expected_delta) < 0.05 * worse.expected_delta    # a small step, a small change
    maximize = predict_delta([lr], history, {"LR": 8e-2}, {"LR": 1e-3}, **{**common, "direction": Direction.MAXIMIZE})
    assert maximize.direction == "improve"
    small = predict_delta([lr], [], {"LR": 1.2e-3}, {"LR": 1e-3}, **common)
    large = predict_delta([lr], [], {"LR": 5e-2}, {"LR": 1e-3}, **common)
    width = lambda p: p.interval[1] - p.interval[0]  # noqa: E731
    assert width(small) < width(large)                                # a jump is less certain
    assert knob_distance([lr], {"LR": 1e-4}, {"LR": 1e-1}) == pytest.approx(1.0)


def test_a_night_opens_with_the_learning_rate_then_local_moves_then_tpe(tmp_path):
    researcher = OptunaResearcher(tmp_path, seed=5, startup=6)
    incumbent = knob_values(SOURCE)
    knobs = {k.name: k for k in parse_knobs(SOURCE)}
    proposals = run(researcher, range(1, 15))
    # every proposal is discarded: LR doubled, then halved, and the opening is over
    assert [p.extra["params"] for p in proposals[:2]] == [{"LR": 6e-3}, {"LR": 1.5e-3}]
    assert [p.extra["move"] for p in proposals[:6]] == ["opening"] * 2 + ["local"] * 4
    assert "Learning rate first: LR times 2" in proposals[0].hypothesis
    assert "tpe" in [p.extra["move"] for p in proposals[6:]]
    for p in proposals[2:6]:                                          # one knob, one step
        (name,) = p.extra["params"]
        assert knobs[name].contains(p.extra["params"][name])
        if knobs[name].kind in ("float", "log"):
            assert knob_distance([knobs[name]], p.extra["config"], incumbent) <= 0.16


def test_the_opening_doubles_while_doubling_is_kept(tmp_path):
    """A kept doubling becomes the incumbent and is doubled again; the first loss after it
    ends the line search (no halving back towards where it came from)."""
    researcher = OptunaResearcher(tmp_path, seed=0)
    source, tried = SOURCE, []
    for index, kept in enumerate([True, True, False], start=1):
        proposal = researcher.propose(context(index, source))
        tried.append(proposal.extra["params"])
        verdict = "keep" if kept else "discard"
        researcher.observe(record(proposal), Outcome(f"e{index}", verdict, -0.1, 0.9))
        source = proposal.source if kept else source
    assert tried == [{"LR": 6e-3}, {"LR": 0.012}, {"LR": 0.024}]
    assert researcher.propose(context(4, source)).extra["move"] == "local"


def test_without_the_opening_the_night_starts_with_local_moves(tmp_path):
    proposals = run(OptunaResearcher(tmp_path, seed=5, opening=False), range(1, 4))
    assert [p.extra["move"] for p in proposals] == ["local"] * 3


def test_direction_mismatch_with_the_stored_study_is_refused(tmp_path):
    OptunaResearcher(tmp_path, direction=Direction.MINIMIZE)
    with pytest.raises(ResearcherError, match="maximize"):
        OptunaResearcher(tmp_path, direction=Direction.MAXIMIZE)


def test_a_target_without_knobs_stops_with_a_fix(tmp_path):
    with pytest.raises(ResearcherError, match=r"has no knobs.*knobs: \{learning_rate: log.*# search:"):
        OptunaResearcher(tmp_path).propose(context(1, source="X = 1\n"))
    with pytest.raises(ResearcherError, match="train.py: line 1"):
        OptunaResearcher(tmp_path).propose(context(1, source="X = 1  # search: nope(1)\n"))


def test_proposes_on_the_real_training_script(tmp_path):
    path = Path(__file__).resolve().parents[2] / "train" / "train.py"
    source = path.read_text()
    knobs = {k.name: k for k in parse_knobs(source)}
    p = OptunaResearcher(tmp_path, seed=0).propose(context(1, source=source))
    before, after = knob_values(source), knob_values(p.source)
    changed = [n for n in after if after[n] != before[n]]
    assert 1 <= len(changed) <= 2 and all(knobs[n].contains(after[n]) for n in changed)


def test_knobs_declared_in_program_md_are_searched_in_a_yaml_config(tmp_path):
    """program.md's `knobs:` over a YAML target: the proposal rewrites values, nothing else."""
    import yaml

    source = "# run settings\noptimizer:\n  lr: 3.0e-4   # peak\n  beta2: 0.99\nmodel:\n  n_layer: 4\nname: run\n"
    declared = {"optimizer.lr": "log(1e-5, 1e-2)", "model.n_layer": "int(2, 8)", "optimizer.beta2": "float(0.9, 0.999)"}
    researcher = OptunaResearcher(tmp_path, seed=2, knobs=declared)
    ctx = ResearchContext(
        program_text="", target="conf/train.yaml", incumbent_source=source, incumbent_commit="c0",
        protected={}, ledger_summary="", metric="val_loss", direction=Direction.MINIMIZE,
        noise_sd=0.01, incumbent_value=1.0, experiment_index=1)
    proposal = researcher.propose(ctx)
    before, after = yaml.safe_load(source), yaml.safe_load(proposal.source)
    changed = {f"{a}.{b}" for a in ("optimizer", "model") for b in before[a] if before[a][b] != after[a][b]}
    assert changed == set(proposal.extra["params"]) and 1 <= len(changed) <= 2
    assert after["name"] == "run" and proposal.source.startswith("# run settings\n")
    assert len(proposal.source.splitlines()) == len(source.splitlines())


def test_a_local_move_never_steps_back_onto_the_incumbent_a_keep_replaced(tmp_path):
    """After a keep, the move that undoes it is a setting already measured (the old
    incumbent): the next local moves go elsewhere while anything else is left to try."""
    import dataclasses
    source = 'N_LAYER = 4    # search: int(2, 8)\nOPTIMIZER = "adamw"    # search: choice("adamw", "muon")\n'
    for seed in range(8):
        researcher = OptunaResearcher(tmp_path / f"s{seed}", seed=seed, startup=20)
        first = researcher.propose(context(1, source))
        researcher.observe(record(first), Outcome("e1", "keep", -0.1, 0.9))
        before = knob_values(source)
        for index in (2, 3):
            ctx = dataclasses.replace(context(index, first.source), incumbent_commit="c1")
            proposal = researcher.propose(ctx)
            researcher.observe(record(proposal), Outcome(f"e{index}", "discard", 0.05, 0.95))
            assert proposal.extra["config"] != before, (seed, first.description, proposal.description)


def test_a_discard_stopped_early_is_a_pruned_trial(tmp_path):
    # Optuna's own word for a trial whose curve showed it losing: TPE ranks it with the worse
    # trials, where a failed one would be left out of its model.
    researcher = OptunaResearcher(tmp_path, seed=0, startup=2)
    p = researcher.propose(context(1))
    researcher.observe(record(p), Outcome("e1", "discard", None, None, "a discard stopped early at 50%",
                                          stopped_early=True))
    study = optuna.load_study(study_name="nightshift", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    (trial,) = [t for t in study.get_trials() if t.number == p.extra["trial"]]
    assert trial.state == optuna.trial.TrialState.PRUNED


@pytest.mark.parametrize("move, delta, shown", [("local", 0.0031, "+0.0031"), ("tpe", -0.000412, "-0.000412"),
                                                ("local", 0.0, "0")])
def test_the_hypothesis_prints_a_small_delta_in_full_and_says_its_sign(tmp_path, move, delta, shown):
    researcher = OptunaResearcher(tmp_path)
    researcher._last_move = move
    history = [TriedConfig(config={"LR": 1e-3}, value=1.0)]
    sentence = researcher._evidence_sentence("val_bpb", {"LR": 2e-3}, history, delta)
    assert f"predict{'s' if move == 'local' else ''} a delta of {shown} (candidate minus incumbent)." in sentence
