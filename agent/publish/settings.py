"""program.md's `tracking:` record: where a night's numbers go besides its own ledger."""
from __future__ import annotations

from dataclasses import dataclass, field

WANDB_MODES = ("online", "offline")
# the program's settings a tracker shows on the night's run (from loop_started's program)
NIGHT_PARAMS = ("target", "command", "metric", "direction", "budget_s", "researcher", "decision",
                "alpha", "min_effect", "sandbox", "workers", "cluster")


def night_params(program: dict) -> dict:
    return {key: program.get(key) for key in NIGHT_PARAMS if key in program}


@dataclass(frozen=True)
class MlflowSettings:
    uri: str | None = None           # the tracking server (http://host:5000, file:, sqlite:); None: off
    experiment: str = "nightshift"   # the MLflow experiment the night's runs go to


@dataclass(frozen=True)
class WandbSettings:
    project: str | None = None       # None: off
    entity: str | None = None
    mode: str = "online"             # offline: files a later `wandb sync` uploads (WANDB_MODE wins)


@dataclass(frozen=True)
class Tracking:
    mlflow: MlflowSettings = field(default_factory=MlflowSettings)
    wandb: WandbSettings = field(default_factory=WandbSettings)
