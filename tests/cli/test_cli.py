"""The command line as a user meets it: help, bad input, seeding, status and noise."""
from tests.loop_helpers import cli_env, git_out, loop_state, make_repo, nightshift
from tests.night.test_keep_rule_loop import NOISE_SCRIPT, PROGRAM


def _repo(tmp_path, program=PROGRAM):
    return make_repo(tmp_path / "user", {"noise.py": NOISE_SCRIPT, "program.md": program})


def test_help_explains_every_command(tmp_path):
    done = nightshift(tmp_path, "--help", env=cli_env(tmp_path))
    assert done.returncode == 0
    for command in ("run", "status", "seed", "noise"):
        assert command in done.stdout


def test_help_paragraphs_wrap_at_the_terminal_not_mid_sentence(tmp_path):
    """Typer kept each docstring line break of a later paragraph: at 80 columns every
    line broke in two, leaving a fragment like `land within the` on a line of its own."""
    env = {**cli_env(tmp_path), "COLUMNS": "80", "TERMINAL_WIDTH": "80"}
    done = nightshift(tmp_path, "replay", "--help", env=env)
    assert done.returncode == 0
    lines = [line.strip() for line in done.stdout.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("With the night's budget"))
    paragraph = lines[start:lines.index("", start)]
    assert " ".join(paragraph).startswith("With the night's budget and split it checks reproduction "
                                          "(does each metric land within the seed noise of the night's?);")
    assert all(len(line) >= 60 for line in paragraph[:-1]), paragraph   # full lines, no fragments


def test_malformed_program_names_field_and_line_and_exits_1(tmp_path):
    repo = _repo(tmp_path, PROGRAM.replace("budget: 1s", "budget: soon"))
    done = nightshift(repo, "run", "--tag", "x", env=cli_env(tmp_path))
    assert done.returncode == 1
    assert "program.md:6" in done.stderr and "budget" in done.stderr
    assert not (repo / "results" / "x").exists()


def test_status_of_unknown_tag_lists_known_ones(tmp_path):
    repo = _repo(tmp_path)
    done = nightshift(repo, "status", "--tag", "nope", env=cli_env(tmp_path))
    assert done.returncode == 1 and "Known tags: none" in done.stderr


def test_noise_measures_records_and_suggests(tmp_path):
    repo = _repo(tmp_path)
    done = nightshift(repo, "noise", "--tag", "cal", "--seeds", "4", env=cli_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "suggested for program.md" in done.stdout and "min_effect" in done.stdout
    state = loop_state(repo, "cal")
    noise_runs = [r for r in state.runs if r.role == "noise"]
    assert len(noise_runs) == 4 and all(r.status == "ok" for r in noise_runs)
    assert state.reference(noise_runs[0].commit) == {}   # never a reference


def test_seed_queues_a_hypothesis_the_loop_tests_first(tmp_path):
    repo = _repo(tmp_path)
    env = cli_env(tmp_path)
    missing = nightshift(repo, "seed", "--tag", "h", "SCALE=2.0", env=env)
    assert missing.returncode == 1 and "no loop" in missing.stderr
    first = nightshift(repo, "run", "--tag", "h", "--max-experiments", "1",
                       "--hypothesis", "WIDTH=32", env=env)
    assert first.returncode == 0, first.stderr
    report = repo / "results" / "h" / "report.html"   # a night ends with its report
    assert f"report: {report}" in " ".join(first.stdout.split())
    assert "e0001" in report.read_text(encoding="utf-8")
    queued = nightshift(repo, "seed", "--tag", "h", "SCALE=2.0", env=env)
    assert queued.returncode == 0 and "h002" in queued.stdout
    second = nightshift(repo, "run", "--tag", "h", "--max-experiments", "1", env=env)
    assert second.returncode == 0, second.stderr
    state = loop_state(repo, "h")
    assert [e.hypothesis_id for e in state.experiments.values()] == ["h001", "h002"]
    tested = git_out(repo, "show", f"{state.experiments['e0002'].commit}:noise.py")
    assert "SCALE = 2.0" in tested or "SCALE = 2  " in tested


def test_run_json_goes_with_detach(tmp_path):
    done = nightshift(_repo(tmp_path), "run", "--tag", "x", "--json", env=cli_env(tmp_path))
    assert done.returncode == 1 and "--json goes with --detach" in done.stderr and done.stdout == ""


def test_minutes_bound_a_night_and_go_without_hours(tmp_path):
    repo = _repo(tmp_path)
    both = nightshift(repo, "run", "--tag", "x", "--hours", "1", "--minutes", "5", env=cli_env(tmp_path))
    assert both.returncode == 1 and "--hours and --minutes" in both.stderr
    assert not (repo / "results" / "x").exists()
    done = nightshift(repo, "run", "--tag", "y", "--minutes", "0.05", env=cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "stopped: reached --minutes 0.05" in done.stdout
