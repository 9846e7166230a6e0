"""The report's ablation panel: each `nightshift ablate` of the tag, from its ledger events.

One entry per ablation, in the order they ran: the plan (which changes, which reverts could
not be built and why), how many of its runs have landed (so a page watching it live shows
progress), each change's contribution with its interval as a bar, and the summary (the whole
gain against the sum of the contributions, and the interaction between them).
"""
from __future__ import annotations

from typing import Any, Iterable

from agent.record.events import (AblationChange, AblationPlanned, AblationRun, AblationSummary,
                                 Event, encode)
from sandbox import Status

BAR_WIDTH = 260          # px of the contribution bars' axis


def ablation_panels(events: Iterable[Event]) -> list[dict[str, Any]]:
    """One entry per ablation of the tag (see the module docstring)."""
    found: dict[str, dict[str, Any]] = {}
    for event in events:
        if isinstance(event, AblationPlanned):
            runnable = 2 + sum(1 for v in event.variants if v.get("variant_commit"))
            found[event.ablation_id] = {"id": event.ablation_id, "plan": encode(event),
                                        "runs": 0, "failed": 0, "changes": [], "summary": None,
                                        "total_runs": runnable * len(event.seeds)}
            continue
        entry = found.get(getattr(event, "ablation_id", ""))
        if entry is None:
            continue
        if isinstance(event, AblationRun):
            entry["runs"] += 1
            entry["failed"] += event.status != Status.OK
        elif isinstance(event, AblationChange):
            entry["changes"].append({**encode(event), "matters": matters(event.interval)})
        elif isinstance(event, AblationSummary):
            entry["summary"] = encode(event)
    for entry in found.values():
        _bars(entry)
        planned = {v["experiment"]: v for v in entry["plan"]["variants"]}
        entry["pending"] = [v for name, v in planned.items()
                            if name not in {c["experiment"] for c in entry["changes"]}]
    return list(found.values())


def matters(interval: Any) -> str | None:
    """"helps" / "hurts" when the interval excludes 0 on that side, "no" when it covers 0."""
    if not interval:
        return None
    if interval[0] > 0:
        return "helps"
    if interval[1] < 0:
        return "hurts"
    return "no"


def _bars(entry: dict[str, Any]) -> None:
    """Geometry of the contribution bars on one shared axis that holds 0 and every interval."""
    summary = entry["summary"] or {}
    ends = [0.0]
    for row in entry["changes"]:
        ends += [v for v in (row.get("contribution"), *(row.get("interval") or ())) if v is not None]
    ends += [v for v in (summary.get("full_gain"), summary.get("interaction")) if v is not None]
    lo, hi = min(ends), max(ends)
    span = (hi - lo) or 1.0

    def x(value: float) -> float:
        return round(BAR_WIDTH * (value - lo) / span, 1)

    entry["axis"] = {"width": BAR_WIDTH, "zero": x(0.0), "lo": lo, "hi": hi}
    for row in entry["changes"]:
        value, interval = row.get("contribution"), row.get("interval")
        if value is None:
            row["bar"] = None
            continue
        row["bar"] = {"x": min(x(0.0), x(value)), "w": max(abs(x(value) - x(0.0)), 1.0),
                      "lo": x(interval[0]) if interval else None,
                      "hi": x(interval[1]) if interval else None, "at": x(value)}
