"""Per-run overhead of LocalRunner: a trivial script run directly vs. through the sandbox.

    python benchmarks/bench_local_overhead.py [runs=20]

Prints the median wall time of each and the difference (namespaces, confine.py as init,
setpriv, cgroup setup, the /proc marker sweep, classification).
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.local import LocalRunner  # noqa: E402
from sandbox.protocol import Limits, RunSpec  # noqa: E402

SCRIPT = "print('---'); print('val_bpb: 1.0')\n"


def main(runs: int = 20) -> None:
    root = Path(tempfile.mkdtemp(prefix="nightshift-bench-"))
    (root / "snap").mkdir()
    (root / "snap" / "train.py").write_text(SCRIPT)
    command = f"{sys.executable} train.py"
    runner = LocalRunner()
    print("isolation:", {k: v for k, v in runner.describe().items() if k != "cgroup_dirs"})
    direct, sandboxed = [], []
    for i in range(runs):
        t = time.perf_counter()
        subprocess.run(command, shell=True, cwd=root / "snap", check=True, capture_output=True)
        direct.append(time.perf_counter() - t)
        out = root / f"run{i}" / "out"
        spec = RunSpec(command=command, snapshot_dir=root / "snap", data_dir=root, out_dir=out,
                       seed=i, budget_s=60, metric="val_bpb", limits=Limits(memory_mb=1024))
        t = time.perf_counter()
        result = runner.run(spec)
        sandboxed.append(time.perf_counter() - t)
        assert result.status.value == "ok", result.reason
    d, s = statistics.median(direct), statistics.median(sandboxed)
    print(f"direct    median {d * 1000:7.1f} ms  (n={runs})")
    print(f"LocalRunner median {s * 1000:7.1f} ms")
    print(f"overhead  median {(s - d) * 1000:7.1f} ms per run")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
