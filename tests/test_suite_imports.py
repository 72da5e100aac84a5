"""What one test module may take from another: only names its owner published (no leading
underscore). A private helper is the owner's to rename or drop; when another module
imported one (f56e3fb dropped test_routing's ``_trusted``, which an export test still
imported), the whole suite failed at collection."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def private_imports_from_test_modules(source: str) -> list[str]:
    """``module.name`` of each private name ``source`` imports from a ``test_*`` module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom) or node.module is None:
            continue
        if not node.module.rpartition(".")[2].startswith("test_"):
            continue
        found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_the_check_sees_a_private_import_from_a_test_module() -> None:
    source = "from tests.annotation.routing.test_routing import _rules, trusted\n"
    assert private_imports_from_test_modules(source) == [
        "tests.annotation.routing.test_routing._rules"
    ]
    assert private_imports_from_test_modules("from tests.factories import _x\n") == []


def test_no_test_module_imports_another_ones_private_helpers() -> None:
    offenders = {
        str(path.relative_to(TESTS)): names
        for path in sorted(TESTS.rglob("*.py"))
        if (names := private_imports_from_test_modules(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, "publish the helper (no leading underscore) or move it"
