"""Per-run overhead of the sandbox backends: a trivial script, N runs each, medians.

    python -m benchmarks.overhead.sandbox_overhead [--runs 20] [--image nightshift:latest]

Prints, side by side, the wall clock of `Runner.run` for the local and Docker backends and
of a bare `subprocess.run` of the same script (no sandbox), and the overhead over bare.
Docker is skipped (saying why) when no engine answers or the image is missing. Figures are
wall clock on whatever else the machine is doing: compare rows of one invocation only.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from sandbox.protocol import Limits, RunSpec, SandboxUnavailable, Status

SCRIPT = 'print("---"); print("val_bpb: 1.0")\n'


def spec_for(root: Path, backend: str, i: int) -> RunSpec:
    out = root / backend / f"run-{i}" / "out"
    out.mkdir(parents=True)
    return RunSpec(command=f"{sys.executable} train.py", snapshot_dir=root / "snapshot",
                   data_dir=root / "data", out_dir=out, seed=i, budget_s=60, grace_s=10,
                   metric="val_bpb", limits=Limits(memory_mb=512))


def time_runner(runner, root: Path, runs: int) -> tuple[list[float], list[float]]:
    walls, inside = [], []
    for i in range(runs):
        spec = spec_for(root, runner.name, i)
        t0 = time.perf_counter()
        result = runner.run(spec)
        walls.append(time.perf_counter() - t0)
        inside.append(result.duration_s)
        if result.status is not Status.OK:
            raise SystemExit(f"{runner.name} run {i} ended {result.status}: {result.reason}")
    return walls, inside


def time_bare(root: Path, runs: int) -> list[float]:
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "train.py"], cwd=root / "snapshot", check=True,
                       stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--image", default="nightshift:latest")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "snapshot").mkdir()
        (root / "snapshot" / "train.py").write_text(SCRIPT)
        (root / "data").mkdir()

        rows: list[tuple[str, list[float], list[float] | None]] = [("bare", time_bare(root, args.runs), None)]
        from sandbox.local import LocalRunner
        rows.append(("local", *time_runner(LocalRunner(), root, args.runs)))
        try:
            from sandbox.select import make_runner
            runner, why = make_runner("docker", image=args.image)
            print(why)
            rows.append(("docker", *time_runner(runner, root, args.runs)))
        except SandboxUnavailable as exc:
            print(f"docker skipped: {exc}")

    bare = statistics.median(rows[0][1])
    print(f"\n{args.runs} runs each of a trivial script ({sys.executable})")
    print(f"{'backend':8} {'median wall s':>14} {'p90 wall s':>11} {'min s':>7} "
          f"{'median in-sandbox s':>20} {'overhead vs bare s':>19}")
    for name, walls, inside in rows:
        p90 = sorted(walls)[max(int(0.9 * len(walls)) - 1, 0)]
        med_inside = f"{statistics.median(inside):.3f}" if inside else "-"
        print(f"{name:8} {statistics.median(walls):14.3f} {p90:11.3f} {min(walls):7.3f} "
              f"{med_inside:>20} {statistics.median(walls) - bare:19.3f}")


if __name__ == "__main__":
    main()
