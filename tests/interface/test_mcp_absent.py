"""Without the MCP SDK (the README's bare install), `nightshift mcp` says how to get it."""
from __future__ import annotations

from tests.interface.toy_target import toy_files
from tests.loop_helpers import cli_env, make_repo, nightshift


def test_without_the_sdk_nightshift_mcp_exits_1_naming_the_extra(tmp_path):
    repo = make_repo(tmp_path / "user", toy_files())
    shadow = tmp_path / "no_sdk"
    (shadow / "mcp").mkdir(parents=True)       # an `mcp` that cannot be imported, found first
    (shadow / "mcp" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n")
    env = cli_env(tmp_path / "data")
    env["PYTHONPATH"] = f"{shadow}:{env['PYTHONPATH']}"
    done = nightshift(repo, "mcp", env=env, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert "pip install -e '.[mcp]'" in done.stderr
