"""`nightshift check` proves each knob live (agent/preflight/knob_probe.py): statically where
the source shows a dataclass default that every construction overwrites (karpathy/makemore's
ModelConfig, as shipped), else by a short probe run beside a short reference run on one seed,
through the real CLI and the local sandbox."""
import re
from pathlib import Path

from agent.preflight.knob_probe import ShortRun, compare, comparable, dead_fix, overwritten, probe_values
from agent.target.knobs import find_knobs
from tests.loop_helpers import cli_env, make_repo, nightshift

MAKEMORE = Path(__file__).parents[1] / "fixtures" / "makemore" / "makemore.py"

# One live knob (LR moves every loss) and one dead one (train() shadows WIDTH with its own);
# the time column differs from run to run, as a real script's does, and must not count.
TRAIN = '''import argparse, random, time

LR = 0.05          # step size  # search: log(0.01, 0.5)
WIDTH = 16         # hidden units  # search: int(8, 64)


def train(seed):
    WIDTH = 32     # the width this script was tuned with, long ago
    rng = random.Random(seed)
    print(f"config: width={WIDTH} seed={seed}")
    print(f"parameters: {WIDTH * WIDTH + WIDTH}")
    loss = 3.0
    for step in range(8):
        t0 = time.perf_counter()
        loss -= LR * rng.random() * loss
        time.sleep(0.01)
        print(f"step {step}: loss {loss:.4f}, time {(time.perf_counter() - t0) * 1000:.3f}ms")
    print(f"val_loss: {loss + rng.gauss(0, 0.01):.4f}")


parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=0)
train(parser.parse_args().seed)
'''
PROGRAM = """---
target: train.py
command: python train.py --seed {seed}
prepare: null
metric: val_loss
metric_pattern: 'val_loss: ([0-9.]+)'
budget: 3s
grace: 20s
sandbox: local
researcher: optuna
---
Lower val_loss.
"""


def test_check_names_the_dead_knob_with_its_reason_and_fix_and_passes_the_live_one(tmp_path):
    repo = make_repo(tmp_path / "user", {"train.py": TRAIN, "program.md": PROGRAM})
    env = cli_env(tmp_path / "data")
    done = nightshift(repo, "check", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    line = next((l for l in done.stdout.splitlines() if l.startswith("FAIL knobs live:")), None)
    assert line is not None, done.stdout
    out = " ".join(done.stdout.split())
    assert re.search(r"dead: WIDTH: changing WIDTH 16 -> 64 or 8 changed nothing the script printed in [0-9.]+ s "
                     r"on seed 0 \(11 lines\)", out), out
    assert "live: LR (0.05 -> 0.5): output line 3 differed: 'step 0: loss" in out
    assert re.search(r"probes took [0-9.]+ s on seed 0", out) and "knob probes took" in out
    fix = out[out.index("knobs live: fix:"):]
    assert ("WIDTH: WIDTH (line 4) is never read: train() at line 8 assigns its own WIDTH, which "
            "shadows it") in fix and "--allow-dead-knobs" in fix
    assert "LR:" not in fix
    assert "ok your checkout untouched" in out and (repo / "train.py").read_text() == TRAIN
    # the user's opt-out: the dead knob is said, as a warning
    allowed = nightshift(repo, "check", "--allow-dead-knobs", env=env)
    said = next(l for l in allowed.stdout.splitlines() if "knobs live:" in l)
    assert said.startswith("--   knobs live: dead: WIDTH") and "(--allow-dead-knobs: not a failure)" in said
    assert "FAIL knobs live" not in allowed.stdout


def test_a_makemore_config_field_the_flags_overwrite_is_dead_from_the_source():
    source = MAKEMORE.read_text()
    knobs = {k.name: k for k in find_knobs(source, path="makemore.py", declared={
        "ModelConfig.n_embd": "int(32, 256)", "ModelConfig.n_layer": "int(2, 8)"})}
    found = overwritten(source, knobs["ModelConfig.n_embd"])
    assert found is not None and found.calls == ((635, "args.n_embd"),)
    assert found.fix() == ("ModelConfig(...) at line 635 passes n_embd=args.n_embd, which overwrites "
                           "the default: name the flag the script reads instead (`--n-embd`, line 613)")
    assert "passes n_layer=args.n_layer" in overwritten(source, knobs["ModelConfig.n_layer"]).reason()
    # a probe that found it dead (the source part aside) gives the same fix
    assert dead_fix(source, knobs["ModelConfig.n_embd"], "makemore.py", 3.0) == found.fix()
    assert probe_values(knobs["ModelConfig.n_embd"]) == [256, 32]     # the far end first


def test_a_field_default_some_construction_uses_is_not_dead_from_the_source():
    source = MAKEMORE.read_text().replace(
        "    if args.type == 'transformer':", "    small = ModelConfig(vocab_size=vocab_size, block_size=block_size)\n"
        "    if args.type == 'transformer':", 1)
    knob = find_knobs(source, path="makemore.py", declared={"ModelConfig.n_embd": "int(32, 256)"})[0]
    assert overwritten(source, knob) is None


def test_timing_is_masked_and_losses_are_not():
    a = comparable("step 10 | loss 2.3012 | step time 12.81ms")
    assert a == comparable("step 10 | loss 2.3012 | step time 40.02ms")
    assert a != comparable("step 10 | loss 2.3013 | step time 12.81ms")
    assert comparable("iter 3: loss 4.1, time 88.1ms, mfu -100.00%") == comparable("iter 3: loss 4.1, time 9.0ms, mfu 3.2%")
    assert comparable("learning_rate = 1e-3 # tuned", frozenset({"learning_rate = 1e-3 # tuned"})) is None


def run(*lines: str, stopped: bool = True, status: str = "interrupted") -> ShortRun:
    from sandbox import Status

    return ShortRun(tuple(comparable(l) for l in lines), lines, 1.0, stopped, Status(status),
                    None if stopped else 1, "")


def test_two_outputs_are_compared_over_their_common_prefix():
    reference = run("params: 1024", "step 0 loss 2.90 dt 3ms", "step 1 loss 2.71 dt 3ms")
    assert compare(reference, run("params: 1024", "step 0 loss 2.90 dt 9ms"))[0] == "dead"
    verdict, evidence = compare(reference, run("params: 1024", "step 0 loss 2.80 dt 3ms"))
    assert verdict == "live" and evidence.startswith("output line 2 differed: 'step 0 loss 2.90")
    crashed = run("params: 1024", stopped=False, status="crash")      # it ended on its own, early
    assert compare(reference, crashed)[0] == "live"
    assert compare(run("starting", "training"), run("starting", "training"))[0] == "unproven"


def test_a_line_that_echoes_the_setting_is_no_evidence():
    from agent.preflight.knob_probe import echoes_setting

    line = "{'n_layer': 4, 'n_embd': 64, 'n_embd2': 64, 'learning_rate': 0.0005}"
    assert echoes_setting(line, line.replace("'n_embd2': 64", "'n_embd2': 128"), 64, 128)
    assert echoes_setting(line, line.replace("0.0005", "0.01"), 5e-4, 0.01)
    assert not echoes_setting(line, line.replace("64", "128"), 64, 128)     # two places moved
    assert not echoes_setting("number of parameters: 0.20M", "number of parameters: 0.40M", 4, 8)
