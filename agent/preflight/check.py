"""`nightshift check`: everything a night would trip over, found before it starts.

`preflight(program, sandbox=...)` opens a throw-away branch and worktree (tag
`nightshift-check`, removed afterwards; its run folders stay in
`results/nightshift-check/runs/` for their logs), then checks, in order, one `Check` each:

  program valid · target and knobs · lines the command overrides · prepare step · data
  folder · held-out bytes (agent.preflight.exposure) · sandbox · interpreter (python in the sandbox, its torch and CUDA) · metric found ·
  seeds change the result · budget respected · nothing written outside the allowed places ·
  knobs live (agent.preflight.knob_probe) · your checkout untouched

by running the incumbent (your HEAD) on two seeds with the program's budget, exactly as a
night's baseline would run. The run checks are the ones `run` prints after its first
baseline (agent.preflight.checks.judge_runs). While a run goes, its progress lines are timed
(agent.preflight.run_length): the estimate of its length is said as soon as it is known, a run
that clearly cannot finish inside budget + grace is stopped then, and no second seed runs
after a first that was stopped or killed.
"""
from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path
from typing import Callable

from agent.preflight.check_runs import CHECK_SEEDS, CHECK_TAG, plan_digest, record_check
from agent.preflight.checks import Checklist, StoppedEarly, judge_runs
from agent.preflight.run_length import RunLength, RunLengthWatch, length_fix
from agent.program import Program
from agent.record.events import Role, RunFinished
from agent.record.ledger import Ledger
from agent.researchers.registry import resolve_researcher_name
from agent.run.data import DataError, PreparedData, folder_facts, prepare_data, repository_data
from agent.run.executor import RunExecutor
from agent.run.outputs import human_bytes
from agent.run.plan import RunPlan, gpu_for_runs
from agent.target.knobs import KnobError, find_knobs, format_value
from agent.target.overrides import overridden
from agent.workspace.repo import Workspace, WorkspaceError, remove_snapshot
from sandbox import Limits, RunSpec, SandboxUnavailable, Status


# Run inside the sandbox as `python -c ...`: what `python` is there, and its torch.
_PROBE = """import platform, sys
print("---")
print("python:", sys.executable)
print("version:", platform.python_version())
try:
    import torch
    print("torch:", torch.__version__)
    print("cuda:", torch.cuda.is_available())
    print("gpus:", torch.cuda.device_count())
except Exception as exc:
    print("torch: none (" + type(exc).__name__ + ")")
print("probe: 1")
"""

Say = Callable[[str], None]


def preflight(program: Program, *, sandbox: str, budget_s: float | None = None,
              say: Say = lambda text: None, on_output: Callable[[str], None] | None = None,
              dead_knobs_ok: bool = False) -> Checklist:
    """Check `program` as a night would run it; `say` hears progress. Never raises for a
    problem of the user's: each becomes a failed Check with its fix. `dead_knobs_ok`: a knob
    whose probe changed nothing is a warning, not a failure (the user's opt-out)."""
    from agent.run.data import data_cache
    from agent.run.plan import results_dir
    from sandbox.select import make_runner

    if budget_s is not None:
        program = program.with_overrides(budget=budget_s)
    verdict = Checklist()
    verdict.add("program valid", True, f"{program.path.name}: command `{program.command}`, "
                f"metric {program.metric} ({program.direction}), budget {program.budget_s:g} s")
    from agent.run.grading import measurement_note
    from agent.preflight.prestart import PrestartError, check_paths

    verdict.add("metric measured apart", *measurement_note(program.evaluate, program.edits, program.target))

    try:   # what `run` refuses before writing anything: a target, protected or data path
        check_paths(program)   # that is missing, a folder, a link or outside the repository
    except PrestartError as error:
        verdict.add("paths in the repository", False, str(error),
                    "point target, protected and data at a file or folder of the repository itself")
        return verdict
    results = results_dir(program, CHECK_TAG)
    _forget(program, results)
    try:
        workspace = Workspace.open(program.root, CHECK_TAG, results / "worktree")
    except WorkspaceError as error:
        verdict.add("target and knobs", False, str(error), "commit your code in a git repository first")
        return verdict
    try:
        target_ok = _target_and_knobs(verdict, program, workspace)
        _overridden_lines(verdict, program, workspace)
        data = _prepare(verdict, program, workspace, data_cache())
        mount_ok = _data_folder(verdict, program)
        if data is not None:
            _held_out_bytes(verdict, program, data, mount_ok)
        try:
            runner, why = make_runner(sandbox, image=program.image)
        except SandboxUnavailable as error:
            verdict.add("sandbox", False, str(error), "start the engine or build the image as it says, "
                        "or use --sandbox local")
            return verdict
        facts = runner.describe()
        if runner.name == "local" and not facts.get("read_only_root"):
            why += ("; no mount namespace here, so writes outside the run's folders are not "
                    "prevented (only noticed in your checkout and the data folder): prefer docker")
        elif runner.name == "local":
            why += f"; working directory: {'a private overlay' if facts.get('overlay') else 'a private copy'}"
        verdict.add("sandbox", True, why)
        _view(verdict, program, data, workspace, runner)
        plan = RunPlan.from_program(program if mount_ok else program.with_overrides(data=None))
        if data is None:
            (results / "no-data").mkdir(parents=True, exist_ok=True)
        executor = RunExecutor(plan=plan, runner=runner, workspace=workspace, ledger=Ledger(results),
                               data=data or PreparedData(results / "no-data", {}), results_dir=results)
        head = workspace.head()
        _interpreter(verdict, executor, head, results)
        if not (target_ok and data is not None and mount_ok):
            verdict.add("runs", None, "skipped: fix the problems above first")
            return verdict
        before = _checkout_status(program.root)
        runs, stopped = _run_seeds(executor, head, program, say, on_output)
        judge_runs(verdict, runs, program, results, plan.budget_s, planned=plan.steps, stopped=stopped)
        # a probe would see no more than a stopped run did: the run length comes first
        _knobs_live(verdict, program, executor, workspace, head, say, dead_knobs_ok,
                    "" if stopped is None else "not probed: a run cannot finish in its budget (see "
                    "budget respected); check probes the knobs once it can")
        after = _checkout_status(program.root)   # after the probes too: they run the script
        if after != before:
            verdict.add("your checkout untouched", False, f"git status changed during the runs: "
                        f"{sorted(set(after) ^ set(before))[:5]}", "the script must write only to "
                        "{out} or its working directory, not to absolute paths in your checkout")
        else:
            verdict.add("your checkout untouched", True, "git status is the same before and after")
        # the night that follows takes these runs as its baseline instead of running them again
        record_check(results, commit=head, digest=plan_digest(plan, runner.name, program.image),
                     passed=not verdict.problems and stopped is None)
        return verdict
    finally:
        workspace.remove(delete_branch=True)
        _remove_snapshots(results)


def _run_seeds(executor: RunExecutor, head: str, program: Program, say: Say,
               on_output: Callable[[str], None] | None) -> tuple[list[RunFinished], StoppedEarly | None]:
    """HEAD on each check seed, timing its steps as it goes: a run that clearly cannot end
    inside budget + grace is stopped then and there, and no further seed starts after a run
    that was stopped or killed (it has shown the problem)."""
    plan = executor.plan
    runs: list[RunFinished] = []
    for seed in CHECK_SEEDS:
        say(f"running {head[:8]} on seed {seed} (budget {plan.budget_s:g} s, grace {plan.grace_s:g} s)")
        watch = RunLengthWatch(deadline_s=plan.deadline_s, steps=plan.steps,
                               target=program.target, metrics_pattern=plan.metrics_pattern,
                               told_budget="{budget_s}" in plan.command)
        stop = threading.Event()
        told: list[RunLength] = []

        def line(text: str, watch: RunLengthWatch = watch, stop: threading.Event = stop,
                 told: list[RunLength] = told, seed: int = seed) -> None:
            watch.feed(text)
            estimate = watch.estimate
            if estimate is not None and not told:
                told.append(estimate)
                say(f"  seed {seed}: {estimate.sentence(plan.budget_s)}"
                    + (": stopping it now" if watch.hopeless else ""))
            if watch.hopeless:
                stop.set()
            if on_output is not None:
                on_output(text)

        run = executor.run(head, seed, Role.REFERENCE, None, on_output=line, stop=stop)
        runs.append(run)
        if watch.hopeless and watch.estimate is not None:
            estimate = watch.estimate
            say(f"  seed {seed}: stopped after {run.duration_s or 0:.0f} s; no further seed is run")
            return runs, StoppedEarly(seed, run.duration_s or estimate.elapsed_s,
                                      estimate.sentence(plan.budget_s),
                                      length_fix(estimate, plan.steps, plan.command, plan.budget_s))
        say(f"  seed {seed}: {run.status.value} "
            + (f"{program.metric} {run.metric:.6g}" if run.metric is not None else run.reason)
            + f" ({run.duration_s or 0:.1f} s)")
        if run.status == Status.TIMEOUT:
            shown = watch.progress(plan.budget_s)
            say(f"  seed {seed} was killed at budget + grace: {shown}; no further seed is run")
            return runs, StoppedEarly(seed, run.duration_s or 0.0, shown, "", killed=True)
    return runs, None


def _knobs_live(verdict: Checklist, program: Program, executor: RunExecutor, workspace: Workspace,
                head: str, say: Say, dead_ok: bool, no_runs: str) -> None:
    """Each knob proven live by a short probe run beside a short reference run
    (agent.preflight.knob_probe): a knob that changes nothing would burn a night's runs.
    `no_runs`: why only the source may be read."""
    from agent.preflight.knob_probe import probe_knobs, record

    report = probe_knobs(program, executor, workspace, head, CHECK_SEEDS[0], say=say, no_runs=no_runs)
    if report is not None:
        if report.seconds:
            say(f"  knob probes took {report.seconds:.1f} s")
        record(verdict, report, dead_ok=dead_ok)


def _forget(program: Program, results: Path) -> None:
    """Remove what an earlier check left (its worktree entry, branch and folder)."""
    if (results / "worktree").exists() or results.exists():
        subprocess.run(["git", "-C", str(program.root), "worktree", "remove", "--force",
                        str(results / "worktree")], capture_output=True)
        subprocess.run(["git", "-C", str(program.root), "worktree", "prune"], capture_output=True)
        _remove_snapshots(results)
        shutil.rmtree(results, ignore_errors=True)
    subprocess.run(["git", "-C", str(program.root), "branch", "-D", "--quiet", f"nightshift/{CHECK_TAG}"],
                   capture_output=True)


def _remove_snapshots(results: Path) -> None:
    snapshots = results / "snapshots"
    if snapshots.exists():
        for folder in snapshots.iterdir():
            remove_snapshot(folder)
        shutil.rmtree(snapshots, ignore_errors=True)


def _target_and_knobs(verdict: Checklist, program: Program, workspace: Workspace) -> bool:
    head = workspace.head()
    try:
        source = workspace.read(program.target, head)
    except FileNotFoundError:
        verdict.add("target and knobs", False, f"{program.target} is not in your HEAD commit {head[:8]}",
                    f"commit {program.target}: runs see the commit, not your working tree")
        return False
    except UnicodeDecodeError:
        verdict.add("target and knobs", False, f"{program.target} is not UTF-8 text",
                    "point target at a text file (a Python or YAML config)")
        return False
    local = program.root / program.target
    dirty = local.is_file() and local.read_text(encoding="utf-8", errors="replace") != source
    note = " (your checkout has uncommitted changes to it: runs use the commit)" if dirty else ""
    try:
        knobs = find_knobs(source, path=program.target, declared=program.knobs)
    except KnobError as error:
        verdict.add("target and knobs", False, f"{program.target}: {error}",
                    "fix the knob as the message says (program.md's knobs:, or the annotation)")
        return True
    try:
        researcher = resolve_researcher_name(program.researcher)[0]
    except Exception:
        researcher = program.researcher
    if not knobs:
        if researcher == "optuna":
            verdict.add("target and knobs", False, f"{program.target} at {head[:8]} has no knobs for the "
                        f"optuna researcher{note}", "name assignments of the target in program.md, e.g. "
                        "knobs: {learning_rate: 'log(1e-4, 1e-2)'}")
        else:
            verdict.add("target and knobs", True, f"{program.target} at {head[:8]}; no knobs (the "
                        f"{researcher} researcher edits the file as a whole){note}")
        return True
    shown = ", ".join(f"{k.name}={format_value(k.value)} in {k.describe_space()}" for k in knobs[:6])
    more = f" and {len(knobs) - 6} more" if len(knobs) > 6 else ""
    outside = [k.name for k in knobs if not k.contains(k.value)]
    warn = f"; outside their space now: {', '.join(outside)}" if outside else ""
    verdict.add("target and knobs", True, f"{program.target} at {head[:8]}: {len(knobs)} knobs: "
                f"{shown}{more}{warn}{note}")
    return True


def _overridden_lines(verdict: Checklist, program: Program, workspace: Workspace) -> None:
    """The target's assignments that a flag of the command overrides: dead lines (a knob
    among them is refused when program.md is loaded)."""
    try:
        source = workspace.read(program.target, workspace.head())
    except (FileNotFoundError, UnicodeDecodeError):
        return
    dead = overridden(source, program.target, program.command)
    if not dead:
        verdict.add("lines the command overrides", None, f"none: no flag of the command sets an "
                    f"assignment of {program.target}")
        return
    shown = ", ".join(o.describe() for o in dead[:12]) + (f" and {len(dead) - 12} more" if len(dead) > 12 else "")
    verdict.add("lines the command overrides", None, f"{len(dead)} of {program.target}: {shown}; "
                f"editing them does nothing (an LLM researcher is told they are fixed)")


def _prepare(verdict: Checklist, program: Program, workspace: Workspace, cache: Path):
    try:
        data = prepare_data(program.prepare, workspace.path, cache)
    except (DataError, OSError, ValueError) as error:
        verdict.add("prepare step", False, str(error).replace("\n", " | "),
                    "the prepare command must exit 0 and print `data_dir: <path>` (see docs/guides/your-script.md: "
                    "the prepare step); or set prepare: null")
        return None
    if program.prepare:
        facts = folder_facts(data.path)
        verdict.add("prepare step", True, f"`{program.prepare}` gave data_dir {data.path} "
                    f"({facts['files']} files, {human_bytes(facts['bytes'])})")
    else:
        verdict.add("prepare step", None, "none (prepare: null): $NIGHTSHIFT_DATA is an empty folder")
    return data


def _data_folder(verdict: Checklist, program: Program) -> bool:
    if program.data is None:
        return True
    try:
        mount = repository_data(program.root, program.data)
    except DataError as error:
        verdict.add("data folder", False, str(error), "create the folder in your checkout, or fix data:")
        return False
    facts = folder_facts(mount.source)
    verdict.add("data folder", True, f"{program.data} of your checkout ({facts['files']} files, "
                f"{human_bytes(facts['bytes'])}, git-ignored ones included), read-only at "
                f"{program.data} in every run")
    return True


def _held_out_bytes(verdict: Checklist, program: Program, data: PreparedData, mount_ok: bool) -> None:
    """Whether training can read the evaluation split's bytes: a split file nothing hides, or
    a file holding its text (agent.preflight.exposure)."""
    from agent.run import grading
    from agent.preflight.exposure import find_exposures

    hidden = {data.path / item.path for item in grading.hidden_files(data.meta, grading.TRAINING_SEES)}
    folders = [data.path] + ([program.root / program.data] if program.data and mount_ok else [])
    found = find_exposures(folders, program.root, hidden)
    if found:
        verdict.add("held-out bytes", None, "the training step can read " + "; ".join(
            e.says(program.root) for e in found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else ""),
            "keep the text the splits were cut from out of your repository and the data folder once "
            "the splits are made (delete or move it), and measure the metric apart with `evaluate:` "
            "(docs/integrity.md); the bundled prepare.py declares its splits so that runs hide them")
        return
    sources = grading.held_out(data.meta)
    where = (f"; their sources ({', '.join(sources.units)}) are absent from what a run sees (the "
             f"view below)") if sources.units else ""
    verdict.add("held-out bytes", True, ("the held-out splits are hidden from training" if hidden else
                                         "no file the training step reads is named or holds a held-out split") + where)


def _view(verdict: Checklist, program: Program, data: PreparedData | None, workspace: Workspace,
          runner) -> None:
    """What a run sees of this machine (sandbox.view), how large, and whether any of it holds
    the held-out text (agent.preflight.held_out_scan)."""
    from agent.preflight.held_out_scan import check_view, refusal, runs_view, sees_the_host, tracked_files
    from agent.run import grading
    from sandbox.view import ViewError

    if not sees_the_host(runner):
        verdict.add("view", None, f"the image {program.image} is self-contained: runs see what it holds")
        return
    meta = data.meta if data is not None else {}
    try:
        seen = runs_view(program, meta)
    except ViewError as error:
        verdict.add("view", False, str(error), "fix view.add in program.md")
        return
    scanned = check_view(seen, tracked_files(workspace.path), data.path if data else workspace.path, meta,
                         [program.root / program.data] if program.data else [])
    by_why: dict[str, list[int]] = {}
    for bind in seen.binds:
        count, size = scanned.sizes.get(bind.source, (0, 0))
        entry = by_why.setdefault(bind.why, [0, 0, 0])
        entry[0], entry[1], entry[2] = entry[0] + 1, entry[1] + count, entry[2] + size
    parts = [f"{why} ({places} path{'s' if places > 1 else ''}, {count:,} file{'s' if count != 1 else ''}, "
             f"{human_bytes(size)})"
             for why, (places, count, size) in sorted(by_why.items(), key=lambda item: -item[1][2])]
    shown = (f"runs see {len(seen.binds)} host paths and their own folders, nothing else of this "
             f"machine: " + "; ".join(parts))
    if scanned.findings:
        verdict.add("view", False, shown + ". " + refusal(scanned.findings).split("\nFix: ")[0].replace("\n", " "),
                    refusal(scanned.findings).split("\nFix: ")[1])
    elif grading.hidden_files(meta, grading.TRAINING_SEES):
        verdict.add("view", True, shown + f"; none of it holds the held-out text (checked in "
                    f"{scanned.seconds:.1f} s)")
    else:
        verdict.add("view", True, shown)


def _interpreter(verdict: Checklist, executor: RunExecutor, commit: str, results: Path) -> None:
    """Run the probe in the sandbox: what `python` in the command is there, and its torch."""
    out = results / "probe" / "out"
    out.mkdir(parents=True, exist_ok=True)
    plan = executor.plan
    spec = RunSpec(command=f"python -I -c \"exec(bytes.fromhex('{_PROBE.encode().hex()}').decode())\"",
                   snapshot_dir=executor.snapshot(commit), data_dir=executor.data.path, out_dir=out,
                   seed=0, budget_s=60, grace_s=30, metric="probe", python=plan.python,
                   limits=Limits(memory_mb=plan.limits.memory_mb, pids=plan.limits.pids,
                                 gpu=plan.limits.gpu))
    result = executor.runner.run(spec)
    facts = result.metrics
    if result.status != Status.OK:
        verdict.add("interpreter", False, f"python did not run in the sandbox: {result.status.value}: "
                    f"{result.reason}", "build the sandbox image for this machine, or use --sandbox local")
        return
    where = f"{facts.get('python')} (Python {facts.get('version')}) in the {result.backend} sandbox"
    torch = str(facts.get("torch", "none"))
    if torch.startswith("none"):
        verdict.add("interpreter", None, f"python in the command is {where}; no torch there (fine if "
                    f"the script does not import it; else install it for that interpreter)")
        return
    cuda = facts.get("cuda") in (True, "True")
    gpus = f"CUDA available, {facts.get('gpus')} GPU(s) visible" if cuda else "CUDA not available: runs use the CPU"
    if gpu_for_runs() is not None and not cuda:
        verdict.add("interpreter", False, f"python in the command is {where}, torch {torch}; this "
                    f"machine has a GPU but the sandbox's torch sees none",
                    "use a CUDA build of torch; for docker, the NVIDIA Container Toolkit and a "
                    "dockerfile-mode image")
        return
    verdict.add("interpreter", True, f"python in the command is {where}, torch {torch}, {gpus}")


def _checkout_status(root: Path) -> list[str]:
    done = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True)
    return sorted(line for line in done.stdout.splitlines() if line.strip())
