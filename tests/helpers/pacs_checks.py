"""What the PACS tests check an SR against: the service's own answer for a study (scored in the test process,
independently of the PACS path), the SR as a reader sees it (read back with highdicom), and the skips when Orthanc
or dcmtk are absent (Debian packages from scripts/install-system-deps.sh; the skip names the package).
"""

from __future__ import annotations

import io
import shutil
from dataclasses import dataclass
from typing import Any

import pydicom
import pytest
from pydicom.sr.codedict import codes

from models.outcome.decision import Eye, ScreeningOutcome
from models.outcome.wording import result_words
from service.inference.prepare import prepare_image
from service.inference.scoring import Scorer
from service.pacs.sr import result_uids
from service.screening.exam import ExamResult, exam_result
from service.screening.payload import score_payload
from tests.helpers import orthanc as orthanc_helper

SR_DECISION_THRESHOLD, SR_MI_THRESHOLD = 0.0558, 0.0028  # the thresholds of a result built without a model


def graded_result(outcome: ScreeningOutcome, p: float, mi: float, issues: tuple[str, ...] = (),
                  decision_threshold: float = SR_DECISION_THRESHOLD,
                  referral_threshold_mi: float = SR_MI_THRESHOLD) -> dict[str, Any]:
    """The fields of a ``/v1/predict`` result that the SR reads, worded as ``service.screening.payload`` words them (for
    building a ``GradedExam`` without a model)."""
    words = result_words(outcome=outcome, probability=p, decision_threshold=decision_threshold,
                         mutual_information=mi, referral_threshold_mi=referral_threshold_mi, quality_issues=issues)
    return {"outcome": outcome.value, "outcome_reason": words.reason, "words": words.to_dict(),
            "diagnosis": {"referable_dr_probability": p, "decision_threshold": decision_threshold},
            "uncertainty": {"mutual_information": mi, "referral_threshold_mi": referral_threshold_mi}}


def require_orthanc() -> None:
    reason = orthanc_helper.missing()
    if reason:
        pytest.skip(reason)


def require_dcmtk() -> None:
    for tool in ("storescu", "findscu"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (Debian package dcmtk; scripts/install-system-deps.sh)")


@dataclass(frozen=True)
class Expected:
    """What the service answers for a study: each instance's result and the exam, plus the SR's UIDs."""

    sr_uid: str
    series_uid: str
    exam: ExamResult
    results: dict[str, dict[str, Any]]  # SOP Instance UID -> /v1/predict result
    model: dict[str, Any]


def expected_for(scorer: Scorer, instances: list[bytes]) -> Expected:
    """Score ``instances`` in this process with the same artifact (independent of the PACS path)."""
    results: dict[str, dict[str, Any]] = {}
    pairs: list[tuple[Eye, ScreeningOutcome]] = []
    for data in instances:
        header = pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True)
        [score] = scorer.score_batch([prepare_image(data, scorer.pipeline)])
        result = score_payload(score, scorer)
        results[str(header.SOPInstanceUID)] = result
        pairs.append((Eye.RIGHT if header.ImageLaterality == "R" else Eye.LEFT, ScreeningOutcome(result["outcome"])))
    model = scorer.model_identity.to_dict()
    sr_uid, series_uid = result_uids(results, model["sha256"])
    return Expected(sr_uid, series_uid, exam_result(pairs), results, model)


def sr_summary(data: bytes) -> dict[str, Any]:
    """What a reader of the SR sees (read back with pydicom/highdicom, not with the code that wrote it)."""
    import highdicom as hd

    sr = hd.sr.srread(io.BytesIO(data))
    algorithm_codes = {c.value for c in (codes.DCM.AlgorithmName, codes.DCM.AlgorithmVersion,
                                         codes.DCM.AlgorithmParameters)}
    content: Any = sr.content  # a MeasurementReport for this SR
    groups = {g.tracking_identifier: g for g in content.get_image_measurement_groups()}
    first = groups["exam"]
    summary: dict[str, Any] = {
        "dataset": sr,
        "exam_outcome": first.get_qualitative_evaluations()[0].value.value,
        "exam_sources": {s.referenced_sop_instance_uid for s in first.source_images},
        "algorithm": [(item.ConceptNameCodeSequence[0].CodeValue, item.TextValue) for item in first[0].ContentSequence
                      if item.ValueType == "TEXT" and item.ConceptNameCodeSequence[0].CodingSchemeDesignator == "DCM"
                      and item.ConceptNameCodeSequence[0].CodeValue in algorithm_codes],
        "texts": {str(item.ConceptNameCodeSequence[0].CodeMeaning): item.TextValue
                  for item in sr.ContentSequence if item.ValueType == "TEXT"},
        "eyes": {},
    }
    summary["exam_finding"] = first.finding_type.meaning
    for eye in Eye:
        group = groups[f"{eye.value} eye"]
        measures: dict[str, dict[str, float]] = {}
        thresholds: dict[str, tuple[float, str]] = {}
        units: set[str] = set()
        for m in group.get_measurements():
            if not m.referenced_images:  # the thresholds the photographs' numbers were compared with
                thresholds[m.name.value] = (float(m.value), m.unit.value)
            for ref in m.referenced_images:
                measures.setdefault(ref.referenced_sop_instance_uid, {})[m.name.value] = float(m.value)
                units.add(f"{m.name.value}:{m.unit.value}")
        summary["eyes"][eye.value] = {
            "outcome": group.get_qualitative_evaluations()[0].value.value,
            "finding": group.finding_type.meaning,
            "laterality": group.finding_sites[0].laterality.value,
            "sources": {s.referenced_sop_instance_uid for s in group.source_images},
            "measures": measures,
            "units": units,
            "thresholds": thresholds,
        }
    return summary


def check_sr_against(summary: dict[str, Any], expected: Expected, eyes: dict[str, str]) -> None:
    """The SR read back states the service's own answer: outcome per exam and eye, p̄ and MI per photograph
    (graded ones), the model, and references to exactly the source photographs. ``eyes``: SOP UID -> eye."""
    ds = summary["dataset"]
    assert ds.SOPInstanceUID == expected.sr_uid and ds.SeriesInstanceUID == expected.series_uid
    assert ds.SOPClassUID == "1.2.840.10008.5.1.4.1.1.88.33"  # Comprehensive SR
    assert ds.CompletionFlag == "COMPLETE" and ds.VerificationFlag == "UNVERIFIED"
    assert summary["exam_outcome"] == expected.exam.outcome.value
    assert summary["exam_sources"] == set(eyes)
    algorithm = summary["algorithm"]
    assert (codes.DCM.AlgorithmName.value, expected.model["name"]) in algorithm
    assert (codes.DCM.AlgorithmVersion.value, expected.model["version"]) in algorithm
    assert (codes.DCM.AlgorithmParameters.value, f"sha256={expected.model['sha256']}") in algorithm
    assert summary["texts"]["Intended use"] == expected.model["intended_use"]
    laterality = {"right": "24028007", "left": "7771000"}
    for eye in ("right", "left"):
        got = summary["eyes"][eye]
        assert got["outcome"] == expected.exam.eyes[Eye(eye)].outcome.value
        assert got["laterality"] == laterality[eye]
        assert got["sources"] == {uid for uid, e in eyes.items() if e == eye}
        graded = {uid for uid in got["sources"] if expected.results[uid]["outcome"] != "retake_ungradable"}
        assert set(got["measures"]) == graded
        for uid in graded:  # fp32 forward, batched with the other eye there and alone here: 1e-4 relative
            want = expected.results[uid]
            # p̄ in percent to four significant digits, MI to three (service.pacs.sr)
            assert got["measures"][uid]["p-referable-dr-percent"] == pytest.approx(
                100 * want["diagnosis"]["referable_dr_probability"], rel=1e-3, abs=1e-9)
            assert got["measures"][uid]["mutual-info-nat"] == pytest.approx(
                want["uncertainty"]["mutual_information"], rel=6e-3, abs=1e-12)
        if graded:
            assert got["thresholds"]["referral-threshold-percent"][0] == pytest.approx(
                100 * expected.results[next(iter(graded))]["diagnosis"]["decision_threshold"], rel=1e-3)
