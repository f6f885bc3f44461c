"""One exam assembly: the same photographs give the same typed exam result on every surface that grades a visit.

The photographs of two visits (DICOM, one study each) go through ``POST /v1/exams`` (real uvicorn on
127.0.0.1), the PACS worker's ``grade_study`` on a real spool, and the batch job's ``--group-by study`` exam
rows. Each surface's answer is read back into :class:`service.screening.exam.ExamResult` and must equal the
others and the exam rule applied to the outcomes the photographs were chosen for (a tiny artifact calibrated so
that each outcome occurs: ``tests.helpers.outcomes``):

- visit A: the right eye photographed twice (``refer_referable_dr`` and a blank, ``retake_ungradable``), the
  left once (``no_referable_dr``): the patient is referred;
- visit B: only the right eye (``grader_review_uncertain``): the left eye is stated missing.
"""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from models.outcome.decision import Eye, ScreeningOutcome
from service.batch.exams import exam_of_row
from service.batch.job import BatchJobConfig, run_job
from service.inference.spec import ScorerSpec
from service.metrics import ServiceMetrics
from service.model_host import ModelHost
from service.pacs.grading import grade_study
from service.pacs.intake import Accepted, check_instance
from service.pacs.store import Spool
from service.screening.exam import ExamResult, exam_result
from support.live_server import live_server, settings_for
from tests.helpers.dicom_files import op_dicom

STUDY_A = "1.2.826.0.1.3680043.8.498.5101"
STUDY_B = "1.2.826.0.1.3680043.8.498.5102"
VISITS: dict[str, list[tuple[Eye, str]]] = {  # study -> (eye, the outcome its photograph was chosen for)
    STUDY_A: [(Eye.RIGHT, "refer_referable_dr"), (Eye.RIGHT, "retake_ungradable"), (Eye.LEFT, "no_referable_dr")],
    STUDY_B: [(Eye.RIGHT, "grader_review_uncertain")],
}


def _rgb(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


@pytest.fixture(scope="module")
def visits(images: dict[str, bytes]) -> dict[str, list[bytes]]:
    """Each study's DICOM instances, in the order of :data:`VISITS`."""
    return {
        study: [op_dicom(_rgb(images[outcome]), laterality="R" if eye is Eye.RIGHT else "L", study_uid=study,
                         PatientID=f"P-{study[-4:]}", SeriesInstanceUID=f"{study}.1",
                         SOPInstanceUID=f"{study}.1.{n}")
                for n, (eye, outcome) in enumerate(photos, start=1)]
        for study, photos in VISITS.items()
    }


def _expected(study: str) -> ExamResult:
    return exam_result((eye, ScreeningOutcome(outcome)) for eye, outcome in VISITS[study])


def _by_route(artifact: Path, visits: dict[str, list[bytes]]) -> dict[str, ExamResult]:
    out: dict[str, ExamResult] = {}
    with live_server(settings_for(artifact, backend="torch")) as base:
        for study, instances in visits.items():
            parts = [("image", (f"{n}.dcm", data, "application/dicom")) for n, data in enumerate(instances)]
            answer = httpx.post(f"{base}/v1/exams", files=parts, timeout=120)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["exam_id"] == study
            assert [im["result"]["outcome"] for im in body["images"]] == [o for _, o in VISITS[study]]
            out[study] = ExamResult.from_fields(body)
    return out


def _by_pacs_worker(artifact: Path, visits: dict[str, list[bytes]], root: Path) -> dict[str, ExamResult]:
    loop = asyncio.new_event_loop()  # the batcher runs on the loop that loaded the host
    host = ModelHost(settings_for(artifact, backend="torch"), ServiceMetrics())
    out: dict[str, ExamResult] = {}
    try:
        loop.run_until_complete(host.load())
        assert host.state == "ready", host.error
        for study, instances in visits.items():
            spool = Spool(root / study)
            for data in instances:
                verdict = check_instance(data)
                assert isinstance(verdict, Accepted)
                spool.put_instance(verdict.study_uid, verdict.sop_instance_uid, verdict.eye, data)
            [folder] = spool.studies()
            graded = loop.run_until_complete(grade_study(host, folder))
            assert graded is not None
            assert sorted(im.outcome.value for im in graded.images) == sorted(o for _, o in VISITS[study])
            out[study] = graded.result
    finally:
        loop.run_until_complete(host.stop())
        loop.close()
    return out


def _by_batch_job(artifact: Path, visits: dict[str, list[bytes]], root: Path) -> dict[str, ExamResult]:
    folder = root / "studies"
    folder.mkdir()
    for study, instances in visits.items():
        for n, data in enumerate(instances):
            (folder / f"{study[-4:]}-{n}.dcm").write_bytes(data)
    output = root / "results.csv"
    run_job(BatchJobConfig(input=folder, output=output,
                           spec=ScorerSpec(model_dir=artifact, backend="torch", device="cpu"),
                           batch_size=4, chunk_size=4, progress=False, group_by="study"))
    with output.with_name("results.exams.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert all(row["error"] == "" for row in rows), rows
    return {row["exam_id"]: exam_of_row({**row, "right_images": int(row["right_images"]),
                                         "left_images": int(row["left_images"])}) for row in rows}


@pytest.fixture(scope="module")
def surfaces(calibrated: tuple[Path, dict[str, bytes]], visits: dict[str, list[bytes]],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, ExamResult]]]:
    artifact = calibrated[0]
    yield {
        "route": _by_route(artifact, visits),
        "pacs worker": _by_pacs_worker(artifact, visits, tmp_path_factory.mktemp("spool")),
        "batch job": _by_batch_job(artifact, visits, tmp_path_factory.mktemp("batch")),
    }


@pytest.mark.parametrize("surface", ["route", "pacs worker", "batch job"])
@pytest.mark.parametrize("study", [STUDY_A, STUDY_B])
def test_every_surface_gives_the_rules_typed_result(surfaces: dict[str, dict[str, ExamResult]], surface: str,
                                                    study: str) -> None:
    assert surfaces[surface][study] == _expected(study)


def test_the_visits_cover_a_referral_a_retake_and_a_missing_eye() -> None:
    """The premise: the two visits exercise the rule's precedence, a second photograph of one eye, and a
    missing eye (a result that is the same everywhere only because it is trivial would prove nothing)."""
    a, b = _expected(STUDY_A), _expected(STUDY_B)
    assert a.outcome is ScreeningOutcome.REFER_REFERABLE_DR and a.eyes[Eye.RIGHT].photographs == 2
    assert a.eyes[Eye.LEFT].outcome is ScreeningOutcome.NO_REFERABLE_DR and not a.missing
    assert b.missing == (Eye.LEFT,) and b.outcome is ScreeningOutcome.GRADER_REVIEW_UNCERTAIN
    assert b.eyes[Eye.LEFT].outcome is ScreeningOutcome.RETAKE_UNGRADABLE
