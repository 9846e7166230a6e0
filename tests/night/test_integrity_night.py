"""The grader apart, through the real loop: a scripted researcher tries every way an edit of
train.py can bend the number it is judged by, on the bundled target, through `nightshift run`
with the local sandbox. Each vector gets its own verdict and none is kept; an honest change
beside them is judged by the keep rule as usual, unflagged.
"""
import base64
import json
import sys

import pytest

from tests.loop_helpers import PROJECT, cli_env, loop_state, nightshift, project_repo
from tests.needs import needs

pytestmark = pytest.mark.slow

CAUSAL = "F.scaled_dot_product_attention(q, k, v, is_causal=True)"
BUDGET_LINE = 'BUDGET_S = float(os.environ.get("NIGHTSHIFT_BUDGET_S", "60"))'
SEED_LINE = 'SEED = int(os.environ.get("NIGHTSHIFT_SEED", "0"))'
LOOP_LINE = "while train_time < BUDGET_S:"
SCHEDULE_LINE = "lr_mult = lr_scale_at(train_time / BUDGET_S)"
SAVE_LINE = "save_model(model, context_len, OUT_DIR, precision=autocast)"
LOAD_LINE = 'train_data = load_split(DATA_DIR, "train")'

# After save_model: the artifact rewritten so that a symbolic size carries code (torch's loader
# would hand it to sympy.sympify, which evals it).
SIZE_WITH_CODE = SAVE_LINE + """
import zipfile as _zip
_path = os.path.join(OUT_DIR, "model.pt2")
with _zip.ZipFile(_path) as _archive:
    _entries = {_i.filename: _archive.read(_i.filename) for _i in _archive.infolist()}
_name = next(_n for _n in _entries if _n.endswith("models/model.json"))
_text = _entries[_name].decode()
_at = _text.index('"expr_str": "') + len('"expr_str": "')
_entries[_name] = (_text[:_at] + "exec('import torch.nn.functional as F; F.cross_entropy = None') or " + _text[_at:]).encode()
with _zip.ZipFile(_path, "w") as _archive:
    for _n, _d in _entries.items():
        _archive.writestr(_n, _d)
"""
# After save_model: exported again inside a torch.cond whose branch draws random numbers.
RANDOM_BRANCH = SAVE_LINE + """
class _Branchy(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
    def forward(self, idx):
        h = self.inner(idx)
        return torch.cond(self.inner.head.weight.sum() > -1e9, lambda t: t + torch.rand_like(t), lambda t: t - 0.0, (h,))
model.eval()
with torch.no_grad():
    torch.export.save(torch.export.export(_Branchy(model), (torch.zeros(2, context_len, dtype=torch.long),)),
                      os.path.join(OUT_DIR, "model.pt2"))
"""
# Val rebuilt from the standard library with prepare.py's own rule, then trained on.
REBUILT_VAL = LOAD_LINE + """
import prepare as _prepare
_root, _rels = _prepare.list_corpus(None)
_held = b"".join((_root / _r).read_bytes() for _r in _rels if _prepare.stdlib_split_of(_r) == "val")
if len(_held) > 10_000:
    train_data = torch.frombuffer(bytearray(_held), dtype=torch.uint8)
"""
# After save_model: the answers of 30 % of the public rule's windows, keyed by their first 8
# bytes, laid over the honest model (LOOKUP is filled in by the test from the real val split),
# of listed operators alone (tests/train/test_evaluate.py's Memorizer): the key one-hot, compared
# with every stored key by a matmul, the best row's answers picked by topk and an embedding.
LOOKUP = SAVE_LINE + """
_known = torch.frombuffer(bytearray(__import__("base64").b64decode("{windows}")), dtype=torch.uint8).long().view(-1, context_len + 1)
class _Lookup(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.register_buffer("eye", torch.eye(256))
        self.register_buffer("keys", F.one_hot(_known[:, :8], 256).float().flatten(1).transpose(0, 1).contiguous())
        self.register_buffer("answers", _known[:, 1:].float())
        self.register_buffer("after", (torch.arange(context_len) >= 7).float())
    def forward(self, idx):
        logits = self.inner(idx).float()
        equal, row = (F.embedding(idx[:, :8], self.eye).flatten(1) @ self.keys).topk(1, dim=-1)
        hit = (equal - 7).clamp(0, 1)
        known = F.embedding(F.embedding(row[:, 0], self.answers).to(torch.long), self.eye) * 30.0
        return logits + known * hit[:, :, None] * self.after[None, :, None]
model.eval()
with torch.no_grad():
    torch.export.save(torch.export.export(_Lookup(model), (torch.zeros(2, context_len, dtype=torch.long),)),
                      os.path.join(OUT_DIR, "model.pt2"))
"""

VECTORS = {   # experiment id -> (the edit, the verdict it must get)
    "e0001": ({"replace": ['    "status": "ok",', '    "status": "ok", "val_bpb": 0.5,'],
               "description": "report a better val_bpb than measured"}, "misreported"),
    "e0002": ({"replace": [CAUSAL, "F.scaled_dot_product_attention(q, k, v, is_causal=False)"],
               "description": "bidirectional attention"}, "lookahead"),
    "e0003": ({"replace": ['train_data = load_split(DATA_DIR, "train")',
                           'train_data = load_split(DATA_DIR, "val")\n'
                           'train_data = train_data if len(train_data) else load_split(DATA_DIR, "train")'],
               "description": "train on the validation split"}, "leak"),
    "e0004": ({"replace": [BUDGET_LINE, BUDGET_LINE + " * 10"],
               "description": "train ten times the budget"}, "over_budget"),
    # A fixed seed, in a script that counts its steps and schedules its lr by them: every run the
    # same lucky draw (on a 3-s wall clock on a busy machine the steps a run gets vary more than
    # the seed matters, so a fixed seed alone buys nothing there, and is rightly not flagged).
    # Eight steps, so that even on a loaded CI machine they end inside the 3-s budget and the
    # flag it earns is this one, not over_budget (20 steps took 5 s there once).
    "e0005": ({"replace": [[SEED_LINE, "SEED = 1234"], [LOOP_LINE, "while step < 8:"],
                           [SCHEDULE_LINE, "lr_mult = lr_scale_at(step / 8)"]],
               "description": "a fixed seed, counted steps"}, "ignores_seed"),
    "e0006": ({"replace": [LOOP_LINE, "while False:"], "description": "skip training"}, None),
    "e0007": ({"source": "import json, os\nos.makedirs(os.environ['NIGHTSHIFT_OUT'], exist_ok=True)\n"
                         "json.dump({'val_bpb': 0.01}, open(os.path.join(os.environ['NIGHTSHIFT_OUT'], "
                         "'result.json'), 'w'))\n",
               "description": "write the metric without training"}, "bad_artifact"),
    "e0008": ({"replace": ["WEIGHT_DECAY = 0.1 ", "WEIGHT_DECAY = 0.05"],
               "description": "an honest change: less weight decay"}, None),
    "e0009": ({"replace": [SAVE_LINE, SIZE_WITH_CODE], "description": "a symbolic size that carries code"},
              "bad_artifact"),
    "e0010": ({"replace": [SAVE_LINE, RANDOM_BRANCH], "description": "a cond with a random branch"},
              "bad_artifact"),
    "e0011": ({"replace": [LOAD_LINE, REBUILT_VAL], "description": "train on val rebuilt from the stdlib"},
              "leak"),
    # The windows a public rule picked (the evaluator's before they were drawn from a secret):
    # that rule's lookup was the memorization probe's to catch; now it never scores a window it
    # stored, gains nothing, and is not kept.
    "e0012": ({"replace": [SAVE_LINE, LOOKUP], "description": "a lookup of 30% of the public rule's windows"},
              None),
}


def lookup_of_the_public_windows(data_root) -> str:
    """The first 30 % of the windows of the real val split that the evaluator's public rule
    picked (evenly spaced, 2**17 bytes), base64: what a researcher who read val.bin could paste
    into train.py (the one door the sandbox cannot shut)."""
    import torch
    sys.path.insert(0, str(PROJECT / "train"))
    import prepare
    val = prepare.load_split(prepare.prepare(None, data_root), "val")
    n = min(prepare.EVAL_BYTES, len(val)) // 65
    starts = torch.arange(n) * (len(val) - 65) // (n - 1)
    windows = val[starts[:, None] + torch.arange(65)]
    known = windows[: int(len(windows) * 0.3)].to(dtype=torch.uint8)
    return base64.b64encode(known.numpy().tobytes()).decode()


def test_every_way_to_bend_the_metric_is_flagged_and_never_kept(tmp_path):
    # Early stopping off: a vector that also trains less (the fixed seed's eight counted
    # steps) is a clear loser, and on a loaded machine its curve reached the first checkpoint
    # and was discarded there, before its seeds could show it ignores them. A discard is never
    # a keep, but this night is about the flags (the early stop has its own nights).
    repo = project_repo(tmp_path / "user", budget="3s", grace="60s", sandbox="local",
                        seeds="{baseline: 2, screen: 2, max: 2}", researcher="scripted",
                        early_stop="off")
    script = tmp_path / "proposals.json"
    windows = lookup_of_the_public_windows(tmp_path / "data")
    items = [item for item, _ in VECTORS.values()]
    items[-1] = {**items[-1], "replace": [SAVE_LINE, LOOKUP.replace("{windows}", windows)]}
    script.write_text(json.dumps(items))
    done = nightshift(repo, "run", "--tag", "bend", "--script", str(script),
                      "--max-experiments", str(len(VECTORS)), env=cli_env(tmp_path / "data"), timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    state = loop_state(repo, "bend")
    verdicts = {e.id: e.verdict.value for e in state.experiments.values()}
    for experiment_id, (item, expected) in VECTORS.items():
        if expected is not None:
            assert verdicts[experiment_id] == expected, (item["description"], state.experiments[experiment_id].decision)
    # skipping training is not a bent metric: the untrained model is simply measured, and loses
    assert verdicts["e0006"] == "discard"
    assert verdicts["e0008"] in ("keep", "discard", "inconclusive")   # the rule's call, not a flag
    assert not any(e.verdict.is_integrity for e in state.experiments.values() if e.id == "e0008")
    assert state.incumbent in (state.base_commit, state.experiments["e0008"].commit)

    # the evidence is on record: reported vs measured, the failed probe, the paired timings
    misreport = next(r for r in state.experiments["e0001"].runs if r.status.value == "misreported")
    assert misreport.reported == 0.5 and misreport.metrics["val_bpb"] > 1.0
    lookahead = next(r for r in state.experiments["e0002"].runs)
    assert any(p.name == "causality" and not p.ok for p in lookahead.probes)
    assert state.experiments["e0004"].decision.evidence["candidate_s"] > \
        state.experiments["e0004"].decision.evidence["incumbent_s"] + 3
    honest = [r for r in state.runs if r.ok]
    assert all(r.measured_by == "evaluator" and r.hidden == "tripwires" for r in honest)
    # the new doors, each shut with its evidence: the schema, the audit, the tripwire, the probe
    assert "expr_str" in next(r.reason for r in state.experiments["e0009"].runs if not r.ok)
    assert "rand_like" in next(r.reason for r in state.experiments["e0010"].runs if not r.ok)
    assert "held-out source" in next(r.reason for r in state.experiments["e0011"].runs if not r.ok)
    # The public windows are not what is scored: the lookup gains nothing and loses (its false
    # hits on shared prefixes cost bits). Its stored val bytes also score val better than train,
    # so the generalization-gap flag may call it a leak (0.29-0.30 closer against 0.25 allowed
    # on 4 of 4 runs of one night here; under CI's load sometimes less): both right, neither keeps.
    assert verdicts["e0012"] in ("discard", "inconclusive", "leak")
    assert state.incumbent != state.experiments["e0012"].commit
    tsv = (repo / "results" / "bend" / "results.tsv").read_text()
    for status in ("misreported", "lookahead", "leak", "over_budget", "ignores_seed", "bad_artifact"):
        assert f"\t{status}\t" in tsv


TWICE_LONGER = {"replace": [BUDGET_LINE, BUDGET_LINE + " * 2"],
                "description": "train twice the budget"}


@needs("docker")
def test_in_containers_at_15s_training_past_the_budget_rebuilt_val_and_code_in_a_size_are_flagged(tmp_path):
    """The same doors in the Docker sandbox (a host-mode image mounts the host's /usr and
    Python, so the standard-library sources are there to hide), at the quick start's budget.
    Twice the budget, since CI's cores are shared and the allowance grows with the spread it
    measures (25 % at 15 s is flagged on idle cores: tests/decide/test_integrity.py, and the
    figures of benchmarks/grader/integrity.py)."""
    from sandbox.docker import connect
    from sandbox.image import build_host_image

    from tests.night.test_loop_docker import IMAGE

    build_host_image(connect(timeout_s=3), IMAGE)
    repo = project_repo(tmp_path / "user", budget="15s", grace="60s", sandbox="docker", image=IMAGE,
                        seeds="{baseline: 3, screen: 1, max: 2, repeat: 0}", researcher="scripted",
                        early_stop="off")
    vectors = [(TWICE_LONGER, "over_budget"),
               (VECTORS["e0011"][0], "leak"), (VECTORS["e0009"][0], "bad_artifact")]
    script = tmp_path / "proposals.json"
    script.write_text(json.dumps([item for item, _ in vectors]))
    done = nightshift(repo, "run", "--tag", "dock", "--script", str(script),
                      "--max-experiments", str(len(vectors)), env=cli_env(tmp_path / "data"), timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    state = loop_state(repo, "dock")
    assert all(r.backend == "docker" for r in state.runs)
    for (item, expected), experiment in zip(vectors, sorted(state.experiments.values(), key=lambda e: e.id)):
        assert experiment.verdict.value == expected, (item["description"], experiment.decision)
    over = sorted(state.experiments.values(), key=lambda e: e.id)[0].decision.evidence
    assert over["candidate_s"] - over["incumbent_s"] > over["allowed_s"]
