"""Hostile training scripts, one per way an experiment can misbehave, for every backend.

Each `<name>.py` here is a stdlib-only "training script" (copy it into a snapshot as
`train.py`). `EXPECTED[name]` is the status a correct sandbox reports for it, and `ENV`
the extra variables some need (values filled in by the test: a port, a path). Scripts
that probe the sandbox write what they saw to `$NIGHTSHIFT_OUT/<name>.json`.
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent

EXPECTED = {
    "ok": "ok",                  # result.json with val_bpb and a printed summary
    "crash": "crash",            # raises ValueError
    "sleep": "timeout",          # ignores SIGTERM and sleeps past budget + grace
    "escape": "ok",              # setsid child that ignores SIGTERM outlives its parent
    "forkbomb": "ok",            # forks until refused (stops by itself at 2000)
    "memory_hog": "oom",         # allocates past the memory limit (stops by itself at 3 GB)
    "network": "ok",             # TCP to HOSTILE_PORT on 127.0.0.1 and a DNS lookup
    "write_outside": "ok",       # writes to HOSTILE_OUTSIDE, the snapshot, /tmp
    "flood": "ok",               # prints HOSTILE_MB megabytes
    "bad_utf8": "ok",            # prints invalid UTF-8
    "no_metric": "no_metric",    # exits 0 without reporting val_bpb
    "nan_metric": "bad_metric",  # reports val_bpb = NaN
    "summary_only": "ok",        # val_bpb only in the printed `key: value` summary
    "env_dump": "ok",            # writes its whole environment
}


def script(name: str) -> Path:
    """The path of hostile script `name` (a key of EXPECTED)."""
    path = HERE / f"{name}.py"
    if name not in EXPECTED or not path.exists():
        raise KeyError(f"no hostile script {name!r}; known: {sorted(EXPECTED)}")
    return path
