"""The test suite's own layout: shared helpers live in tests/helpers or support, conftest.py files hold fixtures only.

A test module importing from a conftest.py or from another test module couples two tests (moving or
renaming one breaks the other) and runs that module's import-time code twice under two names; these checks
keep the shared places (tests/helpers for the tests alone, support for tests and benchmarks) the only
ones. That benchmarks and support never import the tests is an import-linter contract (pyproject.toml).
Read with ``ast``: nothing is imported or run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(path for folder in ("tests", "benchmarks", "support") for path in (ROOT / folder).rglob("*.py"))


def _imported_modules(tree: ast.Module) -> list[str]:
    """Every absolute module name an ``import`` or ``from ... import`` statement names, at any depth."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_only_test_modules_imported_are_tests_helpers(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    relative = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level > 0]
    assert not relative, f"{path.name}: relative import on line(s) {relative}; import from tests.helpers or support"
    wrong = [m for m in _imported_modules(tree)
             if (m == "tests" or m.startswith("tests.")) and not m.startswith("tests.helpers")]
    assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}: shared helpers belong in tests/helpers or support"


def _is_fixture(node: ast.FunctionDef) -> bool:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if ast.unparse(target) in ("pytest.fixture", "fixture"):
            return True
    return False


@pytest.mark.parametrize("path", sorted((ROOT / "tests").rglob("conftest.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_conftest_files_hold_fixtures_only(path: Path) -> None:
    """Public top-level names of a conftest.py are fixtures (pytest hooks allowed); private helpers may serve them."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    public = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)
              and not n.name.startswith("_") and not n.name.startswith("pytest_")
              and not (isinstance(n, ast.FunctionDef) and _is_fixture(n))]
    assert not public, f"{path.relative_to(ROOT)} defines helpers {public}: move them to tests/helpers"


def test_the_checks_see_the_suite() -> None:
    """Guard against a glob that matches nothing (the checks above would then pass vacuously)."""
    names = {p.relative_to(ROOT).as_posix() for p in SOURCES}
    assert {"tests/helpers/outcomes.py", "support/images.py", "tests/service/conftest.py",
            "benchmarks/load_service.py"} <= names
