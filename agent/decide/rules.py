"""The keep rules by name: the one place program.md's `decision:` values come from.

A rule is built from the program's `RuleSettings`; rules that do not use a setting ignore it.
Add a rule: implement `agent.decide.decision.DecisionRule` (its docstring is the contract),
give it a `name`, and list it in `RULES`.
"""
from __future__ import annotations

from agent.decide.decision import DecisionRule, NoiseBandRule, RuleSettings

RULES = ("sequential", "noise_band")   # the first is the default


def make_rule(name: str, settings: RuleSettings) -> DecisionRule:
    """The rule called `name`, configured by `settings`."""
    if name == "sequential":
        from agent.decide.sequential import SequentialRule   # scipy's statistics: only when chosen

        return SequentialRule(alpha=settings.alpha, min_effect=settings.min_effect,
                              baseline=settings.seeds.baseline, screen=settings.seeds.screen,
                              max_seeds=settings.seeds.max, fdr=settings.fdr,
                              repeat=settings.seeds.repeat)
    if name == "noise_band":
        return NoiseBandRule(seeds=settings.seeds.max, baseline=settings.seeds.baseline)
    raise ValueError(f"unknown decision rule {name!r}; choose one of {', '.join(RULES)}")
