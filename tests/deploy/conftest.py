"""Shared helpers for the deploy checks: repository paths and the metric names of docs/contracts.md."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
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


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool (Debian package `prometheus`, installed by scripts/install-system-deps.sh)."""
    return prometheus_tool("promtool")


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """Path of the ``docker`` client once a Docker engine answers; skip only where the daemon cannot start.

    scripts/docker-daemon.sh starts ``dockerd`` (Debian package docker.io, from scripts/install-system-deps.sh)
    when none is running and leaves it running; its reason for failing becomes the printed skip reason.
    """
    docker = shutil.which("docker")
    script = ROOT / "scripts" / "docker-daemon.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=180, check=False)
    if docker is None or proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        reason = "Docker engine cannot start: " + ("; ".join(lines)[:600] or "no docker client on PATH")
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    assert docker is not None
    return docker
