"""agent/preflight/exposure.py: the files training can read that hold the evaluation split's bytes."""
from pathlib import Path

from agent.preflight.exposure import find_exposures

TEXT = "".join(f"line {i}: to be, or not to be, that is the question {i * 7919 % 1000}\n" for i in range(3000))


def nanogpt_like(root: Path) -> Path:
    """nanoGPT's shakespeare_char layout: input.txt, and the splits as uint16 token ids."""
    data = root / "data" / "shakespeare_char"
    data.mkdir(parents=True)
    (data / "input.txt").write_text(TEXT)
    cut = len(TEXT) * 9 // 10
    (data / "train.bin").write_bytes(bytes(2 * cut))
    (data / "val.bin").write_bytes(bytes(range(256)) * ((len(TEXT) - cut) * 2 // 256))
    return data


def test_a_binary_split_names_the_text_beside_it_as_its_likely_source(tmp_path):
    data = nanogpt_like(tmp_path)
    found = {(e.path.name, e.how) for e in find_exposures([data], tmp_path, hidden=set())}
    assert found == {("val.bin", "split"), ("input.txt", "likely source")}


def test_a_text_split_is_found_by_its_bytes_wherever_the_repository_holds_them(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    cut = len(TEXT) * 9 // 10
    (data / "train.txt").write_text(TEXT[:cut])
    (data / "valid.txt").write_text(TEXT[cut:])
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "corpus_dump.txt").write_text(TEXT)            # the whole text, elsewhere
    (tmp_path / "unrelated.txt").write_text(TEXT[:cut])                  # the training part only
    found = {(e.path.name, e.how) for e in find_exposures([data], tmp_path, hidden=set())}
    assert found == {("valid.txt", "split"), ("corpus_dump.txt", "copy")}


def test_hidden_splits_and_a_clean_folder_expose_nothing(tmp_path):
    data = tmp_path / "prepared"
    data.mkdir()
    (data / "train.bin").write_bytes(b"t" * 1000)
    (data / "val.bin").write_bytes(b"v" * 1000)
    assert find_exposures([data], tmp_path, hidden={data / "val.bin"}) == []
