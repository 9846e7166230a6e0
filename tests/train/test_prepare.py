"""train/prepare.py: the corpus split and the data folder (the evaluation: test_evaluate.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "train"))   # train.py imports it the same way: `from prepare import ...`
import prepare  # noqa: E402


def make_corpus(root: Path, n_files: int = 80) -> Path:
    """A folder of small Python-like files, enough for every split to get some."""
    for i in range(n_files):
        path = root / f"pkg{i % 4}" / f"mod_{i:03d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"def f_{i}_{j}(x):\n    return x * {j} + {i}\n\n" for j in range(40)))
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("hidden files are not corpus\n")
    return root


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "train" / "prepare.py"), *args],
                          capture_output=True, text=True, check=True)


def test_split_is_a_deterministic_function_of_the_relative_path():
    rels = [f"a/b_{i}.py" for i in range(2000)]
    first = [prepare.split_of(r) for r in rels]
    assert first == [prepare.split_of(r) for r in reversed(rels)][::-1]
    shares = {s: first.count(s) / len(first) for s in prepare.SPLITS}
    assert 0.86 < shares["train"] < 0.94 and 0.03 < shares["val"] < 0.07 and 0.03 < shares["test"] < 0.07


def test_default_corpus_is_the_stdlib_without_tests_or_site_packages():
    root, rels = prepare.list_corpus(None)
    assert rels == sorted(rels) and "os.py" in rels and "json/decoder.py" in rels
    banned = {"test", "tests", "idle_test", "site-packages"}
    assert not [r for r in rels if banned.intersection(r.split("/")[:-1])]
    assert not any(r.startswith(("test/", "idlelib/idle_test/", "lib2to3/tests/")) for r in rels)


def test_the_default_corpus_holds_out_only_units_no_training_process_opens():
    """Val and test of the stdlib corpus come from HELD_OUT_UNITS alone (a third each), so the
    harness can hide their sources whole; every other file trains."""
    _, rels = prepare.list_corpus(None)
    splits = {rel: prepare.stdlib_split_of(rel) for rel in rels}
    held = [rel for rel, split in splits.items() if split != "train"]
    assert held and all(prepare.held_out_unit(rel) for rel in held)
    assert {prepare.held_out_unit(rel) for rel in held} <= set(prepare.HELD_OUT_UNITS)
    assert "val" in splits.values() and "test" in splits.values()
    assert splits["os.py"] == splits["json/decoder.py"] == "train"


def test_the_stdlib_modules_training_imports_are_never_held_out(tmp_path):
    """Measured, not assumed: a real python importing what train.py and evaluate.py import
    (torch, numpy, torch.export) opens none of the held-out units."""
    probe = ("import sys, torch, numpy, torch.export, torch.nn.functional, json, math, random; "
             "print('\\n'.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    tops = {name.split(".")[0] for name in loaded}
    units = {unit.removesuffix(".py") for unit in prepare.HELD_OUT_UNITS}
    assert not tops & units, tops & units


def test_meta_says_where_else_the_held_out_bytes_lie(tmp_path):
    corpus = make_corpus(tmp_path / "corpus")
    data_dir = prepare.prepare(corpus, tmp_path / "data")
    sources = json.loads((data_dir / "meta.json").read_text())["held_out_sources"]
    rels = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*.py"))
    expected = [str((corpus / r).resolve()) for r in rels if prepare.split_of(r) == "val"] + \
        [str((corpus / r).resolve()) for r in rels if prepare.split_of(r) == "test"]
    assert sources == {"units": [], "paths": expected, "siblings": True}


def test_an_exact_copy_of_a_held_out_file_is_found_by_its_bytes(tmp_path):
    held = tmp_path / "stdlib" / "mailbox.py"
    held.parent.mkdir()
    held.write_bytes(b"x = 1\n" * 400)
    vendored = tmp_path / "site" / "pkg" / "_vendor" / "mb.py"
    vendored.parent.mkdir(parents=True)
    vendored.write_bytes(held.read_bytes())
    (tmp_path / "site" / "other.py").write_bytes(b"y = 2\n" * 400)   # same size, other bytes
    assert prepare.exact_copies([held], [tmp_path / "site"]) == [str(vendored.resolve())]


def test_cli_builds_the_folder_and_prints_data_dir_last(tmp_path):
    corpus = make_corpus(tmp_path / "corpus")
    out = run_cli("--corpus", str(corpus), "--data-root", str(tmp_path / "data"))
    data_dir = Path(out.stdout.strip().splitlines()[-1].removeprefix("data_dir: "))
    assert data_dir.is_absolute() and data_dir.parent == tmp_path / "data"
    meta = json.loads((data_dir / "meta.json").read_text())
    assert data_dir.name == meta["corpus_hash"][:16]
    assert sum(meta["files"].values()) == 80                    # .git/HEAD left out
    assert meta["splits"] == {s: f"{s}.bin" for s in prepare.SPLITS}   # what the harness hides
    total = sum((corpus / p).stat().st_size for p in corpus.rglob("*.py"))
    assert sum(meta["bytes"].values()) == total
    for split in prepare.SPLITS:
        assert (data_dir / f"{split}.bin").stat().st_size == meta["bytes"][split]
    assert len(prepare.load_split(data_dir, "val")) == meta["bytes"]["val"] > 0


def test_split_contents_are_whole_files_in_sorted_order(tmp_path):
    corpus = make_corpus(tmp_path / "corpus")
    data_dir = prepare.prepare(corpus, tmp_path / "data")
    rels = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*.py"))
    for split in prepare.SPLITS:
        expected = b"".join((corpus / r).read_bytes() for r in rels if prepare.split_of(r) == split)
        assert (data_dir / f"{split}.bin").read_bytes() == expected


def test_prepare_is_idempotent_and_the_hash_follows_the_content(tmp_path):
    corpus = make_corpus(tmp_path / "corpus")
    first = prepare.prepare(corpus, tmp_path / "data")
    stamp = (first / "train.bin").stat().st_mtime_ns
    assert prepare.prepare(corpus, tmp_path / "data") == first
    assert (first / "train.bin").stat().st_mtime_ns == stamp     # untouched, not rewritten
    (corpus / "pkg0" / "mod_000.py").write_text("changed = True\n")
    assert prepare.prepare(corpus, tmp_path / "data") != first


def test_no_half_folder_is_left_behind(tmp_path, monkeypatch):
    corpus = make_corpus(tmp_path / "corpus")
    data_root = tmp_path / "data"

    def crash(self, target):
        raise OSError("disk vanished")
    monkeypatch.setattr(Path, "rename", crash)
    with pytest.raises(OSError, match="disk vanished"):
        prepare.prepare(corpus, data_root)
    assert list(data_root.iterdir()) == []                      # neither the final nor the temp folder
    monkeypatch.undo()
    data_dir = prepare.prepare(corpus, data_root)
    assert [p.name for p in data_root.iterdir()] == [data_dir.name]


def test_an_incomplete_folder_is_rebuilt(tmp_path):
    corpus = make_corpus(tmp_path / "corpus")
    data_dir = prepare.prepare(corpus, tmp_path / "data")
    (data_dir / "val.bin").write_bytes(b"truncated")
    assert prepare.prepare(corpus, tmp_path / "data") == data_dir
    assert prepare.is_complete(data_dir)


def test_a_single_file_corpus_is_split_by_byte_ranges(tmp_path):
    text = tmp_path / "book.txt"
    text.write_bytes(bytes(range(256)) * 40)
    data_dir = prepare.prepare(text, tmp_path / "data")
    parts = [(data_dir / f"{s}.bin").read_bytes() for s in prepare.SPLITS]
    assert b"".join(parts) == text.read_bytes() and all(parts)


def test_too_small_a_folder_is_an_error_that_says_why(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "only.py").write_text("x = 1\n")
    (tmp_path / "c" / "other.py").write_text("y = 2\n")
    with pytest.raises(ValueError, match="more files"):
        prepare.prepare(tmp_path / "c", tmp_path / "data")


def test_a_missing_split_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="prepare.py"):
        prepare.load_split(tmp_path, "val")
