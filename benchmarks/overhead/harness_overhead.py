"""Harness overhead: seconds per experiment spent outside the training process, at the start
of a night and after thousands of experiments.

    python -m benchmarks.overhead.harness_overhead [--experiments 10] [--history 2000] [--sandbox local]

Runs the real loop (CLI, ledger, git workspace, snapshot, optuna researcher, decision rule,
sandbox) on a training script that does nothing but print a noisy metric, so almost all of
the wall time is the harness. Twice: on a fresh tag, and on a tag whose ledger already holds
`--history` synthetic experiments (tests/ledger_factory.py; their base is the repository's
real commit and their noise the script's, so the loop resumes them as its own). Each case
runs one invocation of 1 experiment and one of `--experiments`, after a warm-up; the harness
time per experiment is the difference of the two invocations' wall time minus the time the
sandboxed processes took (a Python start-up per run), over the extra experiments, so the
CLI's start-up (once per invocation, reading the ledger included) cancels out and is shown
apart. The two per-experiment figures should be within 20 % of each other: a loop that
re-read its ledger for every step would slow down as the night grows.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


from tests.ledger_factory import synthetic_night
from tests.loop_helpers import cli_env, git_out, loop_state, make_repo
from tests.night.test_keep_rule_loop import PROGRAM

# A metric that depends on the seed alone: every candidate ties with the incumbent on its seed
# and stops at the screen, so both cases do the same work per experiment (one candidate run,
# its paired incumbent run while the reference is small), whatever the history.
NOISE_SCRIPT = '''\
import json, os, random
WIDTH = 64          # search: int(16, 256)
SCALE = 1.0         # search: log(0.1, 10.0)
MODE = "a"          # search: choice("a", "b", "c")
value = 2.0 + random.Random(int(os.environ["NIGHTSHIFT_SEED"])).gauss(0.0, 0.05)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
    json.dump({"val_bpb": value}, out)
'''

# Counts the ledger's file reads in the CLI process and reports them on exit: the loop's
# (a snapshot, or the Ledger reading from its cursor) and whole-file readers such as the
# report written when the night stops. Patched before the CLI imports them.
COUNTER = '''
import atexit, json, os, sys
sys.path.insert(0, {project!r})
from agent.record import ledger
reads = {{"n": 0}}
def counting(original):
    def counted(*args, **kwargs):
        reads["n"] += 1
        return original(*args, **kwargs)
    return counted
ledger.Ledger._apply_range = counting(ledger.Ledger._apply_range)
ledger.read_snapshot = counting(ledger.read_snapshot)
ledger.read_events = counting(ledger.read_events)
atexit.register(lambda: open(os.environ["NIGHTSHIFT_BENCH_READS"], "w").write(json.dumps(reads)))
from agent.cli.app import app
app()
'''


def night(repo: Path, tag: str, experiments: int, env: dict[str, str], reads_file: Path) -> dict:
    """Run `experiments` experiments on `tag`; the harness's share of the wall time."""
    before = {r.run_id for r in loop_state(repo, tag).runs} if (repo / "results" / tag).exists() else set()
    script = reads_file.with_suffix(".py")
    script.write_text(COUNTER.format(project=str(Path(__file__).resolve().parents[2])))
    env = {**env, "NIGHTSHIFT_BENCH_READS": str(reads_file)}
    started = time.monotonic()
    done = nightshift_script(repo, script, ["run", "--tag", tag, "--max-experiments", str(experiments)], env)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(done.stdout[-3000:] + done.stderr[-3000:])
    state = loop_state(repo, tag)
    runs = [r for r in state.runs if r.run_id not in before]
    inside = sum(r.duration_s or 0 for r in runs)
    return {"wall": wall, "inside": inside, "runs": len(runs), "experiments": experiments,
            "reads": json.loads(reads_file.read_text())["n"],
            "median_run": statistics.median(r.duration_s or 0 for r in runs)}


def nightshift_script(repo: Path, script: Path, args: list[str], env: dict[str, str]):
    import subprocess

    return subprocess.run([sys.executable, str(script), *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=3600)


def case(repo: Path, tag: str, n: int, env: dict[str, str], tmp: Path) -> dict:
    """Warm-up, then 1 experiment, then `n`: per-experiment harness time and start-up."""
    night(repo, tag, 1, env, tmp / f"{tag}-warm.json")        # baseline runs, study, caches
    one = night(repo, tag, 1, env, tmp / f"{tag}-1.json")
    many = night(repo, tag, n, env, tmp / f"{tag}-n.json")
    harness = ((many["wall"] - many["inside"]) - (one["wall"] - one["inside"])) / (n - 1)
    return {"per_experiment": harness, "startup": (one["wall"] - one["inside"]) - harness,
            "runs_per_experiment": many["runs"] / n, "per_run": harness * n / many["runs"],
            "reads": many["reads"], "median_run": many["median_run"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=20, help="experiments measured per case")
    parser.add_argument("--history", type=int, default=2000, help="synthetic experiments before")
    parser.add_argument("--sandbox", default="local")
    args = parser.parse_args()
    load_before = Path("/proc/loadavg").read_text().split()[0]
    with tempfile.TemporaryDirectory() as tmp:
        program = PROGRAM.replace("sandbox: local", f"sandbox: {args.sandbox}")
        repo = make_repo(Path(tmp) / "user", {"noise.py": NOISE_SCRIPT, "program.md": program})
        env = cli_env(Path(tmp) / "data")
        base = git_out(repo, "rev-parse", "HEAD")
        made = time.monotonic()
        synthetic_night(repo / "results" / "long", args.history, base=base, keeps=False,
                        replays=False, noise=0.05)
        size = (repo / "results" / "long" / "ledger.jsonl").stat().st_size
        print(f"synthetic history: {args.history} experiments, {size / 1e6:.1f} MB of ledger "
              f"({time.monotonic() - made:.0f} s to write)")
        results = {"fresh tag": case(repo, "fresh", args.experiments, env, Path(tmp)),
                   f"after {args.history}": case(repo, "long", args.experiments, env, Path(tmp))}
    for name, r in results.items():
        print(f"{name:>12}: harness {r['per_experiment']:.3f} s per experiment "
              f"({r['runs_per_experiment']:.1f} runs each, {r['per_run']:.3f} s per run; sandboxed "
              f"median {r['median_run']:.2f} s per run); start-up {r['startup']:.2f} s per "
              f"invocation; ledger file reads per invocation: {r['reads']} (the loop's one, and "
              f"the report's when the night stops)")
    fresh, later = (r["per_experiment"] for r in results.values())
    print(f"per-experiment overhead after {args.history} / at the start: {later / fresh:.2f}x "
          f"(sandbox {args.sandbox}; load average {load_before} before, "
          f"{Path('/proc/loadavg').read_text().split()[0]} after)")


if __name__ == "__main__":
    main()
