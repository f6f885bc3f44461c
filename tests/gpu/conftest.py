"""Fixtures of the ``gpu`` tests (``tiny_data`` is the suite's, tests/conftest.py).

This folder collects without the web stack (FastAPI, pydantic, uvicorn,
pydicom): a GPU node has torch but not the service's dependencies, and ``pytest -m gpu tests/gpu`` must run
there (scripts/gpu_lease.sh); the one test that needs a live server skips, naming the missing package."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.artifacts import build_tiny_artifact


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny real artifact (radial VGG-16*, width 4, 64 px): the service test never needs the embedded weights."""
    return build_tiny_artifact(tmp_path_factory.mktemp("artifact") / "tiny")
