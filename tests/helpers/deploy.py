"""Deploy checks' shared helpers: repository paths, the metric names of docs/contracts.md, PromQL names.

Used by tests/deploy (Prometheus config and rules, Grafana dashboard, scrape) and its conftest.py.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def contract_metrics() -> dict[str, str]:
    """``{metric name: type}`` from the "Service metrics" table of docs/contracts.md."""
    text = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\|\s*`(radscreen_[a-z0-9_]+)`\s*\|\s*([a-z]+)", text, flags=re.MULTILINE)
    assert rows, "docs/contracts.md has no 'Service metrics' table of `radscreen_*` names"
    return dict(rows)


def exposed_series_names() -> set[str]:
    """Every series name the contract metrics expose (histograms add _bucket/_sum/_count)."""
    names: set[str] = set()
    for name, kind in contract_metrics().items():
        names.add(name)
        if kind == "histogram":
            names.update(name + suffix for suffix in HISTOGRAM_SUFFIXES)
    return names


def prometheus_tool(name: str) -> str:
    """Path of ``name`` (promtool, prometheus) from the Debian package `prometheus`; skip the test if absent.

    The package is installed by scripts/install-system-deps.sh; without it these checks cannot run.
    """
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed: run scripts/install-system-deps.sh (Debian package prometheus)")
    return path

PROMQL_WORDS = {
    "sum", "avg", "max", "min", "count", "rate", "increase", "irate", "histogram_quantile", "abs",
    "clamp_min", "clamp_max", "and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
    "group_right", "offset", "bool", "time", "vector", "scalar", "topk", "bottomk", "delta", "deriv",
}


def metric_names(expr: str) -> set[str]:
    """Series names an expression selects: strip strings, matchers, ranges and grouping clauses first."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"(?<![A-Za-z0-9_:])\d+(\.\d+)?([eE][-+]?\d+)?", "", text)  # numbers such as 1e-9
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    return {w for w in words if w not in PROMQL_WORDS}
