"""What every break-it test checks after it did its worst: the ledger, git and the TSV agree,
and nothing is left running.

`check_night(repo, tag)` asserts the invariants a killed, interrupted or starved night must
keep, and returns how many ledger events it checked."""
from __future__ import annotations

import csv
import json
import subprocess
import time
from collections import Counter
from pathlib import Path

from agent.preflight.leftovers import run_processes
from agent.record.events import parse_event
from agent.record.state import fold
from agent.record.views import BASELINE, TSV_FILE, baseline_row, tsv_value
from sandbox import Status
from tests.loop_helpers import git_out, make_repo, set_front_matter
from tests.night.test_scheduler import PROGRAM, SLEEPY

NIGHT = set_front_matter(PROGRAM, seeds="{baseline: 2, screen: 1, max: 3}")


def sleepy_repo(root: Path, delay: float = 0.3, program: str = NIGHT) -> Path:
    return make_repo(root, {"sleepy.py": SLEEPY.replace("DELAY = 0.5", f"DELAY = {delay}"),
                            "program.md": program})


def ledger_lines(repo: Path, tag: str) -> list[str]:
    path = repo / "results" / tag / "ledger.jsonl"
    return path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []


def leftovers(repo: Path, tag: str, wait_s: float = 3.0) -> list[int]:
    """Processes of the tag's runs still alive after `wait_s` (a killed harness's runs die
    with it: a parent-death signal; this gives the kernel a moment)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = sorted(run_processes(repo / "results" / tag / "runs"))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def check_night(repo: Path, tag: str, *, closed: bool = True) -> int:
    """The invariants; `closed`: the last invocation ended cleanly (nothing in flight, git
    and results.tsv caught up). Without it only the ledger's own invariants are checked."""
    lines = ledger_lines(repo, tag)
    events = []
    for number, line in enumerate(lines, start=1):
        assert line.endswith("\n"), f"ledger line {number} is cut short"
        events.append(parse_event(json.loads(line)))       # every line parses, as an event
    state = fold(events)

    started = Counter(e.run_id for e in events if e.kind == "run_started")
    finished = Counter(e.run_id for e in events if e.kind == "run_finished")
    assert max(started.values(), default=1) == 1, "a run_started twice"
    assert max(finished.values(), default=1) == 1, "a run recorded twice"
    assert set(finished) <= set(started), "a run finished that never started"
    # A measurement is (commit, seed, role, experiment): the incumbent run again on a seed for
    # one candidate (a bracket, the keep rule's drift guard) is its own, recorded as a
    # reference for that experiment. Once a night the baseline runs a seed twice on purpose
    # (seeds.repeat): the fold keeps it as the night's repeat; nothing else may be measured twice.
    measured = Counter((r.commit, r.seed, r.role, r.experiment) for r in state.runs
                       if r.status != Status.INTERRUPTED)
    repeats = {(r.commit, r.seed, r.role, None) for r in state.repeats}
    twice = {key for key, n in measured.items() if n > 1}
    assert twice <= repeats and max(measured.values(), default=1) <= 2, \
        f"a (commit, seed, role, experiment) measured twice: {sorted(twice - repeats)}"
    decided = Counter(e.id for e in events if e.kind in ("decision", "experiment_invalid"))
    assert max(decided.values(), default=1) == 1, "an experiment decided twice"
    proposed = Counter(e.id for e in events if e.kind in ("experiment_proposed", "experiment_invalid"))
    assert max(proposed.values(), default=1) == 1, "an experiment id used twice"
    if not closed:
        return len(events)   # git and the TSV may be one step behind: the next start repairs them
    assert not state.in_flight, f"runs left in flight: {sorted(state.in_flight)}"
    if state.started:
        assert git_out(repo, "rev-parse", f"refs/heads/nightshift/{tag}") == state.incumbent
        refs = dict(reversed(line.split()) for line in git_out(
            repo, "for-each-ref", "--format=%(objectname) %(refname)", f"refs/nightshift/{tag}/").splitlines())
        kept = {e.commit for e in state.kept()} | {state.base_commit}
        for experiment in state.experiments.values():
            if not experiment.commit:
                continue
            if experiment.decided and experiment.verdict != "keep":
                assert refs.get(f"refs/nightshift/{tag}/discarded/{experiment.id}") == experiment.commit
            elif not experiment.decided:
                assert refs.get(f"refs/nightshift/{tag}/pending/{experiment.id}") == experiment.commit
        for ref, sha in refs.items():
            if "/discarded/orphan-" in ref:
                assert sha not in kept, f"the incumbent {sha[:8]} was filed as an orphan"
        _check_tsv(repo, tag, state)
    return len(events)


def _check_tsv(repo: Path, tag: str, state) -> None:
    path = repo / "results" / tag / TSV_FILE
    decided = [e for e in state.experiments.values() if e.decided]
    if not path.exists():
        assert not decided, "decisions but no results.tsv"
        return
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    base = baseline_row(state)
    if rows and rows[0]["description"] == BASELINE:   # the base commit's reference mean
        assert base is not None and rows[0]["commit"] == base[0][:7], "results.tsv's baseline disagrees"
        assert abs(float(rows[0]["val_bpb"]) - base[1]) <= 5e-7, "results.tsv's baseline value disagrees"
        rows = rows[1:]
    assert [(r["commit"], r["status"]) for r in rows] == \
        [((e.commit or "0000000")[:7], e.verdict.value) for e in decided], "results.tsv disagrees"
    for row, experiment in zip(rows, decided):
        value, _ = tsv_value(state, experiment)
        assert abs(float(row["val_bpb"]) - (value or 0.0)) <= 5e-7, "results.tsv's value disagrees"


def pgrep(pattern: str) -> list[str]:
    done = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if "pgrep" not in line]
