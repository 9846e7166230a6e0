"""The scripted researcher: replays sources, replacements and knob settings in order."""
import json

import pytest
import yaml

from agent.record.records import Direction
from agent.target.knobs import knob_values
from agent.researchers.base import ResearchContext, ResearcherError
from agent.researchers.scripted import ScriptedResearcher

SOURCE = '''LR = 3e-3        # search: log(1e-4, 3e-2)
N_LAYER = 4      # search: int(2, 8)
ACT = "gelu"
'''


def context(index: int, source: str = SOURCE) -> ResearchContext:
    return ResearchContext(
        program_text="", target="train/train.py", incumbent_source=source, incumbent_commit="c0",
        protected={}, ledger_summary="", metric="val_bpb", direction=Direction.MINIMIZE, noise_sd=0.02,
        incumbent_value=None, experiment_index=index)


def test_replace_item_edits_the_incumbent_with_its_description_and_prediction():
    researcher = ScriptedResearcher([{
        "replace": ['ACT = "gelu"', 'ACT = "relu"'], "description": "relu instead of gelu",
        "hypothesis": "relu is cheaper", "hypothesis_id": "h7",
        "prediction": {"direction": "worsen", "expected_delta": 0.01, "interval": [0.0, 0.03],
                       "confidence": 0.7},
    }])
    p = researcher.propose(context(1))
    assert p.source == SOURCE.replace("gelu", "relu")
    assert (p.description, p.hypothesis, p.hypothesis_id) == ("relu instead of gelu", "relu is cheaper", "h7")
    assert p.prediction.direction == "worsen" and p.prediction.interval == (0.0, 0.03)
    assert p.prediction.confidence == 0.7


def test_several_replacements_and_default_texts():
    researcher = ScriptedResearcher([{"replace": [["gelu", "silu"], ["N_LAYER = 4", "N_LAYER = 5"]]}])
    p = researcher.propose(context(1))
    assert '"silu"' in p.source and "N_LAYER = 5" in p.source
    assert p.description.startswith("replace 'gelu' -> 'silu'")
    assert p.prediction.direction == "same" and p.prediction.interval == (-0.04, 0.04)


def test_knobs_item_sets_values_and_describes_them():
    p = ScriptedResearcher([{"knobs": {"LR": 1e-3, "N_LAYER": 6}}]).propose(context(1))
    assert knob_values(p.source) == {"LR": 1e-3, "N_LAYER": 6}
    assert p.description == "LR 3e-3 -> 1e-3, N_LAYER 4 -> 6"


def test_a_full_source_item_replaces_the_file():
    p = ScriptedResearcher(["print('hello')\n"]).propose(context(1))
    assert p.source == "print('hello')\n"


def test_position_follows_the_experiment_index_and_exhaustion_stops_cleanly():
    researcher = ScriptedResearcher([{"knobs": {"N_LAYER": 5}}, {"knobs": {"N_LAYER": 6}}])
    assert knob_values(researcher.propose(context(2)).source)["N_LAYER"] == 6   # a resumed loop
    assert knob_values(researcher.propose(context(1)).source)["N_LAYER"] == 5
    with pytest.raises(ResearcherError, match="scripted researcher: no more proposals"):
        researcher.propose(context(3))


def test_item_that_cannot_apply_names_itself():
    researcher = ScriptedResearcher([{"replace": ["not there", "x"]}, {"knobs": {"NOPE": 1}},
                                     {"replace": ["N_LAYER = 4", "N_LAYER = 4"]}])
    with pytest.raises(ResearcherError, match="item 1: text to replace not found"):
        researcher.propose(context(1))
    with pytest.raises(ResearcherError, match="item 2: no annotated knob named NOPE"):
        researcher.propose(context(2))
    with pytest.raises(ResearcherError, match="item 3 leaves train/train.py unchanged"):
        researcher.propose(context(3))


@pytest.mark.parametrize("item, message", [
    ({"description": "nothing to do"}, "needs exactly one of"),
    ({"knobs": {"LR": 1e-3}, "replace": ["a", "b"]}, "needs exactly one of"),
    ({"knobs": {"LR": 1e-3}, "colour": "red"}, "unknown key"),
    ({"replace": "just a string"}, "'replace' must be"),
    (42, "must be a source string or a mapping"),
])
def test_malformed_items_are_refused_at_load(item, message):
    with pytest.raises(ResearcherError, match=f"item 1.*{message}|item 1 {message}"):
        ScriptedResearcher([item])


def test_loads_yaml_and_json_files_with_source_files(tmp_path):
    (tmp_path / "v2.py").write_text("print(2)\n")
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"proposals": [
        {"knobs": {"LR": 1e-3}, "hypothesis": "lower LR"},
        {"source_file": "v2.py", "description": "swap the file"},
    ]}))
    researcher = ScriptedResearcher.from_file(tmp_path / "script.yaml")
    assert researcher.propose(context(1)).hypothesis == "lower LR"
    assert researcher.propose(context(2)).source == "print(2)\n"
    (tmp_path / "script.json").write_text(json.dumps([{"replace": ["gelu", "tanh"]}]))
    assert "tanh" in ScriptedResearcher.from_file(tmp_path / "script.json").propose(context(1)).source


def test_unreadable_or_malformed_files_are_errors_naming_the_file(tmp_path):
    with pytest.raises(ResearcherError, match="cannot read"):
        ScriptedResearcher.from_file(tmp_path / "missing.yaml")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ResearcherError, match="bad.json is not valid json"):
        ScriptedResearcher.from_file(tmp_path / "bad.json")
    (tmp_path / "scalar.yaml").write_text("just text\n")
    with pytest.raises(ResearcherError, match="scalar.yaml must hold a list"):
        ScriptedResearcher.from_file(tmp_path / "scalar.yaml")
