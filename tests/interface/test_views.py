"""The views in-process: the cases a CLI run would only repeat (NaN, the base, an invalid edit,
a loop holding the tag), and the schema failing a document that lost a field."""
from __future__ import annotations

import copy
import json
import os

import jsonschema
import pytest

from agent.interface.reading import git_diff, read_night
from agent.interface.views import Night, UnknownExperiment, experiment_view, status_view
from agent.preflight.lock import TagLock
from agent.program import load_program
from agent.record.events import DecisionMade
from agent.record.ledger import read_events
from agent.record.state import fold
from tests.interface.night import TAG
from tests.interface.strict import validate


def read(night) -> Night:
    return read_night(load_program(night.repo / "program.md"), night.folder)


def show(night, experiment_id: str) -> dict:
    document = experiment_view(read(night), experiment_id, git_diff(night.repo))
    validate(document, "experiment")
    return document


def strict_json(document: dict) -> dict:
    return json.loads(json.dumps(document, allow_nan=False))


def test_nan_in_the_ledger_is_null_in_the_document(night):
    shown = show(night, "e0002")
    assert shown["runs"][0]["dynamics"]["grad_norm"] is None      # result.json's NaN
    assert shown["runs"][0]["dynamics"]["tokens_per_s"] == 51200.0
    assert shown["decision"]["p_value"] is None                     # a NaN p-value
    assert strict_json(shown) == shown
    status = status_view(read(night))
    assert strict_json(status) == status


def test_the_base_and_an_incumbent_before_any_keep(night):
    base = show(night, "base")
    assert (base["kind"], base["id"], base["commit"], base["parent"]) == ("base", "base", night.base, None)
    assert base["verdict"] is None and base["diff"] == "" and base["runs"] == []
    assert [r["seed"] for r in base["reference_runs"]] == [0, 1] and all(r["counted"] for r in base["reference_runs"])
    events = list(read_events(night.folder))
    before_keep = events[:next(i for i, e in enumerate(events) if isinstance(e, DecisionMade))]
    early = Night(TAG, night.folder, fold(before_keep), read(night).program)
    shown = experiment_view(early, "incumbent", git_diff(night.repo))
    assert shown["kind"] == "base" and shown["commit"] == night.base


def test_an_invalid_edit_shows_its_recorded_diff_and_reason(night):
    shown = show(night, "e0003")
    assert shown["verdict"] == "invalid" and shown["commit"] is None
    assert shown["invalid_reason"] == "noise.py does not parse" and "+WIDTH = (" in shown["diff"]
    flagged = show(night, "e0004")
    assert flagged["verdict"] == "misreported" and flagged["runs"][0]["reported"] == 0.5
    assert flagged["runs"][0]["counted"] and flagged["parent_runs"][0]["seed"] == 2


def test_a_pending_experiment_shows_its_run_in_flight(night):
    shown = show(night, "e0005")
    assert shown["verdict"] == "pending" and shown["runs"] == [] and shown["hypothesis_id"] == "h0001"
    assert [(r["seed"], r["role"], r["device"]) for r in shown["in_flight"]] == [(2, "candidate", "cpu:0")]


def test_a_loop_holding_the_tag_is_running(night):
    lock = TagLock.acquire(night.folder, TAG)
    try:
        status = status_view(read(night))
    finally:
        lock.release()
    validate(status, "status")
    assert status["running"] is True and status["lock"]["pid"] == os.getpid()
    assert status_view(read(night))["running"] is False


def test_an_unknown_id_is_an_error_naming_the_known_ones(night):
    with pytest.raises(UnknownExperiment, match=r"no experiment 'nope'.*5 experiments: e0001, e0002"):
        experiment_view(read(night), "nope", git_diff(night.repo))


@pytest.mark.parametrize("name, path", [
    ("status", ("noise",)),
    ("status", ("incumbent", "values")),
    ("status", ("experiments", 0, "delta")),
    ("status", ("in_flight", 0, "started")),
    ("experiment", ("diff",)),
    ("experiment", ("runs", 0, "dynamics")),
    ("experiment", ("runs", 0, "curve", "losses")),
    ("experiment", ("decision", "comparison", "paired")),
])
def test_a_document_that_lost_a_field_fails_its_schema(night, name, path):
    """The schemas require every field they describe: a view that stops printing one fails
    here (and in test_cli_json), not in an agent's hands."""
    whole = status_view(read(night)) if name == "status" else show(night, "e0001")
    validate(whole, name)
    broken = copy.deepcopy(whole)
    holder = broken
    for key in path[:-1]:
        holder = holder[key]
    del holder[path[-1]]
    with pytest.raises(jsonschema.ValidationError) as refused:
        validate(broken, name)
    assert f"{path[-1]!r} is a required property" in messages(refused.value)


def messages(error: jsonschema.ValidationError) -> list[str]:
    """The error's message and those of the alternatives it tried (a nullable object's anyOf)."""
    return [error.message] + [m for sub in error.context for m in messages(sub)]


def test_a_field_the_schema_does_not_describe_fails_too(night):
    whole = status_view(read(night))
    whole["kept"][0]["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError, match="surprise"):
        validate(whole, "status")
