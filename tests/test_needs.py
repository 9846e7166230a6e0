"""tests/needs.py: a test that needs what is missing skips with the fix, or fails where CI
requires the kind; every kind is known by name."""
import pytest

from tests import needs as registry
from tests.needs import NEEDS, Need, check, needs


@pytest.fixture
def a_missing_kind(monkeypatch):
    monkeypatch.setitem(NEEDS, "telescope", Need("telescope", lambda: "no telescope on PATH", "apt-get install telescope"))
    for name in ("NIGHTSHIFT_REQUIRE_ALL", "NIGHTSHIFT_REQUIRE_TELESCOPE"):
        monkeypatch.delenv(name, raising=False)
    registry.why_missing.cache_clear()
    yield monkeypatch
    registry.why_missing.cache_clear()


def test_a_missing_kind_skips_with_one_line_naming_it_and_the_fix(a_missing_kind):
    with pytest.raises(pytest.skip.Exception) as skipped:
        check("telescope")
    line = str(skipped.value)
    assert "\n" not in line
    assert "needs telescope: no telescope on PATH" in line and "apt-get install telescope" in line
    assert "bash .ci/run" in line


@pytest.mark.parametrize("variable", ["NIGHTSHIFT_REQUIRE_TELESCOPE", "NIGHTSHIFT_REQUIRE_ALL"])
def test_where_the_kind_is_required_its_absence_fails(a_missing_kind, variable):
    a_missing_kind.setenv(variable, "1")
    with pytest.raises(pytest.fail.Exception, match="NIGHTSHIFT_REQUIRE_TELESCOPE is set but .*needs telescope"):
        check("telescope")


def test_a_kind_that_is_here_passes(a_missing_kind):
    a_missing_kind.setitem(NEEDS, "telescope", Need("telescope", lambda: None, "-"))
    a_missing_kind.setenv("NIGHTSHIFT_REQUIRE_ALL", "1")
    check("telescope")


def test_an_unknown_kind_is_refused_where_it_is_written():
    with pytest.raises(KeyError, match="unknown need 'dokcer'.*docker"):
        needs("dokcer")


def test_the_agent_clis_are_found_in_the_folder_nightshift_agent_clis_names(tmp_path, monkeypatch):
    monkeypatch.setenv("NIGHTSHIFT_AGENT_CLIS", str(tmp_path))
    assert registry._agent_clis() == f"claude, codex not installed in {tmp_path}"
    bin_dir = tmp_path / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    for name in ("claude", "codex"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    assert registry.agent_cli("codex") == bin_dir / "codex"
    monkeypatch.setattr(registry.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert registry._agent_clis() is None
    monkeypatch.setattr(registry.shutil, "which", lambda name: None)
    assert registry._agent_clis() == "node not on PATH"
    assert "npm install --prefix ~/.cache/nightshift/agent-clis" in NEEDS["agent_clis"].fix
