"""When a night stops: --max-experiments (decided by this invocation) and --hours."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class StopRules:
    max_experiments: int | None = None   # experiments decided by this invocation
    hours: float | None = None           # wall clock of this invocation
    started: float = field(default_factory=time.monotonic)

    def time_is_up(self) -> bool:
        return self.hours is not None and time.monotonic() - self.started >= self.hours * 3600

    def deadline(self) -> float | None:
        """When --hours runs out, as epoch seconds (what a researcher's retries must respect)."""
        if self.hours is None:
            return None
        return time.time() + self.hours * 3600 - (time.monotonic() - self.started)

    def reached(self, decided_here: int) -> str | None:
        if self.max_experiments is not None and decided_here >= self.max_experiments:
            return f"reached --max-experiments {self.max_experiments}"
        if self.time_is_up():
            return f"reached --hours {self.hours:g}"
        return None
