"""Which device each worker gets: one GPU per worker where there are GPUs, else a share of
the cores, so runs side by side do not fight over the same hardware."""
from __future__ import annotations

import os
import subprocess

from cluster.protocol import Slot


def visible_gpus() -> list[int]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else what nvidia-smi
    lists (empty without a driver)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [int(part) for part in listed.split(",") if part.strip().isdigit()]
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(line) for line in done.stdout.split() if line.strip().isdigit()]


def usable_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        list(range(os.cpu_count() or 1))


def auto_workers(gpus: list[int]) -> int:
    """`workers: auto`: one per visible GPU, else one (a CPU run uses every core)."""
    return len(gpus) or 1


def plan_slots(workers: int, gpus: list[int], cores: list[int]) -> list[Slot]:
    """`workers` slots: GPU i for worker i (round robin past the last GPU), or contiguous
    shares of the cores (one core each, round robin, past one worker per core). A single CPU
    worker keeps every core, as a serial night does."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if gpus:
        return [Slot(i, f"cuda:{gpus[i % len(gpus)]}", gpu=gpus[i % len(gpus)]) for i in range(workers)]
    if workers == 1:
        return [Slot(0, "cpu")]
    slots = []
    for i in range(workers):
        if workers <= len(cores):
            lo, hi = i * len(cores) // workers, (i + 1) * len(cores) // workers
            share = tuple(cores[lo:hi])
        else:
            share = (cores[i % len(cores)],)
        slots.append(Slot(i, f"cpu:{_span(share)}", cpuset=share))
    return slots


def _span(cores: tuple[int, ...]) -> str:
    if len(cores) > 1 and cores == tuple(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(str(c) for c in cores)
