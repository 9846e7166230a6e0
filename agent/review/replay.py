"""Replay: re-run commits of a tag at another scale and say what survived.

Two questions, answered from one set of runs:
- reproduce (same budget and split as the night): does each commit's metric land within the
  seed noise of the night's measurement of it? `reproduced` yes/no with the interval of the
  difference (replay mean − night mean, t interval on the pooled seed sd);
- scale up (longer budget, more seeds, `--split test`): each kept commit's effect against its
  parent measured again, paired on seeds, next to the effect the night decided on (the proxy),
  and the Spearman rank correlation of kept commits between proxy and full scale, so a proxy
  win that inverts at scale shows.

A replay that asks for what the command cannot pass on is refused (`--split test` for a
command without `{split}` whose script never reads NIGHTSHIFT_SPLIT: it would measure the
night's split, labelled test) or warned about (a longer `--budget` that no run can see); see
`unexpressed_changes`.

Every replayed run also compares its environment with the original run's provenance
(`agent.record.provenance.compare_environments`) and lists what changed.

Where things go: runs run through `agent.runs.RunExecutor` with a ledger of their own,
`results/<tag>/replays/<replay_id>/ledger.jsonl` (run_started / run_finished, provenance per
run under `runs/`), so replays never mix with the loop's measurements. The tag's ledger gets
`replay` events (see docs/ledger.md):
  kind "run"      one per replayed run: commit, seed, status, metric, env_changed, env_diff
  kind "commit"   one per commit: mean, sd, original, reproduce{...}, proxy/full effects
  kind "summary"  one per replay: settings, rank correlations, whether any environment changed
Seeds are 0..n-1: the calibration seeds every incumbent was measured on, never the seeds that
selected a kept commit (agent.decide.sequential), so replay and night compare on the same seeds.
"""
from __future__ import annotations

import math
import statistics
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from scipy import stats

from agent.decide.decision import pooled_sd
from agent.program import Program
from agent.run.executor import RunExecutor
from agent.run.plan import RunPlan
from agent.record.events import (Direction, Replay, ReplayCommit, ReplayRun, ReplaySummary, Role,
                                 RunFinished, TargetRole, Verdict)
from agent.record.ledger import LEDGER_FILE, Ledger, utc_now
from agent.record.provenance import Provenance, compare_environments, read_provenance
from agent.record.state import LoopState
from agent.workspace.repo import Workspace

REPLAYS_DIR = "replays"


@dataclass(frozen=True)
class FullScaleRuns:
    """How the morning's commands run commits at full scale (replay, ablate): the budget, the
    seeds, and the split scored."""

    budget_s: float
    seeds: tuple[int, ...]
    split: str = "val"


@dataclass(frozen=True)
class Target:
    """One commit to replay and why: a kept commit, the base, a given commit, or a parent
    added so that effects can be measured against it."""

    commit: str
    role: TargetRole
    experiment: str | None = None
    parent: str | None = None      # the commit its effect is measured against


def plan_targets(state: LoopState, *, kept: bool, commits: Sequence[str] = (),
                 parent_of: Callable[[str], str | None] = lambda commit: None,
                 with_parents: bool = True) -> list[Target]:
    """The commits to replay, parents first. `commits` are full shas (resolve them first)."""
    by_commit = {e.commit: e for e in state.experiments.values() if e.commit}
    chosen: dict[str, Target] = {}
    wanted = [e.commit for e in state.kept()] if kept else []
    wanted += [c for c in commits if c not in wanted]
    for commit in wanted:
        experiment = by_commit.get(commit)
        parent = experiment.parent if experiment else parent_of(commit)
        role = TargetRole.BASE if commit == state.base_commit else \
            TargetRole.KEPT if experiment is not None and experiment.verdict == Verdict.KEEP else TargetRole.GIVEN
        chosen[commit] = Target(commit, role, experiment.id if experiment else None, parent)
    if kept and state.base_commit and state.base_commit not in chosen:
        chosen = {state.base_commit: Target(state.base_commit, TargetRole.BASE), **chosen}
    if with_parents:
        for target in list(chosen.values()):
            if target.parent and target.parent not in chosen:
                role = TargetRole.BASE if target.parent == state.base_commit else TargetRole.PARENT
                chosen = {target.parent: Target(target.parent, role), **chosen}
    return list(chosen.values())


# ---- statistics -------------------------------------------------------------------------

def t_interval(mean: float, se: float, dof: int, level: float = 0.95) -> tuple[float, float]:
    quantile = stats.t.ppf(0.5 + level / 2, dof) if dof > 0 else stats.norm.ppf(0.5 + level / 2)
    return mean - quantile * se, mean + quantile * se


def reproduction(original: Sequence[float], replay: Sequence[float], noise_sd: float | None,
                 noise_dof: int) -> dict[str, Any]:
    """Replay mean − original mean with a 95 % interval from the seed sd; reproduced when the
    interval holds 0. Undecidable (None) without a seed sd or without values on either side."""
    if not original or not replay:
        return {"reproduced": None, "difference": None, "interval": None,
                "why": "no successful runs on one side"}
    difference = statistics.fmean(replay) - statistics.fmean(original)
    if noise_sd is None:
        return {"reproduced": None, "difference": difference, "interval": None,
                "why": "no seed-to-seed spread measured yet (every commit ran once)"}
    se = noise_sd * math.sqrt(1 / len(original) + 1 / len(replay))
    lo, hi = t_interval(difference, se, noise_dof)
    return {"reproduced": bool(lo <= 0 <= hi) or math.isclose(difference, 0, abs_tol=1e-12),
            "difference": difference, "interval": [lo, hi], "noise_sd": noise_sd}


def paired_effect(child: dict[int, float], parent: dict[int, float],
                  direction: Direction) -> dict[str, Any] | None:
    """Improvement of `child` over `parent` on their common seeds (positive = better)."""
    seeds = sorted(set(child) & set(parent))
    if not seeds:
        return None
    sign = Direction(direction).sign
    diffs = [sign * (child[s] - parent[s]) for s in seeds]
    effect = statistics.fmean(diffs)
    interval = None
    if len(diffs) > 1:
        interval = list(t_interval(effect, statistics.stdev(diffs) / math.sqrt(len(diffs)),
                                   len(diffs) - 1))
    return {"effect": effect, "interval": interval, "seeds": seeds}


def spearman(xs: Sequence[float], ys: Sequence[float]) -> dict[str, Any]:
    """Spearman's rho with its n; rho is None below 2 points or when one side is constant."""
    n = len(xs)
    if n < 2 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return {"rho": None, "n": n}
    rho = stats.spearmanr(xs, ys).statistic
    return {"rho": None if math.isnan(rho) else float(rho), "n": n}


# ---- running ----------------------------------------------------------------------------

@dataclass
class Replayer:
    """Replays targets of one tag. `executor` must write to its own ledger and folder
    (`replay_dir`), not the tag's: see `new_replay_dir`."""

    tag_dir: Path
    ledger: Ledger                 # the tag's ledger: receives the `replay` events
    state: LoopState               # the tag's state, folded before the replay starts
    executor: RunExecutor
    replay_id: str
    direction: Direction = Direction.MINIMIZE
    original_budget_s: float | None = None
    original_split: str = "val"
    on_event: Callable[[Replay], None] = lambda event: None
    events: list[Replay] = field(default_factory=list)   # what this replay recorded, in order
    warnings: list[str] = field(default_factory=list)    # settings no run will see (unexpressed_changes)

    def replay(self, targets: Sequence[Target], settings: FullScaleRuns) -> ReplaySummary:
        """Run every target on every seed (seed-major, so slow drift of the machine hits all
        commits alike), record the events, and return the summary event."""
        values: dict[str, dict[int, float]] = {t.commit: {} for t in targets}
        diffs: dict[str, list[dict[str, Any]]] = {t.commit: [] for t in targets}
        for seed in settings.seeds:
            for target in targets:
                run = self.executor.run(target.commit, seed, Role.REPLAY, target.experiment)
                found = self._environment_changes(target.commit, seed, run)
                diffs[target.commit] += found
                if run.ok:
                    values[target.commit][seed] = run.metric
                self._emit(ReplayRun(
                    replay_id=self.replay_id, commit=target.commit, target_role=target.role,
                    experiment=target.experiment, seed=seed, budget_s=settings.budget_s,
                    split=settings.split, status=run.status, metric=run.metric,
                    duration_s=run.duration_s, run_id=run.run_id, reason=run.reason,
                    env_changed=any(d["material"] for d in found), env_diff=found))
        for target in targets:
            self.executor.release(target.commit)
        rows = [self._commit_event(t, values, diffs[t.commit], settings) for t in targets]
        kept = [r for r in rows if r.target_role == TargetRole.KEPT and r.proxy_effect is not None
                and r.full_effect is not None]
        measured = [r for r in rows if r.original.get("mean") is not None and r.mean is not None]
        sign = Direction(self.direction).sign
        return self._emit(ReplaySummary(
            replay_id=self.replay_id, budget_s=settings.budget_s, seeds=tuple(settings.seeds),
            split=settings.split, commits=tuple(t.commit for t in targets),
            reproduce=self._same_scale(settings),
            rank_effects=spearman([r.proxy_effect for r in kept], [r.full_effect for r in kept]),
            rank_values=spearman([sign * r.original["mean"] for r in measured],
                                 [sign * r.mean for r in measured]),
            reproduced=tuple(r.commit for r in rows if r.reproduce.get("reproduced")),
            not_reproduced=tuple(r.commit for r in rows if r.reproduce.get("reproduced") is False),
            env_changed=any(r.env_changed for r in rows)))

    def _same_scale(self, settings: FullScaleRuns) -> bool:
        return (settings.split == self.original_split and self.original_budget_s is not None
                and math.isclose(settings.budget_s, self.original_budget_s))

    def _commit_event(self, target: Target, values: dict[str, dict[int, float]],
                      found: list[dict[str, Any]], settings: FullScaleRuns) -> ReplayCommit:
        mine = values[target.commit]
        reference = self.state.reference(target.commit)
        original = reference or self.state.ok_values(target.commit)
        original_kind = "reference" if reference else "selection" if original else None
        if self._same_scale(settings):
            groups = self.state.noise_groups() + [list(mine.values())]
            sd, dof = pooled_sd(groups)
            reproduce = reproduction(list(original.values()), list(mine.values()), sd, dof)
        else:
            reproduce = {"reproduced": None, "why": "budget or split differs from the night's"}
        experiment = self.state.experiments.get(target.experiment or "")
        decided = experiment.decision if experiment else None
        full = paired_effect(mine, values.get(target.parent, {}), self.direction) \
            if target.parent in values else None
        base = self.state.base_commit
        vs_base = paired_effect(mine, values.get(base, {}), self.direction) \
            if base in values and base != target.commit else None
        unique = {(d["field"], str(d["original"]), str(d["current"])): d for d in found}
        return self._emit(ReplayCommit(
            replay_id=self.replay_id, commit=target.commit, target_role=target.role,
            experiment=target.experiment, parent=target.parent, budget_s=settings.budget_s,
            split=settings.split, values=dict(mine), n_ok=len(mine),
            n_failed=len(settings.seeds) - len(mine),
            mean=statistics.fmean(mine.values()) if mine else None,
            sd=statistics.stdev(mine.values()) if len(mine) > 1 else None,
            original={"kind": original_kind, "n": len(original), "budget_s": self.original_budget_s,
                      "split": self.original_split,
                      "mean": statistics.fmean(original.values()) if original else None},
            reproduce=reproduce,
            proxy_effect=decided.effect if decided else None,
            proxy_interval=decided.interval if decided else None,
            full_effect=full["effect"] if full else None,
            full_interval=full["interval"] if full else None,
            full_effect_vs_base=vs_base["effect"] if vs_base else None,
            full_interval_vs_base=vs_base["interval"] if vs_base else None,
            env_changed=any(d["material"] for d in unique.values()), env_diff=list(unique.values())))

    def _environment_changes(self, commit: str, seed: int, run: RunFinished) -> list[dict[str, Any]]:
        current = read_provenance(self.executor.runs_dir / run.run_id)
        original = self._original_provenance(commit, seed)
        if current is None or original is None:
            return []
        return [d.to_dict() for d in compare_environments(original, current)]

    def _original_provenance(self, commit: str, seed: int) -> Provenance | None:
        """The night's provenance for this commit and seed, else this commit, else any run."""
        def rank(run: RunFinished) -> int:
            return (run.commit != commit) * 2 + (run.seed != seed)
        for run in sorted(self.state.runs, key=rank):
            record = read_provenance(self.tag_dir / "runs" / run.run_id)
            if record is not None:
                return record
        return None

    def _emit(self, event: Replay) -> Any:
        event = self.ledger.append(event)
        self.events.append(event)
        self.on_event(event)
        return event


class ReplayRefused(ValueError):
    """The replay asks for a change the command cannot pass on to the script."""


def unexpressed_changes(command: str, settings: FullScaleRuns, original_budget_s: float | None,
                        reads: Callable[[str], bool]) -> tuple[list[str], list[str]]:
    """(refusals, warnings): what `settings` changes from the night that no run would see.
    A script learns its split and budget from `{split}`/`{budget_s}` in the command or from
    NIGHTSHIFT_SPLIT/NIGHTSHIFT_BUDGET_S; `reads(name)` says whether a file of the commit
    names that variable. A split it cannot see would be measured as the night's and
    labelled test: refused. A budget it cannot see changes only when the run is killed (a
    step-budgeted script trains as long as it did): said, and the replay runs."""
    refusals, warnings = [], []
    if settings.split != "val" and "{split}" not in command and not reads("NIGHTSHIFT_SPLIT"):
        refusals.append(
            f"--split {settings.split}: the command has no {{split}} and no file of the commit reads "
            f"NIGHTSHIFT_SPLIT, so every run would measure the split the night measured, recorded as "
            f"{settings.split}. Add {{split}} to command where the script takes its split (e.g. "
            f"--split={{split}}), or have the script read NIGHTSHIFT_SPLIT; or replay without --split")
    if (original_budget_s is not None and not math.isclose(settings.budget_s, original_budget_s)
            and "{budget_s}" not in command and not reads("NIGHTSHIFT_BUDGET_S")):
        warnings.append(
            f"--budget {settings.budget_s:g}s: the command has no {{budget_s}} and no file of the commit "
            f"reads NIGHTSHIFT_BUDGET_S, so the runs train as long as the night's ({original_budget_s:g} s "
            f"budget); only the time they are killed at moves. To train longer, add {{budget_s}} to "
            f"command where the script takes its training time, or raise its step count in command")
    return refusals, warnings


def commit_reads(root: Path, commit: str) -> Callable[[str], bool]:
    """Whether a tracked file of `commit` in the repository at `root` names a variable."""
    def reads(name: str) -> bool:
        done = subprocess.run(["git", "-C", str(root), "grep", "-q", "-F", "-e", name, commit, "--"],
                              capture_output=True)
        return done.returncode == 0
    return reads


def new_replay_dir(tag_dir: Path) -> tuple[str, Path]:
    """A fresh replay id and its folder under results/<tag>/replays/."""
    return new_dated_dir(Path(tag_dir) / REPLAYS_DIR)


def new_dated_dir(parent: Path, name: str | None = None) -> tuple[str, Path]:
    """A fresh id (`dated_id()` unless given) and its folder under `parent`."""
    name = name or dated_id()
    folder = Path(parent) / name
    folder.mkdir(parents=True)
    return name, folder


def dated_id() -> str:
    """The UTC time to the second and 4 random hex digits: 20261201T120301-3f2a."""
    return utc_now().replace(":", "").replace("-", "").replace("+0000", "Z")[:15] + \
        "-" + uuid.uuid4().hex[:4]


def build_replayer(program: Program, tag: str, settings: FullScaleRuns, *, sandbox: str,
                   on_event: Callable[[Replay], None] = lambda event: None,
                   runner: Any = None) -> tuple[Replayer, Workspace]:
    """Assemble a Replayer for `tag` of `program` the way `nightshift run` assembles a loop
    (same workspace, data and sandbox choice). Returns it with the tag's workspace, whose
    `resolve` and `parent` turn user input into commits. Raises FileNotFoundError when the
    tag has no ledger."""
    from agent.run.data import prepare_data
    from agent.preflight.lock import refuse_if_locked
    from agent.run.data import data_cache
    from agent.run.plan import results_dir

    tag_dir = results_dir(program, tag)
    if not (tag_dir / LEDGER_FILE).exists():
        raise FileNotFoundError(f"no ledger at {tag_dir / LEDGER_FILE}; run `nightshift run "
                                f"--tag {tag}` first, or pass the tag that holds the commits")
    # The tag's worktree is reset when opened: not while its night runs (agent/preflight/lock.py).
    refuse_if_locked(tag_dir, tag)
    ledger = Ledger(tag_dir)
    original_budget_s = ledger.state.budget_s or program.budget_s
    refusals, warnings = unexpressed_changes(
        program.command, settings, original_budget_s,
        commit_reads(program.root, ledger.state.incumbent or ledger.state.base_commit or "HEAD"))
    if refusals:
        raise ReplayRefused(" ".join(refusals))
    workspace = Workspace.open(program.root, tag, tag_dir / "worktree")
    data = prepare_data(program.prepare, workspace.path, data_cache())
    if runner is None:
        from sandbox.select import make_runner

        runner, _ = make_runner(sandbox, image=program.image)
    plan = RunPlan.from_program(program, budget_s=settings.budget_s, split=settings.split)
    replay_id, folder = new_replay_dir(tag_dir)
    executor = RunExecutor(plan=plan, runner=runner, workspace=workspace, ledger=Ledger(folder),
                           data=data, results_dir=folder, private_root=tag_dir.parent)
    replayer = Replayer(tag_dir=tag_dir, ledger=ledger, state=ledger.state,
                        executor=executor, replay_id=replay_id, direction=program.direction,
                        original_budget_s=original_budget_s, on_event=on_event, warnings=warnings)
    return replayer, workspace
