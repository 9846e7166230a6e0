"""A user repository made from an imitation of tests/imitations/ and its example program.md."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.imitations import files
from tests.loop_helpers import PROJECT, make_repo, set_front_matter

FAST = dict(sandbox="local", researcher="optuna", seeds="{baseline: 2, screen: 1, max: 2}")


def example_repo(root: Path, name: str, **front_matter: str) -> Path:
    """`root` as a git repository holding imitation `name` and examples/<name>/program.md
    (with `front_matter` replaced, FAST by default); nanoGPT's data prepared in the checkout
    as its README says (git-ignored files)."""
    program = set_front_matter((PROJECT / "examples" / name / "program.md").read_text(),
                               **{**FAST, **front_matter})
    repo = make_repo(root, {**files(name), "program.md": program})
    if name == "nanogpt":
        subprocess.run([sys.executable, "data/shakespeare_char/prepare.py"], cwd=repo, check=True,
                       capture_output=True)
    return repo


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")
