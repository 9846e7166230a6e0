"""When a night stops: --max-experiments (decided by this invocation), and --hours or
--minutes (the wall clock of this invocation: no new run starts later)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class StopRules:
    max_experiments: int | None = None   # experiments decided by this invocation
    hours: float | None = None           # wall clock of this invocation
    minutes: float | None = None         # the same, counted in minutes (not with hours)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.hours is not None and self.minutes is not None:
            raise ValueError("give --hours or --minutes, not both")

    @property
    def seconds(self) -> float | None:
        if self.minutes is not None:
            return self.minutes * 60
        return None if self.hours is None else self.hours * 3600

    def time_is_up(self) -> bool:
        return self.seconds is not None and time.monotonic() - self.started >= self.seconds

    def deadline(self) -> float | None:
        """When --hours runs out, as epoch seconds (what a researcher's retries must respect)."""
        if self.seconds is None:
            return None
        return time.time() + self.seconds - (time.monotonic() - self.started)

    def reached(self, decided_here: int) -> str | None:
        if self.max_experiments is not None and decided_here >= self.max_experiments:
            return f"reached --max-experiments {self.max_experiments}"
        if self.time_is_up():
            return f"reached --minutes {self.minutes:g}" if self.minutes is not None else \
                f"reached --hours {self.hours:g}"
        return None
