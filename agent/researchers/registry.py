"""The researchers by name: the one place program.md's `researcher:` values come from.

"auto" means external when the night is started from inside a coding agent's session (Claude
Code, Codex: the agent is the researcher, and the API key it passes on is the agent's, not one
the user gave Nightshift), else claude when ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) is set,
else optuna; `openai` (an OpenAI-compatible endpoint, local models included), claude through
Bedrock or Vertex, and `external` (an agent proposing through `nightshift propose`) are chosen
explicitly. The CLI prints the choice and its reason, e.g.
"researcher: optuna (ANTHROPIC_API_KEY not set)". Each researcher is imported only when
chosen (the SDKs, Optuna and their start-up cost stay out of a night that does not use them).
Add a researcher: implement `base.Researcher`, give it a `name`, list the name here and
build it in `make_researcher`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Mapping

from agent.record.records import Direction
from agent.researchers.base import Researcher, ResearcherError
from agent.researchers.settings import ClaudeSettings, OpenAISettings

RESEARCHER_NAMES = ("auto", "claude", "external", "openai", "optuna", "scripted")
# What a coding agent sets in the environment of the commands it runs (measured with the real
# CLIs: tests/agents). Started from there, "auto" never starts a second, nested researcher on
# the agent's key.
AGENT_SESSION_MARKERS = (("CLAUDECODE", "Claude Code"), ("CODEX_THREAD_ID", "Codex"),
                         ("CODEX_SESSION_ID", "Codex"), ("AI_AGENT", "coding agent"))


def resolve_researcher_name(name: str, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(concrete name, why) for `name`; resolves "auto" from the environment."""
    env = os.environ if env is None else env
    if name not in RESEARCHER_NAMES:
        raise ResearcherError(f"unknown researcher {name!r}; choose one of {', '.join(RESEARCHER_NAMES)}")
    if name != "auto":
        return name, "chosen explicitly"
    for variable, agent in AGENT_SESSION_MARKERS:
        if env.get(variable):
            return "external", (f"started from a {agent} session ({variable} is set): the agent "
                                f"proposes through `nightshift propose`; --researcher claude "
                                f"starts the API researcher instead")
    for variable in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        if env.get(variable):
            return "claude", f"{variable} is set"
    return "optuna", "ANTHROPIC_API_KEY not set"


def make_researcher(name: str, *, state_dir: Path, direction: Direction = Direction.MINIMIZE,
                    claude: ClaudeSettings | None = None, openai: OpenAISettings | None = None,
                    script: Path | None = None, seed: int = 0, env: Mapping[str, str] | None = None,
                    experiment_detail: Callable[[str], str] | None = None,
                    knobs: Mapping[str, str] | None = None, results: Path | None = None,
                    taken: Iterable[str] = (), silence_s: float | None = None) -> Researcher:
    """A ready researcher. `state_dir` holds what it must keep across restarts (created here);
    `direction` is the metric's; `claude` and `openai` the program's typed settings.
    `experiment_detail(id)` returns one experiment's diff and log tail, for researchers that
    can ask for it; `knobs` is program.md's `knobs:` for the optuna researcher; `results`
    (the tag's folder, its inbox), `taken` (proposal ids the ledger holds) and `silence_s`
    are the external researcher's. Raises
    ResearcherError with the fix when it cannot be built."""
    resolved, _ = resolve_researcher_name(name, env)
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    if resolved == "optuna":
        from agent.researchers.optuna_researcher import OptunaResearcher

        return OptunaResearcher(state_dir, seed=seed, direction=direction, knobs=dict(knobs or {}))
    if resolved == "external":
        from agent.researchers.external import DEFAULT_SILENCE_S, ExternalResearcher

        return ExternalResearcher(results if results is not None else state_dir.parent, taken=taken,
                                  silence_s=DEFAULT_SILENCE_S if silence_s is None else silence_s)
    if resolved == "scripted":
        if script is None:
            raise ResearcherError("the scripted researcher needs a script: pass --script PATH "
                                  "(a JSON or YAML list of proposals)")
        from agent.researchers.scripted import ScriptedResearcher

        return ScriptedResearcher.from_file(Path(script))
    if resolved == "openai":
        try:
            from agent.researchers.openai_researcher import OpenAIResearcher
        except ImportError as exc:
            raise ResearcherError(f"the openai researcher needs the openai SDK ({exc}): "
                                  f"pip install -e '.[openai]'") from exc
        return OpenAIResearcher(state_dir=state_dir, settings=openai or OpenAISettings(),
                                experiment_detail=experiment_detail, env=env)
    try:
        from agent.researchers.claude import ClaudeResearcher
    except ImportError as exc:
        raise ResearcherError(f"the claude researcher is unavailable: {exc}; "
                              f"use --researcher optuna") from exc
    return ClaudeResearcher(state_dir=state_dir, settings=claude or ClaudeSettings(),
                            experiment_detail=experiment_detail, env=env)
