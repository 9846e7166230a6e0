"""What a candidate spent against the incumbent, and program.md's compute: policy."""
import pytest

from agent.decide.compute import (NOISE_FLOOR_S, ComputePolicy, allowance, clearly_over, cost,
                                  parse_policy, refusal)
from agent.decide.no_effect import no_effect
from agent.record.events import Role, RunFinished
from sandbox import Status


def run(seed, duration, commit="c", status=Status.OK, **metrics):
    return RunFinished(run_id=f"{commit}{seed}", commit=commit, seed=seed, role=Role.CANDIDATE,
                       status=status, metric=2.0 if status == Status.OK else None,
                       duration_s=duration, metrics=metrics)


@pytest.mark.parametrize("text, extra", [("equal", 0.0), ("free", None), ("+25%", 0.25), ("25%", 0.25),
                                         (0.5, 0.5), ("1.5", 1.5)])
def test_the_policy_reads_equal_free_or_a_share(text, extra):
    assert parse_policy(text).extra == extra
    assert parse_policy(str(parse_policy(text))).extra == extra      # it prints as it parses


@pytest.mark.parametrize("bad", ["lots", "-10%", True, "", "nan"])
def test_a_bad_policy_says_the_forms(bad):
    with pytest.raises(ValueError, match="equal, free, or a share more"):
        parse_policy(bad)


def test_a_bigger_model_that_takes_six_times_longer_is_over_equal_compute():
    incumbent = [run(s, d, "i", params=204_544) for s, d in enumerate((11.2, 11.9, 11.5))]
    candidate = [run(s, d, params=1_200_000) for s, d in enumerate((66.0, 71.0))]
    spent = cost(candidate, incumbent, ComputePolicy(0.0))
    assert spent.candidate_s == 68.5 and spent.incumbent_s == 11.5
    assert spent.ratio == pytest.approx(68.5 / 11.5, abs=1e-3)
    assert spent.allowed == pytest.approx(1 + NOISE_FLOOR_S / 11.5, abs=1e-3)   # the floor: 2 s of 11.5
    assert spent.over and clearly_over(spent)
    assert "params 1,200,000 vs 204,544" in spent.describe()
    assert "5.96x the incumbent's run time" in refusal(spent, ComputePolicy(0.0))
    assert not cost(candidate, incumbent, ComputePolicy(None)).over       # free: anything goes
    assert cost(candidate, incumbent, ComputePolicy(5.0)).allowed > spent.ratio


def test_run_time_noise_is_not_compute():
    """Honest pairs on shared cores differ: a candidate 12 % slower by load is within equal."""
    incumbent = [run(s, d, "i") for s, d in enumerate((40.0, 44.0, 41.0, 47.0))]
    candidate = [run(0, 47.5), run(1, 48.0)]
    spent = cost(candidate, incumbent, ComputePolicy(0.0))
    assert not spent.over and not clearly_over(spent)
    assert allowance([40.0, 44.0, 41.0, 47.0]) == pytest.approx(max(0.15 * 42.5, 3 * 1.4826 * 2.0))   # MAD 2.0
    assert cost([run(0, 60.0)], incumbent, ComputePolicy(0.0)).over       # 40 % more is compute


def test_failed_runs_and_runs_without_a_clock_are_not_measured():
    assert cost([run(0, 5.0, status=Status.CRASH)], [run(0, 5.0, "i")], ComputePolicy()) is None
    assert cost([run(0, None)], [run(0, 5.0, "i")], ComputePolicy()) is None
    assert cost([run(0, 5.0)], [], ComputePolicy()) is None


def test_no_effect_needs_the_same_value_on_every_shared_seed():
    incumbent = {0: [2.2425], 1: [2.3011, 2.3011]}
    assert no_effect({0: 2.2425}, incumbent) is not None                     # five digits: one seed is enough
    assert no_effect({0: 2.2425, 1: 2.3011}, incumbent) is not None
    assert no_effect({0: 2.2425, 1: 2.3012}, incumbent) is None              # one seed moved: it acts
    assert no_effect({2: 2.2425}, incumbent) is None                         # no seed shared yet
    assert no_effect({0: 2.25}, {0: [2.25]}) is None                         # three digits can match by chance
    assert no_effect({0: 2.25, 1: 2.5}, {0: [2.25], 1: [2.5]}) is not None   # on two seeds they do not
