"""Synthetic nights for report tests: real events written through agent.ledger.Ledger.

`synthetic_night(results_dir, experiments=500)` writes what a loop would: loop_started, the
base's reference runs, then per experiment a proposal (or an invalid edit), candidate runs
with statuses drawn at random (mostly ok, some crash/timeout/oom), a decision with effect,
interval, p-value and a scored prediction, reference runs for each new incumbent, replays,
and a provenance.json with a diff for some runs. Deterministic for a given `seed`.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from unittest import mock

from agent.decide.scoring import score_prediction
from agent.record.events import (Decision, DecisionMade, ExperimentInvalid, ExperimentProposed,
                                 LoopStarted, LoopStopped, Prediction, ReplayCommit, ReplaySummary,
                                 RunFinished, RunStarted, Usage, Verdict)
from agent.record.ledger import Ledger
from agent.record.records import Direction
from sandbox import Status

ENV = {"python": "3.11.7", "torch": "2.13.0+cpu", "numpy": "2.4.6", "cuda": None, "cudnn": None,
       "driver": None, "gpus": [], "gpu_count": 0, "cpu_model": "Synthetic CPU", "cpu_count": 2,
       "hostname": "synthetic", "platform": "Linux", "nightshift": "0.1.0"}
FAILURES = ("crash", "timeout", "oom", "no_metric", "bad_metric")


def _sha(rng: random.Random) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(40))


class _Night:
    def __init__(self, results_dir: Path, seed: int) -> None:
        self.dir = Path(results_dir)
        self.ledger = Ledger(self.dir)
        self.rng = random.Random(seed)
        self.run_count = 0

    def run(self, commit: str, seed: int, role: str, experiment: str | None, value: float | None,
            status: str = "ok", diff: str | None = None) -> RunFinished:
        self.run_count += 1
        run_id = f"{commit[:8]}-s{seed}-{role[:3]}-{self.run_count:06x}"
        self.ledger.append(RunStarted(run_id=run_id, commit=commit, seed=seed, role=role,
                                      experiment=experiment))
        if diff is not None:
            folder = self.dir / "runs" / run_id
            folder.mkdir(parents=True)
            (folder / "provenance.json").write_text(json.dumps(
                {"run_id": run_id, "commit": commit, "diff": diff, "environment": ENV,
                 "sandbox": {"backend": "local"}, "data_meta": {"corpus_hash": "feedface"}}))
        return self.ledger.append(RunFinished(
            run_id=run_id, commit=commit, seed=seed, role=role, experiment=experiment,
            status=Status(status), metric=value if status == "ok" else None,
            metrics={"steps": self.rng.randint(500, 900)} if status == "ok" else {},
            duration_s=round(self.rng.uniform(55, 70), 3), peak_memory_mb=1500.0,
            reason="" if status == "ok" else f"{status} on seed {seed}", backend="local",
            env_fingerprint="e0294b3c6d45bf97",
            log_tail="step 900 | loss 1.41\n---\nval_bpb: 2.0\n" * 20))


def synthetic_night(results_dir: Path, experiments: int = 500, *, seed: int = 0,
                    crashes_only: bool = False, replays: bool = True, noise: float = 0.01,
                    base: str | None = None, keeps: bool = True, stop: bool = True) -> Path:
    """`base`: the base commit's sha (a real one lets a real loop resume the night); `keeps`:
    whether any candidate is kept (False keeps `base` the incumbent); `stop`: end with
    loop_stopped."""
    # Every line still goes through Ledger.append; only its per-line fsync is skipped, which
    # would make 500 synthetic experiments take half a minute on a busy disk.
    with mock.patch("agent.record.ledger.os.fsync"):
        return _write_night(Path(results_dir), experiments, seed, crashes_only, replays, noise,
                            base, keeps, stop)


def _write_night(results_dir: Path, experiments: int, seed: int, crashes_only: bool,
                 replays: bool, noise: float, base: str | None, keeps: bool, stop: bool) -> Path:
    night = _Night(results_dir, seed)
    rng, ledger = night.rng, night.ledger
    base = base or _sha(rng)
    ledger.append(LoopStarted(tag=Path(results_dir).name, base_commit=base,
                              program={"metric": "val_bpb", "direction": "minimize", "budget_s": 60.0},
                              researcher="claude", sandbox="local", rule="sequential", budget_s=60.0,
                              corpus_hash="feedface"))
    level = 2.0
    for s in range(3):
        night.run(base, s, "reference", None, level + rng.gauss(0, noise))
    incumbent = base
    for index in range(1, experiments + 1):
        eid = f"e{index:04d}"
        # most ideas do nothing; some help a little, some hurt (a realistic night)
        true_delta = 0.0 if rng.random() < 0.6 else rng.gauss(-0.004, 0.015)
        expected = true_delta + rng.gauss(-0.003, 0.01)   # researchers are optimists
        prediction = Prediction("improve" if expected < 0 else "worsen", expected,
                                (expected - 0.02, expected + 0.02), 0.8)
        description = f"knob change {index}: LR x{rng.choice([0.5, 0.8, 1.25, 2])} <b>&amp;</b>"
        usage = Usage(input_tokens=1500, output_tokens=110, cache_read_input_tokens=4200,
                      cache_creation_input_tokens=250, cache_creation_1h_input_tokens=200, usd=0.02,
                      calls=2, retries=int(index % 3 == 0))
        extra = {"model": "claude-sonnet-5-5", "turns": 2, "errors": {"bad_edit": 1} if index % 50 == 0 else {},
                 "transcript": f"researcher/transcripts/{index:04d}.json"}
        if not crashes_only and rng.random() < 0.03:
            ledger.append(ExperimentInvalid(id=eid, parent=incumbent, reason="train.py does not parse",
                                            description=description, hypothesis="h",
                                            prediction=prediction, researcher="claude",
                                            diff="--- a/train.py\n+++ b/train.py\n-x\n+x(\n", usage=usage,
                                            extra=extra))
            continue
        commit = _sha(rng)
        diff = f"--- a/train/train.py\n+++ b/train/train.py\n@@ -1 +1 @@\n-LR = 3e-3\n+LR = {index}e-4\n"
        ledger.append(ExperimentProposed(id=eid, commit=commit, parent=incumbent,
                                         description=description,
                                         hypothesis=f"hypothesis {index} <script>x</script>",
                                         prediction=prediction, researcher="claude", extra=extra,
                                         usage=usage))
        if crashes_only or rng.random() < 0.08:
            status = rng.choice(FAILURES)
            night.run(commit, 1000 + index, "candidate", eid, None, status, diff=diff)
            ledger.append(DecisionMade(id=eid, commit=commit, incumbent=incumbent,
                                       verdict=Verdict(status), reason=f"{status} on seed {1000 + index}"))
            continue
        seeds = [1000 + index + j for j in range(rng.choice([1, 2, 4, 6]))]
        values = {s: level + true_delta + rng.gauss(0, noise) for s in seeds}
        for j, s in enumerate(seeds):
            night.run(commit, s, "candidate", eid, values[s], diff=diff if j == 0 else None)
        effect = level - sum(values.values()) / len(values)
        half = 2 * noise / len(seeds) ** 0.5
        verdict = Verdict.KEEP if keeps and effect - half > 0 and len(seeds) >= 2 else \
            Verdict.DISCARD if len(seeds) < 6 else Verdict.INCONCLUSIVE
        decision = Decision(verdict=verdict, effect=effect, interval=(effect - half, effect + half),
                            p_value=min(1.0, max(1e-4, 0.5 - effect / (4 * noise))),
                            seeds=tuple(seeds), candidate_values=values, rule="sequential")
        score = score_prediction(prediction, decision, Direction.MINIMIZE)
        ledger.append(DecisionMade(id=eid, commit=commit, incumbent=incumbent, verdict=verdict,
                                   decision=decision, reason=f"{verdict}: effect {effect:+.4f}",
                                   score=score))
        if verdict == Verdict.KEEP:
            incumbent, level = commit, level + true_delta
            for s in range(3):
                night.run(commit, s, "reference", None, level + rng.gauss(0, noise))
    if replays and not crashes_only:
        _replays(ledger, rng, base)
    if stop:
        ledger.append(LoopStopped(reason=f"reached --max-experiments {experiments}", exit_code=0))
    return Path(results_dir)


def _replays(ledger: Ledger, rng: random.Random, base: str) -> None:
    state = ledger.state
    kept = state.kept()[:6]
    commits = [base] + [e.commit for e in kept]
    for commit in commits:
        experiment = next((e for e in kept if e.commit == commit), None)
        proxy = experiment.decision.effect if experiment else None
        full = proxy * rng.uniform(-0.5, 1.5) if proxy is not None else None
        ledger.append(ReplayCommit(
            replay_id="r1", commit=commit, target_role="kept" if experiment else "base",
            experiment=experiment.id if experiment else None,
            parent=experiment.parent if experiment else None, budget_s=600.0, split="test",
            values={0: 1.9, 1: 1.91}, n_ok=2, n_failed=0, mean=1.905, sd=0.007,
            original={"kind": "reference", "n": 3, "budget_s": 60.0, "split": "val", "mean": 1.95},
            reproduce={"reproduced": None, "why": "budget or split differs"},
            proxy_effect=proxy, proxy_interval=(proxy - 0.01, proxy + 0.01) if proxy else None,
            full_effect=full, full_interval=(full - 0.01, full + 0.01) if full else None,
            full_effect_vs_base=full, full_interval_vs_base=None, env_changed=commit == base,
            env_diff=[{"field": "torch", "original": "2.12.0", "current": "2.13.0",
                       "material": True}] if commit == base else []))
    ledger.append(ReplaySummary(
        replay_id="r1", budget_s=600.0, seeds=(0, 1), split="test", commits=tuple(commits),
        reproduce=False, rank_effects={"rho": 0.4, "n": len(kept)},
        rank_values={"rho": 0.9, "n": len(commits)}, reproduced=(), not_reproduced=(),
        env_changed=True))
