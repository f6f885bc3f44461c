"""Header values that highdicom refuses while building the SR (PatientSex ``X``, a birth date ``19991332``, a study
date ``2026``, a study time ``25:99``) never stop the PACS pipeline: over STOW-RS into a real service, each such
study is graded once and its SR (with those values left empty) reaches a real Orthanc, and a good study sent after
them is graded and delivered too.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pydicom
import pytest
from pydicom.uid import generate_uid

from service.pacs.settings import PacsSettings
from support.images import fundus_like
from support.live_server import live_server, settings_for
from tests.helpers.dicom_files import op_dicom
from tests.helpers.dicom_listener import two_eye_study
from tests.helpers.orthanc import Orthanc, running_orthanc
from tests.helpers.pacs_checks import require_orthanc
from tests.helpers.stow import send_stow

pytestmark = pytest.mark.timeout(300)
API_KEY = "poison-test-key"

POISON = {"PatientSex": "X", "PatientBirthDate": "19991332", "StudyDate": "2026", "StudyTime": "25:99"}


@pytest.fixture(scope="module")
def stack(tiny_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Orthanc]]:
    require_orthanc()
    folder = tmp_path_factory.mktemp("poison")
    with running_orthanc(folder / "orthanc") as orthanc:
        pacs = PacsSettings(spool_dir=folder / "spool", archive_url=orthanc.dicomweb, settle_s=0.5, quiet_s=30,
                            poll_s=0.2, retry_base_s=0.5, retry_max_s=2, min_free_mb=0)
        settings = settings_for(tiny_artifact, api_key=API_KEY, max_upload_bytes=1024 * 1024, backend="torch")
        with live_server(settings, pacs=pacs) as base:
            yield base, orthanc


def _metric(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics", headers={"X-API-Key": API_KEY}, timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def test_studies_with_header_values_the_sr_cannot_carry_are_graded_and_others_go_on(
        stack: tuple[str, Orthanc]) -> None:
    base, orthanc = stack
    poisoned: list[tuple[str, str | None]] = []
    for n, (keyword, bad) in enumerate(POISON.items()):
        study_uid = str(generate_uid())
        header: dict[str, Any] = {keyword: bad}
        parts = [op_dicom(fundus_like(10 + 2 * n + i, 64), laterality=side, study_uid=study_uid, **header)
                 for i, side in enumerate("RL")]
        assert send_stow(base, parts, key=API_KEY).status_code == 200
        poisoned.append((study_uid, keyword))
    good_uid = str(generate_uid())
    assert send_stow(base, list(two_eye_study(good_uid)), key=API_KEY).status_code == 200
    for uid, emptied in [*poisoned, (good_uid, None)]:
        [sr_id] = orthanc.wait_for(120, StudyInstanceUID=uid, Modality="SR")
        sr = pydicom.dcmread(io.BytesIO(orthanc.instance_file(sr_id)))
        if emptied is not None:
            assert str(sr.get(emptied, "")) == ""  # not a conforming value: present and empty, never guessed
    assert _metric(base, "radscreen_pacs_quarantines_total") == 0
    assert _metric(base, "radscreen_exams_total") == len(POISON) + 1  # each study scored once
