"""What it takes to reproduce a run: the environment and the run's own facts.

`environment()` is measured once per process (importing torch is slow). The run executor
(`agent.run.executor`) writes one `provenance.json` per run next to its result, a
`Provenance` record:

    run_id, commit, parent, diff (git patch parent -> commit), target_digest {path: sha256},
    protected_digests {path: sha256}, seed, role, experiment, budget_s, grace_s, command,
    split, data_dir, data_meta (corpus_hash, split rule, sizes), data_hash (the prepare step's
    corpus_hash, else the content hash of the data: folder), sandbox {backend, image,
    image_id, image_digests, isolation facts}, environment {python, torch, numpy, cuda, cudnn,
    driver, gpus, gpu_count, cpu_model, cpu_count, hostname, platform, nightshift},
    env_fingerprint, determinism {seed, seeding, budget_kind, ...: what was observed},
    data_mount {path, source, files, bytes, stat_digest}, outputs {kept, dropped, ...},
    started_at, ended_at

and records `env_fingerprint` in the ledger's run_finished event, so two runs whose
environments differ can be told apart without opening files. `compare_environments` lists
what differs between two provenance records; `nightshift replay` uses it to flag a replay
that did not run where the original did.

The environment is the harness's; with the docker backend the interpreter inside the image
is pinned by `sandbox.image_id`, which is compared as well.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from agent.record.codec import decode, encode
from agent.record.records import Role

PROVENANCE_FILE = "provenance.json"

# Facts that change what a run measures: a difference here makes a replay "environment changed".
MATERIAL_FIELDS = ("python", "torch", "numpy", "cuda", "cudnn", "driver", "gpus", "gpu_count",
                   "cpu_model", "cpu_count")
# Facts worth listing when they differ but that do not by themselves change a measurement
# (nightshift is the harness: it does not compute the metric, and its version moves often).
INFORMATIONAL_FIELDS = ("nightshift", "hostname", "platform")
# Variables that change bitwise reproducibility when set in a run's environment.
DETERMINISM_ENV = ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                   "CUDA_LAUNCH_BLOCKING", "TORCH_DETERMINISTIC")


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _nightshift_version() -> str | None:
    """The installed version, or (running from a checkout) pyproject's version plus the
    checkout's commit, so two source trees of the same version stay distinguishable."""
    installed = _version("nightshift")
    if installed:
        return installed
    root = Path(__file__).resolve().parents[2]
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    version = next((line.split("=", 1)[1].strip().strip('"') for line in text.splitlines()
                    if line.startswith("version")), "unknown")
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        head = ""
    return f"{version}+source.{head}" if head else f"{version}+source"


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
    """Versions and hardware of the machine the harness runs on (cached per process)."""
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "nightshift": _nightshift_version(),
        "torch": _version("torch"),
        "numpy": _version("numpy"),
        "gpus": _gpus(),
        "driver": None,
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


def fingerprint(env: Mapping[str, Any]) -> str:
    """A short hash of the material facts of an environment: equal fingerprints, same setup."""
    material = {key: env.get(key) for key in MATERIAL_FIELDS}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:16]


def determinism(seed: int, run_env: Mapping[str, str], *, seed_passed: str = "NIGHTSHIFT_SEED",
                seeding: tuple[str, str] = ("unobserved", "not observed"),
                budget: tuple[str, str] = ("unknown", "not judged")) -> dict[str, Any]:
    """What fixes (and what does not fix) a run's randomness: what the harness observed, not
    what it hopes. `seeding` and `budget` are (kind, sentence) as judged by the harness
    (agent.preflight.checks): seeding "varies" | "identical" | "unobserved", budget "wall_clock"
    | "step" | "over_budget" | "unknown"."""
    return {
        "seed": seed,
        "seed_passed_as": seed_passed,
        "seeding": seeding[0], "seeding_note": seeding[1],
        "budget_kind": budget[0], "budget_note": budget[1],
        "run_env": {key: run_env[key] for key in DETERMINISM_ENV if key in run_env},
    }


@dataclass(frozen=True)
class Provenance:
    """How to reproduce one run: what ran (commit, diff, digests, command, seed), on what data,
    in which sandbox and environment, and what the harness observed of its randomness. The
    JSON keys are the field names, as the first harnesses wrote them; a record written before
    a field existed reads with its default, and a key a newer harness adds is ignored. The
    nested facts (environment, sandbox, grading, ...) stay plain JSON objects: their keys
    depend on the backend and the machine."""

    run_id: str = ""
    commit: str = ""
    parent: str | None = None
    diff: str = ""                      # git patch parent -> commit ("" when too long)
    diff_omitted: str | None = None     # why `diff` is empty: its size and the git command
    target_digest: dict[str, str] = field(default_factory=dict)      # path -> sha256
    seed: int | None = None
    role: Role | None = None
    experiment: str | None = None
    budget_s: float | None = None
    grace_s: float | None = None
    command: str | None = None
    split: str | None = None
    run_env: dict[str, str] = field(default_factory=dict)
    python: str | None = None
    protected_digests: dict[str, str] = field(default_factory=dict)  # path -> sha256 after the run
    data_dir: str | None = None
    data_meta: dict[str, Any] = field(default_factory=dict)    # corpus_hash, split rule, sizes
    data_hash: str | None = None        # the prepare step's corpus_hash, else the data: folder's
    data_mount: list[dict[str, Any]] = field(default_factory=list)
    sandbox: dict[str, Any] = field(default_factory=dict)      # backend, image, isolation facts
    grading: dict[str, Any] = field(default_factory=dict)      # who measured, probes, splits
    outputs: dict[str, Any] = field(default_factory=dict)      # kept, dropped, tracked changes
    worker: dict[str, Any] = field(default_factory=dict)       # index, device, node, job_id
    environment: dict[str, Any] = field(default_factory=dict)  # see `environment()`
    env_fingerprint: str | None = None
    determinism: dict[str, Any] = field(default_factory=dict)  # see `determinism()`
    started_at: str | None = None
    ended_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Provenance":
        return decode(cls, {key: value for key, value in data.items() if value is not None})


def write_provenance(path: Path, record: Provenance) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record.to_dict(), indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


def read_provenance(run_dir: Path) -> Provenance | None:
    """The provenance.json of a run folder, or None when absent or unreadable."""
    try:
        data = json.loads((Path(run_dir) / PROVENANCE_FILE).read_text(encoding="utf-8"))
        return Provenance.from_dict(data)
    except (OSError, ValueError, TypeError, AttributeError):
        return None


# ---- comparing two runs' environments ---------------------------------------------------

@dataclass(frozen=True)
class Difference:
    field: str
    original: Any
    current: Any
    material: bool           # False for facts like the hostname that do not change a measurement

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.field}: {self.original!r} -> {self.current!r}"


def comparable_facts(record: Provenance | Mapping[str, Any]) -> dict[str, tuple[Any, bool]]:
    """field -> (value, material) for everything `compare_environments` looks at."""
    if not isinstance(record, Provenance):
        record = Provenance.from_dict(record)
    env, sandbox, data_meta = record.environment, record.sandbox, record.data_meta
    facts: dict[str, tuple[Any, bool]] = {key: (env.get(key), True) for key in MATERIAL_FIELDS}
    facts.update({key: (env.get(key), False) for key in INFORMATIONAL_FIELDS})
    facts["data_hash"] = (record.data_hash or data_meta.get("corpus_hash"), True)
    facts["sandbox_backend"] = (sandbox.get("backend"), True)
    facts["image_id"] = (sandbox.get("image_id"), True)
    return facts


def compare_environments(original: Provenance | Mapping[str, Any],
                         current: Provenance | Mapping[str, Any]) -> list[Difference]:
    """What differs between the environments of two provenance records, material first."""
    before, after = comparable_facts(original), comparable_facts(current)
    found = [Difference(key, value, after[key][0], material)
             for key, (value, material) in before.items() if _normal(value) != _normal(after[key][0])]
    return sorted(found, key=lambda d: (not d.material, d.field))


def _normal(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))   # tuples == lists, as after a JSON round trip
