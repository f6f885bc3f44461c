"""Fixtures of the service tests: a tiny real artifact (images and servers: tests.helpers), and for the page
tests (test_dashboard.py, test_exam_page.py) a served calibrated artifact and a browser.

The artifact is a real ``models.artifact`` directory (tiny radial VGG-16*: width 4, 64 px input), built by
``support.artifacts`` with its defaults once per test session, so the tests never depend on the
embedded full-size model.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.artifacts import build_tiny_artifact
from tests.helpers.browser import launch
from tests.helpers.outcomes import build_outcome_artifact
from tests.helpers.service_process import running_service


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_artifact(tmp_path_factory.mktemp("artifact") / "tiny")


@pytest.fixture(scope="module")
def calibrated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Path, dict[str, bytes]]:
    """A tiny artifact calibrated so that each screening outcome occurs, and one PNG per outcome (page tests)."""
    return build_outcome_artifact(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "artifact")


@pytest.fixture(scope="module")
def images(calibrated: tuple[Path, dict[str, bytes]]) -> dict[str, bytes]:
    return calibrated[1]


@pytest.fixture(scope="module")
def service(request: pytest.FixtureRequest, calibrated: tuple[Path, dict[str, bytes]],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service on ``calibrated``, requiring the requesting module's ``API_KEY`` (page tests; modules that
    need another service define their own ``service`` fixture)."""
    log = tmp_path_factory.mktemp("page-service-log") / "service.log"
    with running_service(calibrated[0], log, env={"RADSCREEN_API_KEY": request.module.API_KEY}) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium browser for one page test module."""
    with launch() as b:
        yield b
