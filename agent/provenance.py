"""What it takes to reproduce a run: the environment and the run's own facts.

`environment()` is measured once per loop invocation (importing torch is slow);
`run_record(...)` is written next to each run's result as provenance.json.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[str]:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


@lru_cache(maxsize=1)
def environment() -> dict[str, Any]:
    """Versions and hardware of the machine the harness runs on."""
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "nightshift": _version("nightshift"),
        "torch": _version("torch"),
        "numpy": _version("numpy"),
        "gpus": _gpus(),
    }
    try:
        import torch

        facts["cuda"] = torch.version.cuda
        facts["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        facts["cuda_available"] = torch.cuda.is_available()
        facts["gpu_count"] = torch.cuda.device_count()
    except Exception as error:  # torch missing or broken: record it, don't fail the loop
        facts["torch_error"] = repr(error)
    if facts["gpus"]:
        facts["driver"] = facts["gpus"][0].rsplit(",", 1)[-1].strip()
    return facts


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_provenance(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)
