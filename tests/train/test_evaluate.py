"""train/evaluate.py: the harness's evaluator, on real exported models. It must score honest
models exactly, and refuse or flag every way a model could bend its own score."""
from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "train"))
import evaluate  # noqa: E402
import guard  # noqa: E402
import prepare  # noqa: E402
import schema  # noqa: E402
from tests.train.test_prepare import make_corpus  # noqa: E402

T = 32


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("evaluate")
    return prepare.prepare(make_corpus(root / "corpus"), root / "data")


class Causal(torch.nn.Module):
    """A real (tiny) causal language model: each position sees itself and the past."""

    def __init__(self, batch: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.head, self.batch = torch.nn.Embedding(256, 16), torch.nn.Linear(16, 256), batch

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=1) / torch.arange(1, x.shape[1] + 1)[None, :, None]   # the past only

    def forward(self, idx):
        if self.batch is not None:
            idx = idx.view(self.batch, T)   # written for one batch size
        return self.head(self.mix(self.emb(idx)))


class Bidirectional(Causal):
    def mix(self, x):
        return x + x.mean(dim=1, keepdim=True)   # every position sees the whole window


class NextByte(Causal):
    def mix(self, x):
        return x + torch.cat([x[:, 1:], x[:, :1]], dim=1)    # a subtler leak: the next byte's embedding


class Attention(Causal):
    """Attention through torch's own kernel, causal or (the bidirectional edit) not."""

    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def mix(self, x):
        return torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=self.causal)


class Uniform(torch.nn.Module):
    def __init__(self, vocab: int = 256) -> None:
        super().__init__()
        self.vocab = vocab
        self.zero = torch.nn.Parameter(torch.zeros(()))

    def forward(self, idx):
        return torch.zeros(*idx.shape, self.vocab) + self.zero


class Noisy(Causal):
    def forward(self, idx):
        return super().forward(idx) + torch.randn(*idx.shape, 256)


DRAW = evaluate.Draw(secret=b"the night's secret")   # the harness's: drawn once per tag


def scored_windows(data: torch.Tensor, draw: evaluate.Draw = DRAW) -> torch.Tensor:
    """The windows the evaluator scores under `draw` (what a model that knew the secret could store)."""
    return evaluate.windows(data, T, evaluate.EVAL_BYTES, draw.generator("val"))


def evaluated(model, tmp_path: Path, data_dir: Path, draw: evaluate.Draw = DRAW) -> dict:
    out = tmp_path / "train_out"
    evaluate.save_model(model, T, out)
    return evaluate.evaluate(out / evaluate.ARTIFACT, data_dir, "val", seed=7, draw=draw)


def test_an_honest_model_passes_every_probe_and_is_scored_like_eager(tmp_path, data_dir):
    model = Causal()
    result = evaluated(model, tmp_path, data_dir)
    assert all(probe["ok"] for probe in result["probes"].values()), result["probes"]
    assert set(result["probes"]) == {"artifact", "shape", "causality", "memorization"}
    windows = scored_windows(prepare.load_split(data_dir, "val"))
    with torch.no_grad():
        logits = model(windows[:, :-1])
    eager = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), windows[:, 1:].reshape(-1)) / math.log(2)
    assert result["val_bpb"] == pytest.approx(float(eager), rel=1e-5)
    assert result["generalization_gap"] == pytest.approx(result["val_bpb"] - result["train_bpb"])
    assert len(result["fingerprint"]) == min(evaluate.FINGERPRINT_WINDOWS, result["windows"])
    assert result["windows_drawn"] == "from the night's secret"
    assert not {key for key in result if "secret" in key or "start" in key}   # nothing of the draw written


def test_a_uniform_model_scores_exactly_8_bits_per_byte(tmp_path, data_dir):
    assert evaluated(Uniform(), tmp_path, data_dir)["val_bpb"] == pytest.approx(8.0, abs=1e-6)


def test_a_model_made_for_one_batch_size_is_scored_the_same(tmp_path, data_dir):
    free = evaluated(Causal(), tmp_path / "free", data_dir)
    fixed = evaluated(Causal(batch=2), tmp_path / "fixed", data_dir)   # exported with a static batch
    assert fixed["val_bpb"] == pytest.approx(free["val_bpb"], rel=1e-6)


def test_one_window_lies_in_each_stratum_of_the_split_at_a_secret_offset(data_dir):
    """Stratified: n = budget // (T + 1) windows, the i-th inside the i-th of n equal strata,
    never overlapping, so the whole split stays covered; where inside, the draw says."""
    val = prepare.load_split(data_dir, "val")
    starts = evaluate.window_starts(len(val), 99, 1000, DRAW.generator("val"))
    edges = torch.arange(11) * len(val) // 10
    assert len(starts) == 10 and bool(((starts >= edges[:-1]) & (starts + 100 <= edges[1:])).all())
    assert torch.equal(evaluate.windows(val, 99, 1000, DRAW.generator("val"))[0], val[starts[0]:starts[0] + 100].long())
    same = evaluate.window_starts(len(val), 99, 1000, DRAW.generator("val"))
    other_secret = evaluate.window_starts(len(val), 99, 1000, evaluate.Draw(b"another").generator("val"))
    other_purpose = evaluate.window_starts(len(val), 99, 1000, DRAW.generator("train"))
    assert torch.equal(same, starts)                                # every run of the night: the same windows
    assert not torch.equal(other_secret, starts) and not torch.equal(other_purpose, starts)
    tiled = evaluate.window_starts(330, 32, 1000, DRAW.generator("val"))   # a split under the budget: every byte
    assert torch.equal(tiled, torch.arange(10) * 33)


def test_without_a_secret_the_windows_are_drawn_fresh():
    """By hand (no NIGHTSHIFT_EVAL_SECRET) each evaluation draws its own."""
    first, second = evaluate.Draw.from_environment({}), evaluate.Draw.from_environment({})
    assert not first.given and first.secret != second.secret
    given = [evaluate.Draw.from_environment({"NIGHTSHIFT_EVAL_SECRET": "ab" * 32, "NIGHTSHIFT_SEED": seed})
             for seed in ("5", "6")]
    assert given[0] == given[1] == evaluate.Draw(bytes.fromhex("ab" * 32))   # whatever the run's seed


def test_causal_attention_passes_the_audit_and_the_probe(tmp_path, data_dir):
    result = evaluated(Attention(causal=True), tmp_path, data_dir)
    assert all(probe["ok"] for probe in result["probes"].values()), result["probes"]


@pytest.mark.parametrize("model", [Bidirectional(), NextByte(), Attention(causal=False)],
                         ids=["bidirectional", "next-byte", "attention-not-causal"])
def test_a_model_that_sees_ahead_fails_the_causality_probe_and_gets_no_score(tmp_path, data_dir, model):
    result = evaluated(model, tmp_path, data_dir)
    assert result["probes"]["causality"]["ok"] is False
    assert "sees bytes it predicts" in result["probes"]["causality"]["detail"]
    assert "val_bpb" not in result


def test_wrong_output_shape_is_a_bad_artifact(tmp_path, data_dir):
    result = evaluated(Uniform(vocab=128), tmp_path, data_dir)
    assert result["probes"]["shape"]["ok"] is False
    assert "expected logits of shape (B, T, 256)" in result["probes"]["shape"]["detail"]


def test_randomness_at_evaluation_is_refused(tmp_path, data_dir):
    result = evaluated(Noisy(), tmp_path, data_dir)
    assert result["probes"]["artifact"]["ok"] is False
    assert "operator aten.randn.default is not on the evaluator's list" in result["probes"]["artifact"]["detail"]


def test_a_missing_artifact_names_save_model(tmp_path, data_dir):
    result = evaluate.evaluate(tmp_path / "model.pt2", data_dir, "val", seed=0)
    assert result["probes"] == {"artifact": {"ok": False, "detail": pytest.approx(result["probes"]["artifact"]["detail"])}}
    assert "save_model" in result["probes"]["artifact"]["detail"] and "val_bpb" not in result


def test_an_artifact_carrying_a_pickle_is_refused_before_it_runs(tmp_path, data_dir):
    """The export format can hold pickled constants, and unpickling runs code: a crafted
    archive whose constant is a pickle that would write a file must be refused, and the file
    never written."""
    out = tmp_path / "train_out"
    evaluate.save_model(Causal(), T, out)
    marker = tmp_path / "pwned"
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."   # pickle: os.system(...)
    with zipfile.ZipFile(out / evaluate.ARTIFACT) as src:
        entries = {item.filename: src.read(item.filename) for item in src.infolist()}
    config_name = next(name for name in entries if name.endswith("model_weights_config.json"))
    config = json.loads(entries[config_name])
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True
    entries[config_name] = json.dumps(config).encode()
    weight = next(name for name in entries if name.endswith(f"weights/{first['path_name']}"))
    entries[weight] = payload
    with zipfile.ZipFile(tmp_path / "final.pt2", "w") as dst:
        for name, data in entries.items():
            dst.writestr(name, data)
    result = evaluate.evaluate(tmp_path / "final.pt2", data_dir, "val", seed=0)
    assert result["probes"]["artifact"]["ok"] is False, result
    assert "pickled" in result["probes"]["artifact"]["detail"]
    assert not marker.exists()
    # the evaluator reads weights as raw bytes and calls no unpickler; were one reached, the
    # guard refuses it where the pickle names a function, before it runs
    with pytest.raises(schema.Rejected, match="pickle.find_class"), guard.Guard(readable=[tmp_path]):
        with pytest.raises(guard.Refused):
            pickle.loads(payload)
    assert not marker.exists()


def test_the_evaluation_step_by_hand_writes_result_json(tmp_path, data_dir):
    evaluate.save_model(Causal(), T, tmp_path / "train_out")
    env = {**os.environ, "NIGHTSHIFT_OUT": str(tmp_path / "eval"), "NIGHTSHIFT_DATA": str(data_dir),
           "NIGHTSHIFT_TRAIN_OUT": str(tmp_path / "train_out"), "NIGHTSHIFT_SPLIT": "val"}
    done = subprocess.run([sys.executable, str(REPO / "train" / "evaluate.py")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "eval" / "result.json").read_text())
    assert result["val_bpb"] > 0 and "probe causality: ok" in done.stdout
    assert "---" in done.stdout and "val_bpb:" in done.stdout


class Memorizer(Causal):
    """The attack on a fixed evaluation set: a lookup of the evaluation windows' answers, keyed
    by each window's first KEY bytes, around an honest model. Causal (a position's answer
    depends on the key, which lies before it), deterministic, and made of listed operators
    alone: the key one-hot (an embedding of the identity), compared with every stored key by a
    matmul (how many bytes are equal), the best row's answers picked by topk and an embedding,
    laid over the honest logits where all KEY bytes matched."""

    KEY = 8

    def __init__(self, windows: torch.Tensor, share: float = 1.0) -> None:
        super().__init__()
        known = windows[: max(1, int(len(windows) * share))]
        self.register_buffer("eye", torch.eye(256))
        self.register_buffer("keys", torch.nn.functional.one_hot(known[:, : self.KEY], 256).float()
                             .flatten(1).transpose(0, 1).contiguous())          # (KEY * 256, n)
        self.register_buffer("answers", known[:, 1:].float())                  # position t's next byte
        self.register_buffer("after_key", (torch.arange(known.shape[1] - 1) >= self.KEY - 1).float())

    def forward(self, idx):
        logits = super().forward(idx)
        key = torch.nn.functional.embedding(idx[:, : self.KEY], self.eye).flatten(1)    # (B, KEY * 256)
        equal, row = (key @ self.keys).topk(1, dim=-1)                                 # (B, 1) each
        hit = (equal - (self.KEY - 1)).clamp(0, 1)                                     # 1 where all KEY bytes match
        answers = torch.nn.functional.embedding(row[:, 0], self.answers).to(torch.long)
        known = torch.nn.functional.embedding(answers, self.eye) * 30.0
        return logits + known * hit[:, :, None] * self.after_key[None, :, None]


@pytest.fixture(scope="module")
def real_text(tmp_path_factory) -> Path:
    """Data from real Python source (the synthetic corpus repeats one line shape, so a lookup
    keyed by 8 bytes would fit all of it): 120 files of the standard library."""
    import sysconfig
    root = tmp_path_factory.mktemp("real")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for source in sorted((stdlib / "email").rglob("*.py"))[:60] + sorted((stdlib / "json").glob("*.py")) \
            + sorted(stdlib.glob("[a-c]*.py"))[:55]:
        target = root / "corpus" / source.relative_to(stdlib)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    return prepare.prepare(root / "corpus", root / "data")


@pytest.mark.parametrize("share", [1.0, 0.3])
def test_a_model_fitted_to_the_scored_windows_fails_the_memorization_probe(tmp_path, real_text, share):
    """Were the secret known: every scored window memorized, or 30 % of them, scores far
    better than the same text cut elsewhere. Flagged with no incumbent to compare with."""
    val = scored_windows(prepare.load_split(real_text, "val"))
    result = evaluated(Memorizer(val, share), tmp_path, real_text)
    assert result["probes"]["causality"]["ok"], result["probes"]   # a lookup keyed by the past is causal
    assert result["probes"]["memorization"]["ok"] is False, result["probes"]["memorization"]
    assert "knows the scored windows" in result["probes"]["memorization"]["detail"]
    assert "val_bpb" not in result


def public_starts(length: int, context_len: int, budget: int, rng=None) -> torch.Tensor:
    """The rule the evaluator used before its windows were drawn from a secret: evenly spaced,
    first at the start, last at the end. Anyone could compute it, and a model could store it."""
    span = context_len + 1
    n = min(budget, length) // span
    return torch.arange(n) * (length - span) // max(n - 1, 1)


def keyed_once(windows: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
    """Which windows' first Memorizer.KEY bytes occur once in `text` (a mask): a careful lookup's,
    which fires where it was fitted and nowhere else (an attacker holds the text, and picks)."""
    key = Memorizer.KEY
    data = bytes(text.to(torch.uint8).tolist())
    seen: dict[bytes, int] = {}
    for i in range(len(data) - key + 1):
        seen[data[i:i + key]] = seen.get(data[i:i + key], 0) + 1
    return torch.tensor([seen.get(bytes(w[:key].tolist()), 0) == 1 for w in windows.to(torch.uint8)])


def test_a_lookup_of_the_public_training_sample_set_the_gap_and_now_gains_nothing(tmp_path, real_text, monkeypatch):
    """The red team's lever on the leak check: the generalization gap's training sample was
    `windows(train, T, TRAIN_SAMPLE_BYTES)` by a public rule, so a lookup of those windows set
    train_bpb, and with it the gap, where the model liked (wider here; dosed, it hid a
    memorizer of the evaluation text behind an honest-looking gap). Under the public rule it
    moves the gap by more than a bit per byte and no probe sees it; drawn from the secret, the
    sample is elsewhere in the 900 kB split and the lookup gains nothing."""
    train = prepare.load_split(real_text, "train")
    public_sample = evaluate._cut(train, public_starts(len(train), T, evaluate.TRAIN_SAMPLE_BYTES), T + 1)
    attack, honest = Memorizer(public_sample[keyed_once(public_sample, train)]), Causal()
    with monkeypatch.context() as old_rule:
        old_rule.setattr(evaluate, "window_starts", public_starts)
        before = {name: evaluated(model, tmp_path / f"old-{name}", real_text)
                  for name, model in (("attack", attack), ("honest", honest))}
    assert all(p["ok"] for p in before["attack"]["probes"].values()), before["attack"]["probes"]
    assert before["attack"]["generalization_gap"] - before["honest"]["generalization_gap"] > 1.0
    after = {name: evaluated(model, tmp_path / f"new-{name}", real_text)
             for name, model in (("attack", attack), ("honest", honest))}
    assert after["attack"]["generalization_gap"] == pytest.approx(after["honest"]["generalization_gap"], abs=0.01)


def test_a_lookup_of_the_public_evaluation_windows_gains_nothing(tmp_path, real_text, monkeypatch):
    """A lookup of every window the public rule picked: under that rule the memorization probe
    was the only line (it flags this one); drawn from the secret, the scored windows lie
    elsewhere in their strata (a split 6.5 times the budget, as the default data's val is 7
    times). The lookup gains only on a window the draw happened to start where a stored one
    does (about one in 180 here, one in 400 on the default data), and nowhere else."""
    monkeypatch.setattr(evaluate, "EVAL_BYTES", 8192)
    val = prepare.load_split(real_text, "val")
    stored = public_starts(len(val), T, 8192)
    windows = evaluate._cut(val, stored, T + 1)
    once = keyed_once(windows, val)
    attack = Memorizer(windows[once])
    result, honest = evaluated(attack, tmp_path / "attack", real_text), evaluated(Causal(), tmp_path / "honest", real_text)
    assert all(p["ok"] for p in result["probes"].values()), result["probes"]
    scored = evaluate.window_starts(len(val), T, 8192, DRAW.generator("val"))
    landed = len(set(scored.tolist()) & set(stored[once].tolist()))
    assert landed < 0.02 * len(scored)
    assert honest["val_bpb"] - result["val_bpb"] <= 8.0 * landed / len(scored) + 0.005
def test_a_model_exported_for_at_most_two_windows_is_scored_two_at_a_time(tmp_path, data_dir):
    """The batch is free but bounded by the export (range_constraints): the scorer keeps to
    the bound, and the score is the same as at any batch size."""
    batch = torch.export.Dim("batch", min=1, max=2)
    with torch.no_grad():
        program = torch.export.export(Causal().eval(), (torch.zeros(2, T, dtype=torch.long),),
                                      dynamic_shapes=({0: batch},))
    out = tmp_path / "train_out"
    out.mkdir()
    torch.export.save(program, out / evaluate.ARTIFACT)
    result = evaluate.evaluate(out / evaluate.ARTIFACT, data_dir, "val", seed=7, draw=DRAW)
    assert all(p["ok"] for p in result["probes"].values()), result["probes"]
    assert evaluate.load_model(out / evaluate.ARTIFACT).max_batch == 2
    assert result["val_bpb"] == pytest.approx(evaluated(Causal(), tmp_path / "free", data_dir)["val_bpb"], abs=1e-6)


def test_a_model_that_fails_once_its_shape_passed_fails_scoring_and_keeps_its_passed_probes(
        tmp_path, data_dir, monkeypatch):
    """A call that fails after the shape check (here the third) is `scoring`; `shape` stays passed."""
    calls, real = [], evaluate.Scorer.logits

    def failing(self, x):
        calls.append(len(x))
        if len(calls) > 2:
            raise schema.Rejected("calling the model failed: RuntimeError: out of memory")
        return real(self, x)
    monkeypatch.setattr(evaluate.Scorer, "logits", failing)
    result = evaluated(Causal(), tmp_path, data_dir)
    assert result["probes"]["shape"]["ok"] is True
    assert result["probes"]["scoring"]["ok"] is False
    assert "calling the model failed" in result["probes"]["scoring"]["detail"]


def test_an_honest_model_on_real_text_passes_the_memorization_probe(tmp_path, real_text):
    result = evaluated(Causal(), tmp_path, real_text)
    assert result["probes"]["memorization"]["ok"], result["probes"]["memorization"]
