"""The import layering of docs/architecture.md: a stage imports only the stages below it.

Every import counts, at module level or inside a function (a lazy import is still a
dependency). Stages of equal rank are independent of each other."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# lowest first; a stage may import any stage of lower rank, and itself
RANKS = {
    "sandbox": 0,
    "cluster": 0.5,
    "agent.record": 1, "agent.target": 1,
    "agent.decide": 2,
    "agent.researchers": 3, "agent.workspace": 3, "agent.publish": 3,
    "agent.program": 4,
    "agent.run": 5,
    "agent.preflight": 5.5,
    "agent.night": 6,
    "agent.review": 7,
    "agent.interface": 7.5,
    "agent.cli": 8,
}


def stage_of(module: str) -> str | None:
    return next((s for s in sorted(RANKS, key=len, reverse=True)
                 if module == s or module.startswith(s + ".")), None)


def imports_of(path: Path) -> list[tuple[int, str]]:
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.append((node.lineno, base))
    return found


SOURCES = sorted(p for pkg in ("agent", "sandbox", "cluster") for p in (ROOT / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_stage_imports_a_higher_one(path):
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    mine = stage_of(module)
    if mine is None:
        assert module == "agent", f"{module} belongs to no stage: add it to docs/architecture.md"
        return
    for line, target in imports_of(path):
        theirs = stage_of(target)
        if theirs == mine:
            continue
        if theirs is None:
            assert not target.startswith(("agent.", "train", "cluster.")), \
                f"{path.name}:{line} imports {target}, which is in no stage"
            continue
        assert RANKS[theirs] < RANKS[mine], (
            f"{path.relative_to(ROOT)}:{line}: {mine} (rank {RANKS[mine]}) imports {target} "
            f"({theirs}, rank {RANKS[theirs]}): lower stages never import higher ones")


def test_the_layering_test_would_catch_an_upward_import(tmp_path):
    assert RANKS[stage_of("agent.record.ledger")] < RANKS[stage_of("agent.night.loop")]
    assert stage_of("agent.programme") is None and stage_of("agent.program") == "agent.program"
