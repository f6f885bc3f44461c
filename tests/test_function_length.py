"""No function of the product (models/, service/, training/) is longer than 80 lines: a longer one is split into
named steps. A function that is a table of data (one literal) may be listed in TABLES with the reason.
Read with ``ast``: nothing is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80
TABLES: dict[str, str] = {}  # "path:function" -> why its length is data, not logic


def _long_functions() -> list[str]:
    found = []
    for package in ("models", "service", "training"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    key = f"{path.relative_to(ROOT).as_posix()}:{node.name}"
                    if lines > LIMIT and key not in TABLES:
                        found.append(f"{key} ({lines} lines)")
    return found


def test_no_product_function_is_over_80_lines() -> None:
    assert _long_functions() == []


def test_the_check_sees_the_product() -> None:
    """The premise: the walk reads the packages (a wrong ROOT would pass every product)."""
    assert sum(1 for _ in (ROOT / "service").rglob("*.py")) > 50
    assert sum(1 for _ in (ROOT / "training").rglob("*.py")) > 50
