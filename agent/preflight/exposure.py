"""`nightshift check`: which files the training step can read that hold the evaluation split's
bytes. Hiding val.bin hides nothing while the text it was cut from lies beside it.

For the bundled data the split files and their sources are declared (meta.json's `splits` and
`held_out_sources`) and hidden in every run. For data of your own, the check looks where a run
can look: the prepared data folder and program.md's `data:` folder. A file named like a
held-out split (val, valid, validation, test, eval, dev, heldout) that no declaration hides is
readable by training; and a file anywhere in those folders or in your repository that contains
samples of such a split's bytes holds the split by another path (nanoGPT's input.txt beside
val.bin, a raw dump beside its tokenized shards). A binary split (token ids) cannot be
searched for as text; a large text file beside it is then named as its likely source.
"""
from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from pathlib import Path

HELD_OUT_NAME = re.compile(r"(^|[_.\-])(val|valid|validation|test|eval|dev|heldout|held_out)([_.\-]|\d|$)", re.I)
SAMPLES = 8               # stretches of a text split searched for elsewhere
SAMPLE_BYTES = 48         # long enough that a match is the same text, not a common line
FOUND_AT = 3              # samples found: the file holds the split's bytes
MAX_SEARCHED = 512 << 20  # larger files are not read
SKIPPED = {".git", "results", "__pycache__", ".venv", "venv", "node_modules"}


@dataclass(frozen=True)
class Exposure:
    """A file training can read that holds (or likely holds) held-out bytes."""

    path: Path
    split: Path            # the split file whose bytes it holds (itself, when it is the split)
    how: str               # "split" | "copy" | "likely source"

    def says(self, root: Path) -> str:
        name, split = _short(self.path, root), _short(self.split, root)
        if self.how == "split":
            return f"{name} (named a held-out split, not hidden from training)"
        if self.how == "copy":
            return f"{name} (holds the bytes of {split})"
        return f"{name} (text beside {split}, which is not text: likely the source it was cut from)"


def find_exposures(folders: list[Path], repo: Path, hidden: set[Path]) -> list[Exposure]:
    """The exposures in `folders` (the data a run sees) and `repo`, `hidden` being the files
    the runs hide already."""
    hidden = {p.resolve() for p in hidden}
    splits = [p for folder in folders for p in _files(folder)
              if HELD_OUT_NAME.search(p.stem) and p.resolve() not in hidden and p.stat().st_size > 0]
    found = [Exposure(split, split, "split") for split in splits]
    candidates = [p for p in {q.resolve() for folder in [*folders, repo] for q in _files(folder)}
                  if p not in hidden and p not in {s.resolve() for s in splits}]
    for split in splits:
        samples = _text_samples(split)
        if samples:
            found += [Exposure(path, split, "copy") for path in candidates if _holds(path, samples)]
        else:
            found += [Exposure(path, split, "likely source") for path in split.parent.iterdir()
                      if path.is_file() and path.resolve() in candidates and _is_text(path)
                      and path.stat().st_size >= split.stat().st_size]
    return found


def _files(folder: Path):
    if not folder.is_dir():
        return
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and not SKIPPED.intersection(path.relative_to(folder).parts[:-1]):
            yield path


def _text_samples(split: Path) -> list[bytes]:
    """Evenly spaced stretches of a text split; [] for a binary one."""
    size = split.stat().st_size
    if size < SAMPLES * SAMPLE_BYTES or not _is_text(split):
        return []
    with split.open("rb") as fh:
        samples = []
        for i in range(SAMPLES):
            fh.seek(i * (size - SAMPLE_BYTES) // (SAMPLES - 1))
            samples.append(fh.read(SAMPLE_BYTES))
    return samples


def _holds(path: Path, samples: list[bytes]) -> bool:
    size = path.stat().st_size
    if size < SAMPLE_BYTES or size > MAX_SEARCHED:
        return False
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return sum(data.find(sample) >= 0 for sample in samples) >= FOUND_AT


def _is_text(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(4096)
    if not head or b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start > len(head) - 4   # a character cut at the end of the sample
    return True


def _short(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
