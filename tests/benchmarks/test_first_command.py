"""The quick-start benchmark: it runs the README's own command and reads the night it wrote."""
from pathlib import Path

from benchmarks.quickstart.first_command import FirstCommand, read_night, readme_command, scaled
from tests.interface.night import write_night

PROJECT = Path(__file__).resolve().parents[2]


def test_it_runs_the_command_the_readme_gives_a_newcomer():
    arguments = readme_command(PROJECT / "README.md")
    assert arguments[0] == "run" and "--budget" in arguments
    assert f"nightshift {' '.join(arguments)}" in (PROJECT / "README.md").read_text()


def test_a_slower_machine_is_a_scaled_budget():
    assert scaled(["run", "--max-experiments", "5", "--budget", "12s"], 0.5) == \
        ["run", "--max-experiments", "5", "--budget", "6s"]


def test_a_night_is_read_back_from_its_ledger(tmp_path):
    night = write_night(tmp_path)
    result = read_night(night.repo, rc=0, started=0.0, wall=300.0)
    assert result.experiments == 5
    assert [k.split(" (")[0] for k in result.keeps] == ["WIDTH 64 -> 128"]
    assert result.first_keep_s is not None and result.first_keep_s > 0


def test_showing_the_product_takes_a_keep_a_single_run_keep_and_the_time_limit():
    shown = FirstCommand(0, 400.0, 120.0, ("LR 0.01 -> 0.02 (+0.1)",), ("N 1 -> 2",), 5)
    assert shown.shows(480.0)
    assert not shown.shows(300.0)
    assert not FirstCommand(0, 400.0, None, (), ("N 1 -> 2",), 5).shows(480.0)
    assert not FirstCommand(0, 400.0, 120.0, ("LR 0.01 -> 0.02 (+0.1)",), (), 5).shows(480.0)
    assert not FirstCommand(1, 400.0, 120.0, ("LR 0.01 -> 0.02 (+0.1)",), ("N 1 -> 2",), 5).shows(480.0)
