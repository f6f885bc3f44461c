"""Fixtures of the PACS tests: a real Orthanc forwarding to a real ``radscreen dicom-listen``, and the tiny
artifact's scorer for the expected answers (checks: tests/helpers/pacs_checks.py).

The tiny test artifact (``tiny_artifact``, tests/service/conftest.py) scores; Orthanc and dcmtk come from Debian
(scripts/install-system-deps.sh): without them the tests that need them skip, naming the package.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.inference.loading import load_scorer
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from support.processes import free_port
from tests.helpers.dicom_listener import AE_TITLE, Listener, running_listener
from tests.helpers.orthanc import Orthanc, running_orthanc
from tests.helpers.pacs_checks import require_orthanc


@pytest.fixture(scope="session")
def tiny_scorer(tiny_artifact: Path) -> Scorer:
    return load_scorer(ScorerSpec(model_dir=tiny_artifact, backend="torch", device="cpu"))


@pytest.fixture(scope="module")
def pacs(tiny_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Orthanc, Listener]]:
    """Orthanc forwarding OP instances (Lua ``OnStoredInstance``) to ``dicom-listen``, which delivers to Orthanc."""
    require_orthanc()
    folder = tmp_path_factory.mktemp("pacs")
    port = free_port()
    with running_orthanc(folder / "orthanc", forward_to=(AE_TITLE, port)) as orthanc, \
            running_listener(tiny_artifact, folder / "spool", folder / "listener.log",
                             archive_port=orthanc.dicom_port, port=port) as listener:
        yield orthanc, listener
