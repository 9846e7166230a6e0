"""The scripted researcher: replays a fixed list of proposals, in order. For tests and demos.

Each item of the script is one of:
- a string: the complete new source of the target;
- {"source": "..."} or {"source_file": "path"} (relative to the script file): a complete source;
- {"replace": [old, new]} or {"replace": [[old, new], ...]}: exact text replacements applied to
  the incumbent (each `old` must occur in it);
- {"knobs": {"LR": 1e-3}}: new values for annotated knobs (see agent.target.knobs).
Dict items may also carry "description", "hypothesis", "hypothesis_id" and "prediction"
({direction, expected_delta, interval, confidence, rationale}); sensible defaults otherwise.

The script position is `context.experiment_index - 1`, so the researcher holds no state and a
resumed loop continues where it stopped. Past the end it raises ResearcherError, which stops
the loop cleanly.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import yaml

from agent.target.knobs import KnobError, format_value, knob_values, set_knobs
from agent.researchers.base import Prediction, Proposal, ResearchContext, Researcher, ResearcherError

DEFAULT_NOISE_SD = 0.05
_ITEM_KEYS = {"source", "source_file", "replace", "knobs", "description", "hypothesis",
              "hypothesis_id", "prediction"}
_CHANGE_KEYS = ("source", "source_file", "replace", "knobs")


class ScriptedResearcher(Researcher):
    name = "scripted"

    def __init__(self, items: Sequence[str | dict[str, Any]], base_dir: Path | None = None,
                 origin: str = "script") -> None:
        """`items` as in the module doc; `base_dir` resolves `source_file`; `origin` names the
        script in error messages."""
        self.origin = origin
        self.items = [self._load_item(i, item, base_dir) for i, item in enumerate(items)]

    @classmethod
    def from_file(cls, path: Path) -> "ScriptedResearcher":
        """Load a script from JSON or YAML: a list of items, or {"proposals": [items]}."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ResearcherError(f"scripted researcher: cannot read {path}: {exc}") from exc
        try:
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            raise ResearcherError(f"scripted researcher: {path} is not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from exc
        if isinstance(data, dict) and "proposals" in data:
            data = data["proposals"]
        if not isinstance(data, list):
            raise ResearcherError(f"scripted researcher: {path} must hold a list of proposals "
                                  f"(or a mapping with a 'proposals' list)")
        return cls(data, base_dir=path.parent, origin=str(path))

    def propose(self, context: ResearchContext) -> Proposal:
        position = context.experiment_index - 1
        if not 0 <= position < len(self.items):
            raise ResearcherError(
                f"scripted researcher: no more proposals ({self.origin} has {len(self.items)}, "
                f"experiment {context.experiment_index} asked)")
        item = self.items[position]
        where = f"{self.origin} item {position + 1}"
        source, auto_description = self._apply(item, context.incumbent_source, where)
        if source == context.incumbent_source:
            raise ResearcherError(f"scripted researcher: {where} leaves {context.target} unchanged")
        noise = context.noise_sd if context.noise_sd else DEFAULT_NOISE_SD
        if "prediction" in item:
            try:
                prediction = Prediction.from_dict(item["prediction"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ResearcherError(f"scripted researcher: {where}: bad prediction: {exc!r}") from exc
        else:
            prediction = Prediction("same", 0.0, (-2 * noise, 2 * noise), 0.8,
                                    rationale="scripted: no prediction given; no effect expected")
        return Proposal(
            source=source,
            description=str(item.get("description") or auto_description),
            hypothesis=str(item.get("hypothesis") or f"scripted change {position + 1}"),
            prediction=prediction,
            hypothesis_id=item.get("hypothesis_id"),
            extra={"script_position": position},
        )

    # ---- items -----------------------------------------------------------------------------

    def _load_item(self, index: int, item: Any, base_dir: Path | None) -> dict[str, Any]:
        where = f"{self.origin} item {index + 1}"
        if isinstance(item, str):
            return {"source": item}
        if not isinstance(item, dict):
            raise ResearcherError(f"scripted researcher: {where} must be a source string or a mapping, got {type(item).__name__}")
        unknown = sorted(set(item) - _ITEM_KEYS)
        if unknown:
            raise ResearcherError(f"scripted researcher: {where}: unknown key(s) {', '.join(unknown)}; "
                                  f"allowed: {', '.join(sorted(_ITEM_KEYS))}")
        changes = [k for k in _CHANGE_KEYS if k in item]
        if len(changes) != 1:
            raise ResearcherError(f"scripted researcher: {where} needs exactly one of "
                                  f"{', '.join(_CHANGE_KEYS)}; has {', '.join(changes) or 'none'}")
        item = dict(item)
        if "source_file" in item:
            path = Path(item.pop("source_file"))
            path = path if path.is_absolute() or base_dir is None else base_dir / path
            try:
                item["source"] = path.read_text()
            except OSError as exc:
                raise ResearcherError(f"scripted researcher: {where}: cannot read source_file {path}: {exc}") from exc
        if "replace" in item:
            item["replace"] = _replace_pairs(item["replace"], where)
        if "knobs" in item and not isinstance(item["knobs"], dict):
            raise ResearcherError(f"scripted researcher: {where}: 'knobs' must map knob names to values")
        return item

    def _apply(self, item: dict[str, Any], incumbent: str, where: str) -> tuple[str, str]:
        """(new source, a default one-line description)."""
        if "source" in item:
            return item["source"], f"scripted source ({where})"
        if "replace" in item:
            source = incumbent
            for old, new in item["replace"]:
                if old not in source:
                    raise ResearcherError(f"scripted researcher: {where}: text to replace not found "
                                          f"in the incumbent: {old[:60]!r}")
                source = source.replace(old, new, 1)
            first_old, first_new = item["replace"][0]
            return source, f"replace {_short(first_old)} -> {_short(first_new)}"
        try:
            before = knob_values(incumbent)
            source = set_knobs(incumbent, item["knobs"])
        except KnobError as exc:
            raise ResearcherError(f"scripted researcher: {where}: {exc}") from exc
        description = ", ".join(f"{n} {format_value(before[n])} -> {format_value(v)}"
                                for n, v in item["knobs"].items())
        return source, description


def _replace_pairs(value: Any, where: str) -> list[tuple[str, str]]:
    pairs = [value] if (isinstance(value, list) and len(value) == 2
                        and all(isinstance(v, str) for v in value)) else value
    if not isinstance(pairs, list) or not pairs or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, str) for v in p)
            for p in pairs):
        raise ResearcherError(f"scripted researcher: {where}: 'replace' must be [old, new] or "
                              f"[[old, new], ...] with strings")
    return [(old, new) for old, new in pairs]


def _short(text: str, width: int = 30) -> str:
    line = " ".join(text.split())
    return repr(line if len(line) <= width else line[: width - 1] + "…")
