"""A scripted agent, run as its own process: it drives a night through the documented commands
(`nightshift checkout`, `propose`, `wait`, `done`) with real git and real file edits, as a
coding agent's shell would, and writes what it saw to a JSON log for the test to check.

    python tests/interface/agent_player.py REPO TAG LOG

It plays the bad cases too: an edit of a protected file (refused at propose), a garbage file
dropped straight into the inbox, a commit made on the night's own branch behind its back.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO, TAG, LOG = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
seen: dict = {}


def nightshift(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "agent.cli", *args, "--tag", TAG], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    if check and done.returncode != 0:
        seen["failed"] = {"args": args, "rc": done.returncode, "stderr": done.stderr}
        LOG.write_text(json.dumps(seen))
        sys.exit(f"nightshift {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def as_json(*args: str) -> dict:
    return json.loads(nightshift(*args, "--json").stdout)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=Agent", "-c", "user.email=agent@localhost",
                           "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (old, path)
    path.write_text(text.replace(old, new, 1))


def propose(directory: Path, message: str, delta: float, *extra: str) -> str:
    return as_json("propose", "--dir", str(directory), "-m", message, "--hypothesis", message,
                   "--predict", "improve" if delta < 0 else "same", "--delta", str(delta),
                   "--interval", f"{min(delta * 1.5, -0.05)},{max(delta * 0.5, 0.05)}",
                   "--confidence", "0.7", *extra)["proposal"]


copy = as_json("checkout")
first = Path(copy["dir"])
seen["checkout"] = copy

# a protected file edited beside the target: refused before anything is filed
edit(first / "helper.py", "FACTOR = 1", "FACTOR = 0")
edit(first / "toy.py", "LR = 1.0", "LR = 0.3")
refused = nightshift("propose", "--dir", str(first), "-m", "cheat", "--hypothesis", "h",
                     "--predict", "improve", "--delta", "-0.4", "--interval", "-0.6,-0.2", check=False)
seen["refused"] = {"rc": refused.returncode, "stderr": refused.stderr}
git(first, "checkout", copy["base"], "--", "helper.py")

seen["p_good"] = propose(first, "LR 1.0 -> 0.3", -0.45)

# a second agent, its own copy, proposing at the same time
second = REPO / "second-agent"
seen["checkout_second"] = as_json("checkout", "--dir", str(second))
edit(second / "toy.py", 'MODE = "a"', 'MODE = "b"')
seen["p_second"] = propose(second, "MODE a -> b", 0.0, "--agent", "second")

# garbage straight into the inbox, under the next free id
inbox = REPO / "results" / TAG / "inbox"
garbage = f"p{int(seen['p_second'][1:]) + 1:04d}"
(inbox / f"{garbage}.json").write_text("{not json at all")
seen["p_garbage"] = garbage

# a commit on the night's branch, behind its back
worktree = REPO / "results" / TAG / "worktree"
(worktree / "toy.py").write_text((worktree / "toy.py").read_text() + "# sneaked in\n")
git(worktree, "commit", "-qam", "sneaked in")
seen["sneaked"] = git(worktree, "rev-parse", "HEAD").strip()

seen["verdicts"] = {p: as_json("wait", p, "--timeout", "5m")
                    for p in (seen["p_good"], seen["p_second"], garbage)}

# after the verdicts: the copy moves to the new incumbent, one more proposal on top of it
again = as_json("checkout", "--dir", str(first))
seen["checkout_again"] = again
seen["incumbent_source"] = (first / "toy.py").read_text()
edit(first / "toy.py", "LR = 0.3", "LR = 0.25")
seen["p_last"] = propose(first, "LR 0.3 -> 0.25", 0.0)
seen["verdicts"][seen["p_last"]] = as_json("wait", seen["p_last"], "--timeout", "5m")
seen["done"] = as_json("done")
LOG.write_text(json.dumps(seen))
