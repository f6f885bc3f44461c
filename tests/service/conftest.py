"""Fixtures of the service tests: a tiny real artifact (images and servers: tests.helpers).

The artifact is a real ``models.artifact`` directory (tiny radial VGG-16*: width 4, 64 px input), built by
``tests.helpers.artifacts`` with its defaults once per test session, so the tests never depend on the
embedded full-size model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.artifacts import build_tiny_artifact


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_artifact(tmp_path_factory.mktemp("artifact") / "tiny")
