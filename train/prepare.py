"""Data for Nightshift's default target. Protected: the harness digests this file before and
after every run, so the researcher cannot move the goalposts.

    python train/prepare.py [--corpus PATH] [--data-root DIR]

Builds `<data-root>/<corpus-hash[:16]>/{train,val,test}.bin` (raw uint8 bytes) and
`meta.json`; the last line printed is `data_dir: <absolute path>`. Files are split whole, by
a hash of their relative path, so the split never depends on which other files exist or on
their order. Running it again with the same corpus does nothing.

The default corpus is the running interpreter's standard library sources (`*.py`, tests and
site-packages excluded, ~12 MB). Those files are on every machine, readable by any process,
so a held-out byte must come from a file the training step has no reason to open, and which
the harness can hide from it like the split files: val and test are cut only from
HELD_OUT_UNITS, packages and modules that neither torch, numpy nor train.py import (measured:
docs/integrity.md), a third each (the last third goes to train); every other file is train.
Another corpus (`--corpus`) splits ~90/5/5 over all its files.

meta.json's `splits` names each split's file: the harness hides `val.bin` and `test.bin` from
the training step (a read is seen, and fails the run as a leak), shows the evaluation step
the split it scores. Its `held_out_sources` says where else those bytes lie (the held-out
units of every Python installation, a corpus's val and test files, exact copies found at
preparation), and the harness hides those too. train.py imports `load_split`; the fixed
evaluation windows and the scoring live in evaluate.py.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import torch

FORMAT = 3                                       # bump when the layout or split rule changes
SPLITS = ("train", "val", "test")
EXCLUDED_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}
# Where the default corpus's held-out splits come from: standard-library packages and modules
# that no training process opens (GUI, IDE, mail and RPC protocols; ~14 % of the corpus),
# chosen by what `python -X importtime`-style tracing of train.py, evaluate.py and
# torch.compile opened, and by what torch, numpy, sympy and fsspec import (ftplib, wave and
# curses are imported there, so they stay train). Hidden whole from every run.
HELD_OUT_UNITS = ("idlelib", "tkinter", "turtledemo", "turtle.py", "xmlrpc", "wsgiref",
                  "mailbox.py", "imaplib.py", "smtplib.py", "poplib.py")
# Scoring 2**17 bytes (evaluate.py) costs ~0.3 GFLOP per 1k params of model, about a second for
# the default model on 2 CPU cores; the standard error of the mean per-byte loss over that many
# bytes is ~0.01 bpb, and since every run scores the SAME bytes, comparisons see even less.
EVAL_BYTES = 2**17


def default_data_root() -> Path:
    return Path(os.environ.get("NIGHTSHIFT_DATA_ROOT") or Path.home() / ".cache/nightshift/data")


def list_corpus(corpus: Path | None) -> tuple[Path, list[str]]:
    """(root, relative paths in sorted order). None means the stdlib sources, tests excluded."""
    if corpus is None:
        root = Path(sysconfig.get_paths()["stdlib"])
        paths = [p for p in root.rglob("*.py")
                 if not EXCLUDED_DIRS.intersection(p.relative_to(root).parts[:-1])]
    elif corpus.is_file():
        return corpus.parent, [corpus.name]
    elif corpus.is_dir():
        root = corpus
        paths = [p for p in root.rglob("*") if p.is_file()
                 and not any(part.startswith(".") for part in p.relative_to(root).parts)]
    else:
        raise FileNotFoundError(f"--corpus {corpus}: no such file or folder")
    rels = sorted(p.relative_to(root).as_posix() for p in paths)
    if not rels:
        raise ValueError(f"corpus {root} holds no files; pass --corpus with a folder of text files")
    return root, rels


def split_of(rel: str) -> str:
    """~90/5/5 by a hash of the relative path: stable as the corpus grows or shrinks."""
    bucket = _bucket(rel, 100)
    return "train" if bucket < 90 else "val" if bucket < 95 else "test"


def stdlib_split_of(rel: str) -> str:
    """The default corpus: a held-out unit's files a third each to val, test and train by the
    same hash; every other file to train."""
    if held_out_unit(rel) is None:
        return "train"
    return ("val", "test", "train")[_bucket(rel, 3)]


def held_out_unit(rel: str) -> str | None:
    """The unit of HELD_OUT_UNITS that `rel` (a stdlib-relative path) belongs to, if any."""
    top = rel.split("/", 1)[0]
    return top if top in HELD_OUT_UNITS else None


def _bucket(rel: str, buckets: int) -> int:
    return int.from_bytes(hashlib.sha256(rel.encode()).digest()[:8], "big") % buckets


COPY_MIN_BYTES = 1024   # smaller files are boilerplate (a package's one-line __init__.py)


def exact_copies(sources: list[Path], roots: list[Path]) -> list[str]:
    """Files under `roots` with the same bytes as one of `sources`, by size first: a vendored
    copy of a held-out module is the same bytes by another path."""
    wanted: dict[int, set[str]] = {}
    for source in sources:
        data = source.read_bytes()
        if len(data) >= COPY_MIN_BYTES:
            wanted.setdefault(len(data), set()).add(hashlib.sha256(data).hexdigest())
    own = {str(s.resolve()) for s in sources}
    found: set[str] = set()
    for root in roots:
        for folder, _dirs, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    size = os.path.getsize(path)
                except OSError:
                    continue
                if size in wanted and os.path.realpath(path) not in own:
                    with open(path, "rb") as fh:
                        if hashlib.sha256(fh.read()).hexdigest() in wanted[size]:
                            found.add(os.path.realpath(path))
    return sorted(found)


def python_lib_roots() -> list[Path]:
    """Where Python installations keep their libraries on this machine (standard libraries
    and site-packages), for the copies scan."""
    found = {Path(p).resolve() for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                         sysconfig.get_paths()["platlib"])}
    for base in ("/usr/lib", "/usr/local/lib", sys.base_prefix + "/lib", sys.prefix + "/lib"):
        found.update(p.resolve() for p in Path(base).glob("python3*") if p.is_dir())
    return sorted(found)


def is_complete(folder: Path) -> bool:
    try:
        meta = json.loads((folder / "meta.json").read_text())
        return meta.get("format") == FORMAT and all(
            (folder / f"{s}.bin").stat().st_size == meta["bytes"][s] for s in SPLITS)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def prepare(corpus: Path | None = None, data_root: Path | None = None) -> Path:
    """Build the data folder for `corpus` (idempotent, atomic) and return its absolute path."""
    root, rels = list_corpus(corpus)
    contents = [(root / rel).read_bytes() for rel in rels]
    digest = hashlib.sha256()
    for rel, data in zip(rels, contents):   # length-prefixed, so (relpath, content) is unambiguous
        for part in (rel.encode(), data):
            digest.update(len(part).to_bytes(8, "big") + part)
    corpus_hash = digest.hexdigest()
    data_root = (data_root or default_data_root()).expanduser().resolve()
    final = data_root / corpus_hash[:16]
    if is_complete(final):
        return final
    parts: dict[str, list[bytes]] = {s: [] for s in SPLITS}
    held: dict[str, list[str]] = {s: [] for s in SPLITS}
    rule = stdlib_split_of if corpus is None else split_of
    if corpus is not None and corpus.is_file():   # one file cannot be split whole: byte ranges
        data = contents[0]
        cuts = [0, len(data) * 90 // 100, len(data) * 95 // 100, len(data)]
        parts = {s: [data[cuts[i]:cuts[i + 1]]] for i, s in enumerate(SPLITS)}
        held["val"] = [rels[0]]
    else:
        for rel, data in zip(rels, contents):
            parts[rule(rel)].append(data)
            held[rule(rel)].append(rel)
    empty = [s for s in ("train", "val") if not parts[s]]
    if empty:
        raise ValueError(f"corpus {root}: {len(rels)} files leave split(s) {empty} empty; "
                         "files are split whole (~90/5/5), so pass a corpus with more files")
    meta = {"format": FORMAT, "corpus_hash": corpus_hash, "source": str(root.resolve()),
            "python_version": sys.version.split()[0],
            "split_rule": ("files of " + ", ".join(HELD_OUT_UNITS) + ": sha256(relpath)[:8] % 3: 0 val, "
                           "1 test, 2 train; every other file train") if corpus is None else
                          "sha256(relpath)[:8] % 100: <90 train, <95 val, else test",
            "held_out_sources": held_out_sources(root, corpus, held),
            "splits": {s: f"{s}.bin" for s in SPLITS},   # the harness hides the others per step
            "files": {s: len(parts[s]) for s in SPLITS},
            "bytes": {s: sum(map(len, parts[s])) for s in SPLITS}}
    data_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=data_root))   # same filesystem: rename is atomic
    try:
        tmp.chmod(0o755)            # mkdtemp makes it 0700; sandboxes may read as another user
        for s in SPLITS:
            (tmp / f"{s}.bin").write_bytes(b"".join(parts[s]))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if final.exists():          # only possible if someone tampered with it: rebuild
            shutil.rmtree(final)
        try:
            tmp.rename(final)
        except OSError:             # another process won the race; theirs is as good as ours
            if not is_complete(final):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def held_out_sources(root: Path, corpus: Path | None, held: dict[str, list[str]]) -> dict:
    """Where the held-out splits' bytes lie besides val.bin and test.bin, for the harness to
    hide: `units`, stdlib-relative (the default corpus: hidden in every Python installation a
    run can see, with their bytecode caches); `paths`, absolute (a corpus's val and test files;
    exact copies of held-out files elsewhere in Python's libraries); `siblings`: this data
    folder's neighbours under the data root, earlier preparations of the same text."""
    if corpus is None:
        files = [root / rel for rel in held["val"] + held["test"]]
        copies = exact_copies(files, [r for r in python_lib_roots() if not _same_tree(r, root)])
        return {"units": list(HELD_OUT_UNITS), "paths": copies, "siblings": True}
    return {"units": [], "paths": [str((root / rel).resolve()) for rel in held["val"] + held["test"]],
            "siblings": True}


def _same_tree(path: Path, root: Path) -> bool:
    """`path` is the stdlib `root` itself (its copies are the units), not site-packages in it."""
    return path.resolve() == root.resolve()


def load_split(data_dir: str | Path, split: str) -> torch.Tensor:
    """All bytes of one split as a 1-D uint8 tensor."""
    path = Path(data_dir) / f"{split}.bin"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: run `python train/prepare.py` and pass its "
                                f"data_dir as NIGHTSHIFT_DATA (split must be one of {SPLITS})")
    return torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, help="a text file or a folder of text files "
                        "(default: this interpreter's stdlib sources, tests excluded)")
    parser.add_argument("--data-root", type=Path, help="default: $NIGHTSHIFT_DATA_ROOT or "
                        "~/.cache/nightshift/data")
    args = parser.parse_args()
    data_dir = prepare(args.corpus, args.data_root)
    meta = json.loads((data_dir / "meta.json").read_text())
    print(f"corpus: {meta['source']} ({sum(meta['files'].values())} files, hash {meta['corpus_hash'][:16]})")
    for s in SPLITS:
        print(f"{s}: {meta['files'][s]} files, {meta['bytes'][s]:,} bytes")
    print(f"data_dir: {data_dir}")
