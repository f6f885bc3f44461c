"""FHIR rendering: hand-built prediction responses go in, a Bundle that fhir.resources (R4B) accepts
comes out, and its values say what the JSON said (probability in %, MI against the threshold, quality,
referral)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from service.fhir import (
    CODE_SYSTEM,
    MODEL_SHA256_SYSTEM,
    NOT_FOR_CLINICAL_USE,
    STUDY_ID_SYSTEM,
    to_fhir_batch_bundle,
    to_fhir_bundle,
)

r4b = pytest.importorskip("fhir.resources.R4B", reason="fhir.resources (dev extra) validates the FHIR output")
from fhir.resources.R4B.bundle import Bundle  # noqa: E402

ISSUED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SHA = "ab12cd34ef56" + "0" * 52


def response(**overrides: Any) -> dict[str, Any]:
    """A /v1/predict response as docs/architecture.md §6 describes it, with overrides merged in at the top level."""
    body: dict[str, Any] = {
        "request_id": "req-0001",
        "study_id": "STUDY-42",
        "model": {
            "name": "radial_vgg16_star",
            "version": "0.1.0",
            "sha256": SHA,
            "mc_samples": 16,
            "training_data": "synthetic",
            "intended_use": "Research demonstration of uncertainty-aware DR referral; not for clinical use.",
        },
        "diagnosis": {"referable_dr_probability": 0.83, "label": "referable", "decision_threshold": 0.5},
        "uncertainty": {
            "mutual_information": 0.11,
            "predictive_entropy": 0.46,
            "expected_entropy": 0.35,
            "unit": "nat",
            "referral_threshold": 0.09,
        },
        "quality": {"gradable": True, "score": 0.92, "issues": []},
        "refer_to_expert": True,
        "referral_reasons": ["uncertain"],
        "timing_ms": {"decode": 4.1, "queue": 0.8, "inference": 31.0},
        "disclaimer": "Not for clinical use.",
    }
    body.update(overrides)
    return body


def resources(bundle: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Bundle entries grouped by resourceType."""
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in bundle["entry"]:
        out.setdefault(entry["resource"]["resourceType"], []).append(entry["resource"])
    return out


def observation(bundle: dict[str, Any], code: str) -> dict[str, Any]:
    """The Observation whose code (our code system) is ``code``."""
    for obs in resources(bundle)["Observation"]:
        if any(c["system"] == CODE_SYSTEM and c["code"] == code for c in obs["code"]["coding"]):
            return obs
    raise AssertionError(f"no Observation with code {code}")


def test_bundle_validates_as_fhir_r4b_and_survives_json_round_trip() -> None:
    bundle = to_fhir_bundle(response(), issued=ISSUED)
    parsed = Bundle.model_validate(json.loads(json.dumps(bundle)))
    assert parsed.type == "collection"
    kinds = [e.resource.get_resource_type() for e in parsed.entry or [] if e.resource is not None]
    assert kinds == ["DiagnosticReport", "Observation", "Observation", "Observation", "Observation", "Device"]
    # every reference inside the bundle resolves to an entry's fullUrl
    full_urls = {e["fullUrl"] for e in bundle["entry"]}
    report = resources(bundle)["DiagnosticReport"][0]
    assert {r["reference"] for r in report["result"]} <= full_urls
    assert all(o["device"]["reference"] in full_urls for o in resources(bundle)["Observation"])


def test_values_match_the_json_response() -> None:
    bundle = to_fhir_bundle(response(), issued=ISSUED)
    prob = observation(bundle, "referable-dr-probability")
    ucum = "http://unitsofmeasure.org"
    assert prob["valueQuantity"] == {"value": 83.0, "unit": "%", "system": ucum, "code": "%"}
    assert prob["referenceRange"][0]["high"]["value"] == 50.0
    assert prob["interpretation"][0]["coding"][0]["code"] == "referable"

    mi = observation(bundle, "mutual-information")
    assert mi["valueQuantity"] == {"value": 0.11, "unit": "nat"}
    assert mi["referenceRange"][0]["high"] == {"value": 0.09, "unit": "nat"}
    assert mi["interpretation"][0]["coding"][0]["code"] == "above-referral-threshold"

    quality = observation(bundle, "image-gradable")
    assert quality["valueBoolean"] is True
    assert quality["component"][0]["valueQuantity"]["value"] == 0.92

    referral = observation(bundle, "refer-to-expert")
    assert referral["valueBoolean"] is True
    assert referral["component"][0]["valueCodeableConcept"]["coding"][0]["code"] == "uncertain"
    assert referral["note"][0]["text"] == "Refer: the model is uncertain about this image"
    assert all(o["status"] == "preliminary" for o in resources(bundle)["Observation"])


def test_report_conclusion_states_decision_provenance_and_not_for_clinical_use() -> None:
    report = resources(to_fhir_bundle(response(), issued=ISSUED))["DiagnosticReport"][0]
    assert report["status"] == "preliminary"
    assert report["conclusion"].startswith("Refer: the model is uncertain about this image.")
    assert "83.0%" in report["conclusion"]
    assert "radial_vgg16_star 0.1.0 (sha256 ab12cd34ef56)" in report["conclusion"]
    assert "synthetic" in report["conclusion"]
    assert NOT_FOR_CLINICAL_USE in report["conclusion"]
    assert report["conclusionCode"][0]["coding"][0]["code"] == "refer"
    assert report["issued"] == "2026-01-02T03:04:05Z"
    assert {"system": STUDY_ID_SYSTEM, "value": "STUDY-42"} in report["identifier"]


def test_device_carries_model_identity() -> None:
    device = resources(to_fhir_bundle(response(), issued=ISSUED))["Device"][0]
    assert device["identifier"] == [{"system": MODEL_SHA256_SYSTEM, "value": SHA}]
    assert device["deviceName"] == [{"name": "radial_vgg16_star", "type": "model-name"}]
    assert device["version"] == [{"value": "0.1.0"}]
    assert device["property"][0]["valueQuantity"][0]["value"] == 16
    notes = " ".join(n["text"] for n in device["note"])
    assert "synthetic" in notes and "not for clinical use" in notes.lower()


def test_ungradable_image_is_referred_for_quality_with_issues_listed() -> None:
    body = response(
        quality={"gradable": False, "score": 0.12, "issues": ["too dark", "out of focus"]},
        refer_to_expert=True,
        referral_reasons=["image_quality"],
        study_id=None,
    )
    bundle = to_fhir_bundle(body, issued=ISSUED)
    Bundle.model_validate(bundle)
    quality = observation(bundle, "image-gradable")
    assert quality["valueBoolean"] is False
    assert [c["valueString"] for c in quality["component"][1:]] == ["too dark", "out of focus"]
    report = resources(bundle)["DiagnosticReport"][0]
    assert report["conclusion"].startswith("Refer: image quality too low to grade.")
    assert all(i["system"] != STUDY_ID_SYSTEM for i in report["identifier"])  # no study id -> no identifier


def test_confident_gradable_image_is_not_referred() -> None:
    body = response(
        diagnosis={"referable_dr_probability": 0.04, "label": "non_referable", "decision_threshold": 0.5},
        uncertainty={"mutual_information": 0.01, "unit": "nat", "referral_threshold": 0.09},
        refer_to_expert=False,
        referral_reasons=[],
    )
    bundle = to_fhir_bundle(body, issued=ISSUED)
    Bundle.model_validate(bundle)
    assert observation(bundle, "refer-to-expert")["valueBoolean"] is False
    assert "component" not in observation(bundle, "refer-to-expert")
    assert observation(bundle, "mutual-information")["interpretation"][0]["coding"][0]["code"] == (
        "within-referral-threshold"
    )
    report = resources(bundle)["DiagnosticReport"][0]
    assert report["conclusion"].startswith("No referral")
    assert report["conclusionCode"][0]["coding"][0]["code"] == "no-referral"


def test_output_is_deterministic_for_a_request_and_distinct_across_requests() -> None:
    a = to_fhir_bundle(response(), issued=ISSUED)
    assert a == to_fhir_bundle(copy.deepcopy(response()), issued=ISSUED)
    b = to_fhir_bundle(response(request_id="req-0002"), issued=ISSUED)
    assert {e["fullUrl"] for e in a["entry"]}.isdisjoint({e["fullUrl"] for e in b["entry"]})


def test_missing_fields_raise_a_named_error() -> None:
    body = response()
    del body["uncertainty"]
    with pytest.raises(ValueError, match="'uncertainty'"):
        to_fhir_bundle(body)
    with pytest.raises(ValueError, match="dict"):
        to_fhir_bundle([])  # type: ignore[arg-type]


def test_batch_bundle_keeps_order_and_skips_error_items() -> None:
    items = [response(request_id="r1"), {"error": {"status": 400}}, response(request_id="r2")]
    bundle = to_fhir_batch_bundle(items, issued=ISSUED)
    Bundle.model_validate(bundle)
    reports = resources(bundle)["DiagnosticReport"]
    assert [r["identifier"][0]["value"] for r in reports] == ["r1", "r2"]
    assert len(bundle["entry"]) == 12
