"""FHIR output through the real service: ``Accept: application/fhir+json`` (or ``?format=fhir``) on
POST /v1/predict returns a FHIR R4 Bundle that fhir.resources validates and whose values are the same
numbers the JSON answer gives for the same image (the fixed posterior draws make them reproducible)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.images import blank_png, fundus_png
from tests.helpers.outcomes import OUTCOMES, build_outcome_artifact
from tests.helpers.service_process import running_service

pytest.importorskip("fhir.resources.R4B", reason="fhir.resources (dev extra) validates the FHIR output")
from fhir.resources.R4B.bundle import Bundle


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, bytes]]:
    return build_outcome_artifact(tmp_path_factory.mktemp("fhir-endpoint") / "artifact")


@pytest.fixture(scope="module")
def service(calibrated: tuple[Any, dict[str, bytes]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("fhir-endpoint-log") / "service.log"
    with running_service(calibrated[0], log) as base:
        yield base


def post(service: str, png: bytes, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{service}/v1/predict", files={"image": ("eye.png", png, "image/png")}, timeout=60,
                      **kwargs)


def by_code(bundle: dict[str, Any], code: str) -> dict[str, Any]:
    for entry in bundle["entry"]:
        codings = entry["resource"].get("code", {}).get("coding", [])
        if any(c.get("code") == code for c in codings):
            return dict(entry["resource"])
    raise AssertionError(f"no resource with code {code}")


def test_accept_header_gives_a_valid_bundle_matching_the_json_answer(service: str) -> None:
    png = fundus_png(seed=0)
    plain = post(service, png).json()
    response = post(service, png, headers={"Accept": "application/fhir+json"},
                    params={"study_id": "STUDY-7"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/fhir+json")
    bundle = response.json()
    Bundle.model_validate(bundle)
    assert bundle["type"] == "collection"

    probability = by_code(bundle, "referable-dr-probability")["valueQuantity"]
    assert probability["unit"] == "%"
    assert probability["value"] == pytest.approx(100 * plain["diagnosis"]["referable_dr_probability"], abs=1e-3)
    mi = by_code(bundle, "mutual-information")
    assert mi["valueQuantity"]["value"] == pytest.approx(plain["uncertainty"]["mutual_information"], rel=1e-6)
    assert mi["referenceRange"][0]["high"]["value"] == plain["uncertainty"]["referral_threshold_mi"]
    outcome = by_code(bundle, "screening-outcome")
    assert outcome["valueCodeableConcept"]["coding"][0]["code"] == plain["outcome"]
    assert outcome["component"][0]["valueBoolean"] is plain["refer_to_expert"]
    assert by_code(bundle, "image-gradable")["valueBoolean"] is plain["quality"]["gradable"]

    device = next(e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Device")
    assert device["identifier"][0]["value"] == plain["model"]["sha256"]
    report = next(e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == "DiagnosticReport")
    assert {"system": "urn:radial-screen:study-id", "value": "STUDY-7"} in report["identifier"]
    assert bundle["identifier"]["value"] == response.headers["x-request-id"]
    assert "NOT FOR CLINICAL USE" in report["conclusion"]


def test_format_query_gives_fhir_and_ungradable_image_is_a_retake(service: str) -> None:
    response = post(service, blank_png(), params={"format": "fhir"})
    assert response.status_code == 200
    bundle = response.json()
    Bundle.model_validate(bundle)
    outcome = by_code(bundle, "screening-outcome")
    assert outcome["valueCodeableConcept"]["coding"][0]["code"] == "retake_ungradable"
    reasons = [c["valueCodeableConcept"]["coding"][0]["code"] for c in outcome["component"][1:]]
    assert reasons == ["image_quality"]
    assert by_code(bundle, "referral-recommended")["valueBoolean"] is False
    assert "valueQuantity" not in by_code(bundle, "referable-dr-probability")  # not graded
    assert by_code(bundle, "image-gradable")["valueBoolean"] is False


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_json_fhir_and_rendered_fhir_agree_on_the_outcome(
    service: str, calibrated: tuple[Any, dict[str, bytes]], outcome: str
) -> None:
    png = calibrated[1][outcome]
    plain = post(service, png).json()
    assert plain["outcome"] == outcome
    fhir = post(service, png, headers={"Accept": "application/fhir+json"}).json()
    rendered = httpx.post(f"{service}/v1/fhir", json=plain, timeout=30)  # the on-screen JSON, not re-scored
    assert rendered.status_code == 200 and rendered.headers["content-type"].startswith("application/fhir+json")
    for bundle in (fhir, rendered.json()):
        Bundle.model_validate(bundle)
        report = next(e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == "DiagnosticReport")
        assert report["conclusionCode"][0]["coding"][0]["code"] == outcome
        # the same words as the JSON (models.outcome.wording): outcome, probability beside its threshold, uncertainty
        assert report["conclusion"].startswith(plain["words"]["outcome"])
        assert plain["words"]["probability"] in report["conclusion"]
        assert plain["words"]["uncertainty"] in report["conclusion"]
        assert by_code(bundle, "referral-recommended")["valueBoolean"] is (outcome == "refer_referable_dr")
    assert rendered.json()["identifier"]["value"] == plain["request_id"]


def test_render_refuses_an_outcome_that_contradicts_its_fields(
    service: str, calibrated: tuple[Any, dict[str, bytes]]
) -> None:
    plain = post(service, calibrated[1]["refer_referable_dr"]).json()
    plain["outcome"] = "no_referable_dr"
    response = httpx.post(f"{service}/v1/fhir", json=plain, timeout=30)
    assert response.status_code == 422
    assert "contradicts" in response.json()["detail"]


def test_errors_stay_problem_json_when_fhir_is_asked_for(service: str) -> None:
    response = post(service, b"definitely not an image", headers={"Accept": "application/fhir+json"})
    assert response.status_code == 415
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["type"].endswith("/unsupported-media-type")
