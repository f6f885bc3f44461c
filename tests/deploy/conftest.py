"""Fixtures of the deploy checks: promtool and a running Docker engine (helpers: tests.helpers.deploy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers.deploy import ROOT, prometheus_tool


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool (Debian package `prometheus`, installed by scripts/install-system-deps.sh)."""
    return prometheus_tool("promtool")


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """Path of the ``docker`` client once a Docker engine answers; skip where the daemon cannot start or
    RADSCREEN_SKIP_DOCKER=1 asks to skip the container tests.

    scripts/docker-daemon.sh starts ``dockerd`` (Debian package docker.io, from scripts/install-system-deps.sh)
    when none is running and records it; its reason for failing becomes the printed skip reason.
    scripts/test.sh (``make test``) stops that daemon when the run ends; after running pytest directly,
    ``bash scripts/docker-daemon.sh stop`` does it (an engine that was already running is never stopped).
    """
    if os.environ.get("RADSCREEN_SKIP_DOCKER") == "1":
        pytest.skip("RADSCREEN_SKIP_DOCKER=1: container tests skipped, no Docker engine started")
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
