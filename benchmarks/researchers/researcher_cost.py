"""What an LLM researcher costs over a night, and how much of its prompt the cache serves.

    python -m benchmarks.researchers.researcher_cost [--experiments 200] [--model claude-sonnet-5-5]

Simulates a night of the claude researcher against the strict fake Messages API (the real
SDK, the real prompt, the real train/train.py and program.md as the incumbent and the brief),
with a simulated clock so that the prompt cache's TTLs bite as they would: each experiment
takes its runs' time (budget x seeds, more after a keep, when the new incumbent is measured)
between two proposals, and each turn of the model takes seconds. The model's answers follow
a realistic pattern (think and edit; look at the diff; submit), with output token counts
from real conversations of this shape. The ledger the brief is built from grows as the
night goes (a keep every ~15 experiments changes the incumbent's source).

Prints, for a 60 s and a 5 min budget and for `cache_ttl` 5m and 1h: the prompt tokens split
into cache reads, writes and uncached input, the share served from the cache, output
tokens and dollars at today's prices (agent/researchers/pricing.py); then the prompt size
of the first call of experiment 1, 100 and 500. Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path


import anthropic

from agent.program import load_program
from agent.record.brief import EvaluationPlan, build_brief
from agent.record.events import (Decision, DecisionMade, ExperimentProposed, LoopStarted,
                                 Prediction, RunFinished, Score, Usage, Verdict)
from agent.record.ledger import Ledger
from agent.researchers.base import ResearchContext
from agent.researchers.claude import ClaudeResearcher
from sandbox import Status
from tests.fakes.anthropic_api import FakeAnthropic, message, text, thinking, tool_use
from tests.fakes.prompt_cache import PromptCache

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = load_program(ROOT / "program.md")
SOURCE = (ROOT / "train" / "train.py").read_text()
PREPARE = (ROOT / "train" / "prepare.py").read_text()
TURN_S = 20.0             # the model's time per turn (thinking and writing)
OVERHEAD_S = 15.0         # per run: start-up, evaluation, the harness
METRICS = {"steps": 1850, "tokens": 7_577_600, "tokens_per_s": 126_293.0, "train_seconds": 60.0,
           "eval_seconds": 4.1, "total_seconds": 71.3, "peak_memory_mb": 2310.0, "params": 6_812_416,
           "device": "cuda", "mfu": 0.21, "train_loss": 1.0412, "grad_norm": 0.38, "update_ratio": 0.0011,
           "split": "val", "knobs": {"LR": 0.003}}
LOG_TAIL = "\n".join(f"step {s} | loss {1.9 - s / 2000:.4f} | lr 3.0e-03 | grad_norm 0.41 | update_ratio 1.1e-03 | "
                     f"elapsed {s / 31:.1f}s" for s in range(1400, 1851, 50)) + \
    "\n---\nval_bpb:        1.03412\nsteps:          1850\ntokens_per_s:   126293\npeak_memory_mb: 2310"


class Clock:
    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class SimulatedNight:
    """The ledger of a night as the loop would write it, advanced one experiment at a time."""

    def __init__(self, folder: Path, budget_s: float, rng: random.Random) -> None:
        self.ledger, self.budget_s, self.rng = Ledger(folder), budget_s, rng
        self.source, self.incumbent, self.n = SOURCE, "base0000" * 5, 0
        self.ledger.append(LoopStarted(tag="bench", base_commit=self.incumbent))
        self.reference(self.incumbent)

    def reference(self, commit: str) -> float:
        for seed in range(PROGRAM.seeds.baseline):
            self.ledger.append(RunFinished(run_id=f"{commit[:8]}-{seed}", commit=commit, seed=seed, role="reference",
                                           status=Status.OK, metric=1.03 + self.rng.gauss(0, 0.004),
                                           metrics=METRICS, log_tail=LOG_TAIL))
        return PROGRAM.seeds.baseline * (self.budget_s + OVERHEAD_S)

    def decide(self, description: str, new_source: str, prediction: Prediction) -> float:
        """Record the experiment; returns the seconds its runs took."""
        self.n += 1
        eid, commit = f"e{self.n:04d}", f"{self.n:08x}" * 5
        self.ledger.append(ExperimentProposed(id=eid, commit=commit, parent=self.incumbent, description=description,
                                              hypothesis="h", prediction=prediction, researcher="claude"))
        seeds = self.rng.choice([1, 1, 1, 2, 4, 8])
        for seed in range(seeds):
            self.ledger.append(RunFinished(run_id=f"{eid}-{seed}", commit=commit, seed=seed, role="candidate",
                                           experiment=eid, status=Status.OK, metric=1.03, metrics=METRICS))
        keep = self.n % 15 == 0
        verdict = Verdict.KEEP if keep else Verdict.DISCARD if seeds < 8 else Verdict.INCONCLUSIVE
        effect = 0.01 if keep else self.rng.gauss(-0.003, 0.006)
        self.ledger.append(DecisionMade(
            id=eid, commit=commit, incumbent=self.incumbent, verdict=verdict, reason="sequential test",
            decision=Decision(verdict=verdict, effect=effect, interval=(effect - 0.006, effect + 0.006),
                              p_value=0.01 if keep else 0.4, seeds=tuple(range(seeds))),
            score=Score(measured_delta=-effect, measured_direction="improve", direction_right=keep,
                        covered=self.rng.random() < 0.7, error=0.002, confidence=0.8)))
        seconds = seeds * (self.budget_s + OVERHEAD_S)
        if keep:
            self.incumbent, self.source = commit, new_source
            seconds += self.reference(commit)
        return seconds

    def context(self, deadline: float) -> ResearchContext:
        state = self.ledger.state
        plan = EvaluationPlan(metric=PROGRAM.metric, direction=PROGRAM.direction, budget_s=self.budget_s,
                              seeds_baseline=PROGRAM.seeds.baseline, seeds_screen=PROGRAM.seeds.screen,
                              seeds_max=PROGRAM.seeds.max, alpha=PROGRAM.alpha, min_effect=PROGRAM.min_effect,
                              rule=PROGRAM.decision)
        brief = build_brief(state, plan, noise_sd=0.0041, noise_dof=5 + self.n,
                            environment={"gpus": ["NVIDIA H200, 143771 MiB, 570.86"], "cpu_count": 16,
                                         "torch": "2.13.0", "cuda": "13.0"})
        return ResearchContext(program_text=PROGRAM.prose, target="train/train.py", incumbent_source=self.source,
                               incumbent_commit=self.incumbent, protected={"train/prepare.py": PREPARE},
                               ledger_summary=brief.text(), metric=PROGRAM.metric, direction=PROGRAM.direction,
                               noise_sd=0.0041, incumbent_value=1.03, experiment_index=state.next_index,
                               brief=brief, deadline=deadline)


def _knob_edit(source: str, n: int) -> dict:
    """A small edit of the LR line (a comment added: the source stays valid and changes)."""
    line = next(l for l in source.splitlines() if l.startswith("LR "))
    return {"path": "train/train.py", "old_string": line, "new_string": f"{line} [{n}]"}


def replies(source: str, n: int, prediction: dict) -> list:
    """One experiment's three turns: think and edit, read the diff, submit."""
    edit = _knob_edit(source, n)
    return [
        message([thinking("The loss is still falling at the end of the budget ... " * 20),
                 text("The schedule spends too long at peak LR; try a longer warmdown."),
                 tool_use("edit_file", edit)], output_tokens=1400),
        message([tool_use("show_draft_diff", {})], output_tokens=120),
        message([tool_use("submit", {"description": f"warmdown variant {n}", "hypothesis": "a longer warmdown "
                                     "anneals more of the noise out of the final weights", "prediction": prediction})],
                output_tokens=380),
    ]


def night(experiments: int, budget_s: float, ttl: str, model: str) -> dict:
    rng, clock = random.Random(7), Clock()
    prediction = {"direction": "improve", "expected_delta": -0.004, "interval": [-0.012, 0.003],
                  "confidence": 0.7, "rationale": "warmdown helps when the loss is still falling"}
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic(clock=clock.time) as fake:
        sim = SimulatedNight(Path(tmp) / "night", budget_s, rng)
        client = anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-bench-0000000000", max_retries=0)
        researcher = ClaudeResearcher(Path(tmp) / "researcher", {"model": model, "cache_ttl": ttl, "max_usd": None},
                                      client=client, sleep=clock.sleep, clock=clock.time)
        deadline = clock.now + 10 * 24 * 3600
        total = Usage()
        for n in range(1, experiments + 1):
            context = sim.context(deadline)
            script = replies(context.incumbent_source, n, prediction)
            fake.push(*[(lambda reply: (lambda request: (clock.sleep(TURN_S), reply)[1]))(r) for r in script])
            proposal = researcher.propose(context)
            total = total + proposal.usage
            clock.sleep(sim.decide(proposal.description, proposal.source, proposal.prediction))
        if fake.rejections:
            print(f"  the fake refused {len(fake.rejections)} requests: {fake.rejections[0]}")
    return {"usage": total, "hours": (clock.now - 1_900_000_000.0) / 3600}


def prompt_tokens_at(index: int, model: str) -> tuple[int, int]:
    """(bytes, tokens) of the first request of experiment `index`, the night's ledger having
    index - 1 experiments before it."""
    rng, clock = random.Random(3), Clock()
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic(clock=clock.time) as fake:
        sim = SimulatedNight(Path(tmp) / "night", 60.0, rng)
        prediction = Prediction("improve", -0.004, (-0.012, 0.003), 0.7, "r")
        for n in range(1, index):
            sim.decide(f"warmdown variant {n}: longer linear decay over the last {20 + n % 30}% of time",
                       sim.source, prediction)
        client = anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-bench-0000000000", max_retries=0)
        researcher = ClaudeResearcher(Path(tmp) / "r", {"model": model, "max_usd": None}, client=client,
                                      sleep=clock.sleep, clock=clock.time)
        fake.push(*replies(sim.source, index, {"direction": "same", "expected_delta": 0.0, "interval": [-0.01, 0.01],
                                               "confidence": 0.7, "rationale": "r"}))
        researcher.propose(sim.context(clock.now + 3600))
        first = fake.requests[0]
        return len(first.body), PromptCache(min_tokens=10**9).usage(first.json)["input_tokens"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=200)
    parser.add_argument("--model", default=PROGRAM.claude.model)
    args = parser.parse_args()
    print(f"{args.experiments}-experiment night of the claude researcher ({args.model}) against the strict fake;"
          f" incumbent: train/train.py ({len(SOURCE):,} chars), brief from the night's ledger\n")
    print(f"{'budget':>7} {'ttl':>4} {'hours':>6} {'prompt tok':>11} {'cached':>7} {'reads':>11} {'writes 5m':>10} "
          f"{'writes 1h':>10} {'uncached':>9} {'output':>9} {'dollars':>8} {'$/exp':>7}")
    for budget in (60.0, 300.0):
        for ttl in ("5m", "1h"):
            result = night(args.experiments, budget, ttl, args.model)
            u = result["usage"]
            print(f"{budget:>6.0f}s {ttl:>4} {result['hours']:>6.1f} {u.prompt_tokens:>11,} {u.cached_share:>7.1%} "
                  f"{u.cache_read_input_tokens:>11,} {u.cache_creation_5m_input_tokens:>10,} "
                  f"{u.cache_creation_1h_input_tokens:>10,} {u.input_tokens:>9,} {u.output_tokens:>9,} "
                  f"{u.usd:>8.2f} {u.usd / args.experiments:>7.3f}")
    print("\nprompt size of an experiment's first call (system + tools + messages):")
    for index in (1, 100, 200, 500):
        size, tokens = prompt_tokens_at(index, args.model)
        print(f"  experiment {index:>4}: {size:>7,} bytes of request, ~{tokens:,} tokens")


if __name__ == "__main__":
    main()
