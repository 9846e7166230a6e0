"""A short night with one of each thing an agent must read: written through the real Ledger
with real events, over real commits of a real repository, in a second (a trained night takes
minutes and leaves which experiment ends how to chance).

    e0001  kept         WIDTH 64 -> 128, two paired seeds, then its fresh seeds
    e0002  discarded    SCALE 1.0 -> 2.0; a figure of its run is NaN, its test's p-value too
    e0003  invalid      an edit that does not parse (never committed)
    e0004  flagged      misreported: the script said 0.5, the evaluator measured 2.1
    e0005  pending      its run still in flight when the loop was killed

Every run has a log file, a curve and the training dynamics train.py's result.json records.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from agent.decide.scoring import score_prediction
from agent.record.curves import Curve, CurvePoint
from agent.record.events import (Comparison, Decision, DecisionMade, Direction, ExperimentInvalid,
                                 ExperimentProposed, HypothesisQueued, LoopStarted, LoopStopped,
                                 Prediction, RunFinished, RunStarted, Verdict)
from agent.record.ledger import Ledger
from sandbox import Status
from tests.loop_helpers import git_out, make_repo
from tests.night.test_keep_rule_loop import NOISE_SCRIPT, PROGRAM

TAG = "agents"
NAN = float("nan")


@dataclass(frozen=True)
class Night:
    repo: Path
    folder: Path            # results/<tag>/
    base: str
    commits: dict[str, str]  # experiment id -> its commit


def _commit(repo: Path, parent: str, old: str, new: str, name: str) -> str:
    """A commit of the script with `old` replaced by `new`, on a branch of its own from
    `parent` (as the night's branch holds its candidates); the checkout is left on main."""
    git = ["git", "-C", str(repo), "-c", "user.name=Test", "-c", "user.email=test@localhost"]
    subprocess.run([*git, "checkout", "-q", "-b", f"candidates/{name}", parent], check=True)
    script = repo / "noise.py"
    script.write_text(script.read_text().replace(old, new))
    subprocess.run([*git, "commit", "-qam", name], check=True)
    sha = git_out(repo, "rev-parse", "HEAD")
    subprocess.run([*git, "checkout", "-q", "main"], check=True)
    return sha


def _curve(start: float) -> Curve:
    return Curve(tuple(CurvePoint(fraction=f, loss=round(start - 2 * f, 4), step=int(100 * f), lr=1e-3)
                       for f in (0.1, 0.25, 0.5, 0.75, 1.0)),
                 batch_shape="64x64", total_steps=100, placed="elapsed")


class _Writer:
    def __init__(self, folder: Path) -> None:
        self.folder, self.ledger, self.count = folder, Ledger(folder), 0

    def run(self, commit: str, seed: int, role: str, experiment: str | None, value: float | None,
            *, status: Status = Status.OK, finish: bool = True, metrics: dict | None = None, **more) -> str:
        self.count += 1
        run_id = f"{commit[:8]}-s{seed}-{role[:3]}-{self.count:04d}"
        self.ledger.append(RunStarted(run_id=run_id, commit=commit, seed=seed, role=role,
                                      experiment=experiment, worker=0, device="cpu:0", budget_s=1.0))
        if not finish:
            return run_id
        log = Path("runs") / run_id / "log.txt"
        (self.folder / log).parent.mkdir(parents=True)
        (self.folder / log).write_text(f"step 100 | loss 2.0\n---\nval_bpb: {value}\n")
        dynamics = {"grad_norm": 0.8, "update_ratio": 1.2e-3, "tokens_per_s": 51200.0,
                    "flops_per_s": 3.1e11, "train_loss": 2.0, "steps": 100, "val_bpb": value}
        self.ledger.append(RunFinished(
            run_id=run_id, commit=commit, seed=seed, role=role, experiment=experiment, status=status,
            metric=value if status == Status.OK else None, metrics={**dynamics, **(metrics or {})},
            duration_s=1.02, eval_duration_s=0.4, peak_memory_mb=812.5, log=str(log),
            log_tail=f"---\nval_bpb: {value}\n", measured_by="evaluator", curve=_curve(4.0 + seed / 10),
            worker=0, device="cpu:0", **more))
        return run_id


def write_night(root: Path) -> Night:
    repo = make_repo(root / "user", {"noise.py": NOISE_SCRIPT, "program.md": PROGRAM})
    base = git_out(repo, "rev-parse", "HEAD")
    folder = repo / "results" / TAG
    w = _Writer(folder)
    ledger = w.ledger
    ledger.append(LoopStarted(tag=TAG, base_commit=base, program={"metric": "val_bpb", "budget_s": 1.0},
                              researcher="optuna", sandbox="local", rule="sequential", budget_s=1.0, workers=1))
    ledger.append(HypothesisQueued(hypothesis_id="h0001", text="MODE='c' should help", origin="seed"))
    ledger.append(HypothesisQueued(hypothesis_id="h0002", text="a longer warmup", origin="cli"))
    for seed, value in ((0, 2.00), (1, 2.02)):
        w.run(base, seed, "reference", None, value)

    c1 = _commit(repo, base, "WIDTH = 64", "WIDTH = 128", "e0001")
    prediction = Prediction("improve", -0.03, (-0.06, 0.0), 0.8, "a wider model fits more")
    ledger.append(ExperimentProposed(id="e0001", commit=c1, parent=base, description="WIDTH 64 -> 128",
                                     hypothesis="width is the bottleneck", prediction=prediction,
                                     researcher="optuna", extra={"params": {"WIDTH": 128}}))
    candidate = {0: 1.96, 1: 1.97}
    for seed, value in candidate.items():
        w.run(c1, seed, "candidate", "e0001", value)
    test = Decision(verdict=Verdict.KEEP, effect=0.045, interval=(0.01, 0.08), p_value=0.012, seeds=(0, 1),
                    candidate_values=candidate, reference_values={0: 2.00, 1: 2.02}, rule="sequential",
                    reason="keep: p=0.012 < 0.04", comparison=Comparison(2, 0.045, 2, 0.3))
    ledger.append(DecisionMade(id="e0001", commit=c1, incumbent=base, verdict=Verdict.KEEP, reason=test.reason,
                               decision=test, score=score_prediction(prediction, test, Direction.MINIMIZE)))
    for seed, value in ((2, 1.965), (3, 1.975)):
        w.run(c1, seed, "reference", None, value)

    c2 = _commit(repo, c1, "SCALE = 1.0", "SCALE = 2.0", "e0002")
    ledger.append(ExperimentProposed(id="e0002", commit=c2, parent=c1, description="SCALE 1.0 -> 2.0",
                                     hypothesis="scale", researcher="optuna"))
    w.run(c2, 2, "candidate", "e0002", 1.99, metrics={"grad_norm": NAN})
    test = Decision(verdict=Verdict.DISCARD, effect=-0.025, interval=(-0.08, 0.03), p_value=NAN, seeds=(2,),
                    candidate_values={2: 1.99}, reference_values={2: 1.965, 3: 1.975}, rule="sequential",
                    reason="futility")
    ledger.append(DecisionMade(id="e0002", commit=c2, incumbent=c1, verdict=Verdict.DISCARD, reason="futility",
                               decision=test))

    ledger.append(ExperimentInvalid(id="e0003", parent=c1, reason="noise.py does not parse",
                                    description="a broken edit", researcher="optuna",
                                    diff="--- a/noise.py\n+++ b/noise.py\n-WIDTH = 64\n+WIDTH = (\n"))

    c4 = _commit(repo, c1, 'MODE = "a"', 'MODE = "b"', "e0004")
    ledger.append(ExperimentProposed(id="e0004", commit=c4, parent=c1, description="report a better number",
                                     researcher="optuna"))
    w.run(c4, 2, "candidate", "e0004", None, status=Status.MISREPORTED, reported=0.5,
          reason="the script reported val_bpb 0.5, the evaluator measured 2.1", metrics={"val_bpb": 2.1})
    ledger.append(DecisionMade(id="e0004", commit=c4, incumbent=c1, verdict=Verdict.MISREPORTED,
                               reason="misreported on seed 2: the script reported val_bpb 0.5"))

    c5 = _commit(repo, c1, 'MODE = "a"', 'MODE = "c"', "e0005")
    ledger.append(ExperimentProposed(id="e0005", commit=c5, parent=c1, description="MODE a -> c",
                                     researcher="optuna", hypothesis_id="h0001"))
    w.run(c5, 2, "candidate", "e0005", None, finish=False)
    ledger.append(LoopStopped(reason="interrupted (Ctrl-C)", exit_code=130))
    return Night(repo, folder, base, {"e0001": c1, "e0002": c2, "e0004": c4, "e0005": c5})
