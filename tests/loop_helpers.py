"""Helpers for loop-level tests: a throw-away user repository and the real CLI."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def set_front_matter(text: str, **fields: str) -> str:
    """Replace `key: value` lines of program.md's front matter (values as YAML text)."""
    head, sep, prose = text.partition("\n---\n")
    for key, value in fields.items():
        pattern = re.compile(rf"^{key}:.*?(?=^\w|\Z)", re.MULTILINE | re.DOTALL)
        if pattern.search(head):
            head = pattern.sub(f"{key}: {value}\n", head, count=1)
        else:
            head += f"\n{key}: {value}"
    return head.rstrip("\n") + "\n" + sep + prose


def make_repo(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git = ["git", "-c", "user.name=Test", "-c", "user.email=test@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run([*git, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(root), "commit", "-qm", "initial"], check=True)
    return root


def project_repo(root: Path, **front_matter: str) -> Path:
    """A user repository holding the bundled train/ and a program.md with `front_matter`."""
    program = set_front_matter((PROJECT / "program.md").read_text(), **front_matter)
    files = {"program.md": program, **{f"train/{source.name}": source.read_text()
                                       for source in sorted((PROJECT / "train").glob("*.py"))
                                       if source.name != "__init__.py"}}
    return make_repo(root, files)


def cli_env(data_root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env["NIGHTSHIFT_DATA_ROOT"] = str(data_root)
    env["PYTHONPATH"] = str(PROJECT)
    env["COLUMNS"] = "120"
    return env


def nightshift(repo: Path, *args: str, env: dict[str, str], timeout: float = 600,
               ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=timeout)


def events(repo: Path, tag: str) -> list[dict]:
    """The ledger's lines as JSON (to check the file's format)."""
    path = repo / "results" / tag / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def loop_state(repo: Path, tag: str):
    """The typed state of a tag's loop, folded from its ledger file."""
    from agent.record.ledger import read_events
    from agent.record.state import fold

    return fold(read_events(repo / "results" / tag))


def git_out(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def seeds_reach_the_metric(runs) -> bool:
    """Each seed's first run scored differently: the script took the seed it was given.
    Only the first: a time-budgeted run repeated on the same seed (the night's seeds.repeat)
    does a different number of steps, so its score differs too, and that is no seed."""
    first: dict[int, float] = {}
    for run in runs:
        first.setdefault(run.seed, run.metric)
    return len(first) >= 2 and len(set(first.values())) == len(first)


def end_detached_night(repo: Path, tag: str) -> None:
    """Kill a night started with --detach that a failed test left running (a passed one ended)."""
    import signal

    from agent.preflight.lock import live_holder

    holder = live_holder(repo / "results" / tag)
    if holder is not None:
        os.kill(holder.pid, signal.SIGKILL)
