"""Comparisons that a drifting machine cannot fool (issue 29): which incumbent runs a
candidate is compared with, by when they ran.

A run carries the machine of its time. When the machine's speed drifts during a night (load,
thermals, another job), an incumbent run made long before a candidate differs from it by the
drift as well as by the change, and the drift poses as an effect. Three remedies, each a pure
function of the run order the ledger records (`Evidence.reference_order`, `candidate_order`,
`incumbent_runs`); agent/decide/sequential.py decides where each applies:

- `close_in_time`: outside the paired regime, a comparison rests on the latest incumbent runs
  (and those beside the candidate), not on every run of a long reign;
- `made_before`: in the paired regime, the candidate's pairs whose incumbent half ran before
  it, which a keep waits on until the incumbent has run the seed again after it (a bracket);
- `at_candidate_time`: the incumbent's value on a seed at the candidate's time, interpolated
  between the runs around it, so a linear drift cancels whatever its sign.
"""
from __future__ import annotations

from agent.decide.decision import Evidence


def close_in_time(reference: dict[int, float], order: dict[int, int], plan: tuple[int, ...],
                  recent: int) -> dict[int, float]:
    """The incumbent runs a comparison rests on: the latest `recent` of them (by `order`, the
    place each seed's run landed) and every one on a seed of the candidate's `plan` (its
    window's: run beside it). The mean of every run of a long reign lags behind a drifting
    machine (and, as runs close in time share the drift, looks like seeds sharing noise: a
    drifting night measures as "mixed"). Without the order (an older ledger), every run counts."""
    if not order or len(reference) <= recent:
        return reference
    latest = sorted((s for s in reference if s in order), key=order.__getitem__)[-recent:]
    keep = set(latest) | {s for s in reference if s not in order} | set(plan)
    return {s: v for s, v in reference.items() if s in keep}


def made_before(evidence: Evidence, candidate: dict[int, float],
                reference: dict[int, float]) -> tuple[int, ...]:
    """The candidate's paired seeds where every incumbent run came before the candidate's.
    Where a seed fixes the run a keep rests on pairs whose incumbent half may have run long
    before (the selecting runs it reuses), and a re-run reproduces a seed to a few
    thousandths, so a machine that speeds up by as much during the night poses as an effect.
    One more incumbent run after the candidate's brackets it (`at_candidate_time`). Empty
    without the run order."""
    if not evidence.candidate_order:
        return ()
    return tuple(s for s in candidate if s in reference and s in evidence.candidate_order
                 and not any(place > evidence.candidate_order[s]
                             for place, _ in evidence.incumbent_runs.get(s, ())))


def at_candidate_time(evidence: Evidence, seed: int) -> float | None:
    """The incumbent's value on `seed` at the time of the candidate's run there: linear
    between the last incumbent run before it and the first after it, where both exist (a
    bracket), else the nearest of them in time. None where the order is not known (an
    older ledger, or the incumbent never ran the seed): the caller's value stands. Weighing
    two runs, the interpolated value is never noisier than one run, so a test that counts
    it as one run stays conservative."""
    place = evidence.candidate_order.get(seed)
    runs = evidence.incumbent_runs.get(seed, ())
    if place is None or not runs:
        return None
    before = [(p, v) for p, v in runs if p < place]
    after = [(p, v) for p, v in runs if p > place]
    if before and after:
        (p0, v0), (p1, v1) = before[-1], after[0]
        return v0 + (v1 - v0) * (place - p0) / (p1 - p0)
    return before[-1][1] if before else after[0][1]
