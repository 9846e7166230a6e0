"""The scan of what a run sees for the held-out text (agent/preflight/held_out_scan.py): a copy is
found wherever it lies in the view, in any form that keeps its lines (a .py, a text dump, a zip),
text the training split shares is not; and a night whose view holds one does not start.

Real parts: real files, a real view of this interpreter, the real CLI on the bundled target."""
from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from agent.preflight import held_out_scan
from agent.preflight.held_out_scan import FOUND_AT, count_in, fingerprints, scan
from sandbox.view import Bind, View
from tests.loop_helpers import PROJECT, cli_env, nightshift, project_repo

STDLIB = Path(__import__("sysconfig").get_paths()["stdlib"])


@pytest.fixture
def splits(tmp_path):
    """A held-out split cut from two modules, a training split from two others (one line shared)."""
    held = tmp_path / "val.bin"
    held.write_bytes((STDLIB / "mailbox.py").read_bytes() + (STDLIB / "smtplib.py").read_bytes())
    train = tmp_path / "train.bin"
    train.write_bytes((STDLIB / "argparse.py").read_bytes() + (STDLIB / "json" / "decoder.py").read_bytes())
    return held, train


def test_a_copy_is_found_and_text_the_training_split_shares_is_not(tmp_path, splits):
    held, train = splits
    prints = fingerprints([held], [train])
    copy = tmp_path / "notes.txt"
    copy.write_bytes(b"header\n" + (STDLIB / "mailbox.py").read_bytes()[5000:25000])
    shared = tmp_path / "argparse_copy.py"
    shared.write_bytes((STDLIB / "argparse.py").read_bytes())
    assert count_in(str(copy), prints) >= FOUND_AT
    assert count_in(str(shared), prints) == 0
    assert count_in(str(STDLIB / "os.py"), prints) < FOUND_AT


def test_a_copy_inside_a_zip_is_found(tmp_path, splits):
    prints = fingerprints([splits[0]], [splits[1]])
    archive = tmp_path / "python312.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("smtplib.py", (STDLIB / "smtplib.py").read_bytes())
    assert count_in(str(archive), prints) >= FOUND_AT


def test_the_scan_names_the_file_and_why_the_view_holds_it_and_remembers_its_answers(tmp_path, splits, monkeypatch):
    monkeypatch.setenv("NIGHTSHIFT_VIEW_CACHE", str(tmp_path / "cache"))
    prints = fingerprints([splits[0]], [splits[1]])
    vendor = tmp_path / "site-packages" / "sdk" / "vendored"
    vendor.mkdir(parents=True)
    (vendor / "mailbox.py").write_bytes((STDLIB / "mailbox.py").read_bytes())
    (vendor / "other.py").write_bytes((STDLIB / "os.py").read_bytes())
    seen = View((Bind(str(tmp_path / "site-packages"), str(tmp_path / "site-packages"), "on its import path"),), ())
    found = scan(seen, [], prints)
    assert [f.path for f in found.findings] == [str(vendor / "mailbox.py")]
    assert found.findings[0].why == "on its import path" and "stretches" in found.findings[0].says()
    assert found.sizes[str(tmp_path / "site-packages")][0] == 2

    monkeypatch.setattr(held_out_scan, "count_in", lambda *a: pytest.fail("read again"))
    assert [f.path for f in scan(seen, [], prints).findings] == [str(vendor / "mailbox.py")]
    (vendor / "other.py").write_bytes(b"changed\n")                   # a new version is read again
    monkeypatch.setattr(held_out_scan, "count_in", lambda *a: 0)
    assert [f.path for f in scan(seen, [], prints, skip=[str(vendor / "mailbox.py")]).findings] == []


def test_a_night_whose_runs_could_read_a_copy_does_not_start_and_says_which(tmp_path):
    """view.add names a folder holding text of the val split (a notes file made from it): the
    night stops before its baseline, naming the file, with nothing run; `check` says the same."""
    sys.path.insert(0, str(PROJECT / "train"))
    import prepare

    data_root = tmp_path / "data"
    val = Path(prepare.prepare(None, data_root)) / "val.bin"
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    (shelf / "notes.txt").write_bytes(val.read_bytes()[:40_000])
    repo = project_repo(tmp_path / "user", budget="3s", sandbox="local", researcher="scripted",
                        view=f"{{add: [{shelf}]}}")
    done = nightshift(repo, "run", "--tag", "seen", "--max-experiments", "1", env=cli_env(data_root))
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert str(shelf / "notes.txt") in said and "program.md's view.add" in said and "held-out" in said
    assert not (repo / "results" / "seen" / "runs").exists() or not any((repo / "results" / "seen" / "runs").iterdir())

    checked = nightshift(repo, "check", "--budget", "3s", env=cli_env(data_root))
    assert checked.returncode == 1
    view_line = next(line for line in checked.stdout.splitlines() if line.startswith("FAIL view:"))
    assert str(shelf / "notes.txt") in view_line


def test_fingerprints_of_nothing_find_nothing(tmp_path):
    empty = np.empty(0, dtype=np.uint64)
    (tmp_path / "f.txt").write_text("x\n" * 100)
    seen = View((Bind(str(tmp_path), str(tmp_path), "test"),), ())
    assert scan(seen, [], empty).findings == []
