"""program.md's `tracking:` record: where a night's numbers go besides its own ledger."""
from __future__ import annotations

from dataclasses import dataclass, field

WANDB_MODES = ("online", "offline")


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
