"""The documentation site builds strictly: a broken link, a missing page or a reference page
the code can no longer write fails here (and so in CI)."""
import os
import subprocess
import sys
from pathlib import Path

from tests.needs import needs

ROOT = Path(__file__).resolve().parents[1]


@needs("docs")
def test_the_site_builds_strictly(tmp_path):
    quiet = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}   # notices, not errors
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=quiet)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    fields = (tmp_path / "site" / "reference" / "program" / "index.html").read_text()
    assert "nightshift run" in cli and "--max-experiments" in cli     # written from the code's --help
    assert "early_stop" in fields and "report_tolerance" in fields     # every field of the parser
    nanogpt = (tmp_path / "site" / "examples" / "nanogpt" / "index.html").read_text()
    assert "metric_pattern" in nanogpt                                 # the example's own program.md


def test_the_readme_is_short_and_its_program_md_parses(tmp_path):
    """The README stays a five-minute read, and the program.md it shows a newcomer is one
    the parser accepts against a script with those knobs (a README that drifts from the
    parser fails here)."""
    import git

    from agent.program import parse_program

    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    block = readme.split("```yaml\n---\n", 1)[1].split("```", 1)[0]
    repo = tmp_path / "yours"
    repo.mkdir()
    (repo / "train.py").write_text("LR = 3e-3\nN_LAYER = 4\nprint('val_loss=1.0')\n")
    (repo / "data.py").write_text("")
    (repo / "eval.py").write_text("")
    git.Repo.init(repo)
    program = parse_program("---\n" + block, repo / "program.md")
    assert program.target == "train.py" and program.metric == "val_loss"
    assert set(program.knobs) == {"LR", "N_LAYER"} and program.edits == "knobs"
    assert program.budget_s == 60
