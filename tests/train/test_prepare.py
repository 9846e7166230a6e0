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
