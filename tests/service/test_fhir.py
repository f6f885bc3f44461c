"""FHIR rendering: hand-built prediction responses go in, a Bundle that fhir.resources (R4B) accepts
comes out, and its values say what the JSON said (outcome, probability in % or "not graded", MI against
the threshold with readable digits, quality, referral recommended only for refer_referable_dr)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from service.interop.fhir import (
    CODE_SYSTEM,
    MODEL_SHA256_SYSTEM,
    NOT_FOR_CLINICAL_USE,
    STUDY_ID_SYSTEM,
    to_fhir_bundle,
)

r4b = pytest.importorskip("fhir.resources.R4B", reason="fhir.resources (dev extra) validates the FHIR output")
from fhir.resources.R4B.bundle import Bundle  # noqa: E402

ISSUED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SHA = "ab12cd34ef56" + "0" * 52


def response(**overrides: Any) -> dict[str, Any]:
    """A /v1/predict response (refer_referable_dr, MI on a narrow posterior's 1e-6 nat scale), with
    overrides merged in at the top level."""
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
            "mutual_information": 4.2e-7,
            "predictive_entropy": 0.46,
            "expected_entropy": 0.46 - 4.2e-7,
            "unit": "nat",
            "referral_threshold_mi": 1.0087e-6,
        },
        "quality": {"gradable": True, "score": 0.92, "issues": []},
        "refer_to_expert": False,
        "referral_reasons": [],
        "outcome": "refer_referable_dr",
        "outcome_reason": "Refer to an eye-care professional: referable diabetic retinopathy",
        "timing_ms": {"decode": 4.1, "queue": 0.8, "inference": 31.0},
        "disclaimer": "Not for clinical use.",
    }
    body.update(overrides)
    return body


UNCERTAIN = {
    "uncertainty": {"mutual_information": 3.1e-6, "predictive_entropy": 0.46, "expected_entropy": 0.46,
                    "unit": "nat", "referral_threshold_mi": 1.0087e-6},
    "refer_to_expert": True, "referral_reasons": ["uncertain"], "outcome": "grader_review_uncertain",
}
UNGRADABLE = {
    "diagnosis": {"referable_dr_probability": 1.0, "label": "not_graded", "decision_threshold": 0.5},
    "quality": {"gradable": False, "score": 0.12, "issues": ["too_dark", "blurred"]},
    "refer_to_expert": True, "referral_reasons": ["image_quality"], "outcome": "retake_ungradable",
    "study_id": None,
}
CLEAR = {
    "diagnosis": {"referable_dr_probability": 0.04, "label": "non_referable", "decision_threshold": 0.5},
    "outcome": "no_referable_dr",
}


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


def report_of(bundle: dict[str, Any]) -> dict[str, Any]:
    return resources(bundle)["DiagnosticReport"][0]


def test_bundle_validates_as_fhir_r4b_and_survives_json_round_trip() -> None:
    bundle = to_fhir_bundle(response(), issued=ISSUED)
    parsed = Bundle.model_validate(json.loads(json.dumps(bundle)))
    assert parsed.type == "collection"
    kinds = [e.resource.get_resource_type() for e in parsed.entry or [] if e.resource is not None]
    assert kinds == ["DiagnosticReport", *["Observation"] * 5, "Device"]
    # every reference inside the bundle resolves to an entry's fullUrl
    full_urls = {e["fullUrl"] for e in bundle["entry"]}
    assert {r["reference"] for r in report_of(bundle)["result"]} <= full_urls
    assert all(o["device"]["reference"] in full_urls for o in resources(bundle)["Observation"])


@pytest.mark.parametrize(
    ("overrides", "outcome", "recommended", "headline"),
    [
        ({}, "refer_referable_dr", True, "Refer to an eye-care professional: referable diabetic retinopathy."),
        (UNCERTAIN, "grader_review_uncertain", False, "Human grader review: the model is uncertain"),
        (UNGRADABLE, "retake_ungradable", False, "Retake the photograph: the image cannot be graded"),
        (CLEAR, "no_referable_dr", False, "No referable diabetic retinopathy found: rescreen at the routine"),
    ],
)
def test_each_outcome_is_the_conclusion_code_and_referral_is_true_only_for_refer(
    overrides: dict[str, Any], outcome: str, recommended: bool, headline: str
) -> None:
    bundle = to_fhir_bundle(response(**overrides), issued=ISSUED)
    Bundle.model_validate(bundle)
    report = report_of(bundle)
    assert report["conclusionCode"][0]["coding"][0] == {
        "system": CODE_SYSTEM, "code": outcome, "display": report["conclusionCode"][0]["text"]}
    assert report["conclusion"].startswith(headline)
    assert observation(bundle, "screening-outcome")["valueCodeableConcept"]["coding"][0]["code"] == outcome
    referral = observation(bundle, "referral-recommended")
    assert referral["valueBoolean"] is recommended
    if outcome in ("grader_review_uncertain", "retake_ungradable"):  # false here is NOT "no referral"
        assert referral["interpretation"][0]["coding"][0]["code"] == outcome
        assert referral["note"][0]["text"].startswith("No decision by the model")
    assert "No referral" not in json.dumps(bundle)


def test_the_conclusion_words_the_result_as_every_surface_does() -> None:
    """The conclusion is models.outcome.wording's words of the body's numbers: the probability beside the referral
    threshold, the uncertainty beside the grader-review threshold; a retake names its failed checks."""
    from models.outcome.wording import nats, probability_words

    body = response()
    words = to_fhir_bundle(body, issued=ISSUED)
    conclusion = report_of(words)["conclusion"]
    d, u = body["diagnosis"], body["uncertainty"]
    assert probability_words(d["referable_dr_probability"], d["decision_threshold"]) in conclusion
    assert "above the referral threshold of 50.0 %" in conclusion and "Uncertainty (mutual information): low: " in (
        conclusion)
    assert f"grader-review threshold of {nats(u['referral_threshold_mi'])}" in conclusion
    retake = report_of(to_fhir_bundle(response(**UNGRADABLE), issued=ISSUED))["conclusion"]
    assert retake.startswith("Retake the photograph: the image cannot be graded — ") and "not graded" in retake


def test_values_match_the_json_response() -> None:
    bundle = to_fhir_bundle(response(), issued=ISSUED)
    prob = observation(bundle, "referable-dr-probability")
    ucum = "http://unitsofmeasure.org"
    assert prob["valueQuantity"] == {"value": 83.0, "unit": "%", "system": ucum, "code": "%"}
    assert prob["referenceRange"][0]["high"]["value"] == 50.0
    assert prob["interpretation"][0]["coding"][0]["code"] == "referable"

    mi = observation(bundle, "mutual-information")
    assert mi["valueQuantity"] == {"value": 4.2e-7, "unit": "nat"}
    assert mi["referenceRange"][0]["high"] == {"value": 1.0087e-6, "unit": "nat"}
    assert mi["interpretation"][0]["coding"][0]["code"] == "within-referral-threshold"

    quality = observation(bundle, "image-gradable")
    assert quality["valueBoolean"] is True
    assert quality["component"][0]["valueQuantity"]["value"] == 0.92
    outcome = observation(bundle, "screening-outcome")
    assert outcome["component"][0]["valueBoolean"] is False  # not deferred to a human
    assert all(o["status"] == "preliminary" for o in resources(bundle)["Observation"])


def test_a_model_that_defers_nothing_by_mi_says_so_instead_of_naming_an_unreachable_threshold() -> None:
    body = response()
    body["uncertainty"] = {**body["uncertainty"], "mutual_information": 0.31,
                           "referral_threshold_mi": 0.6931471805599453}  # ln 2 as JSON stores it
    mi = observation(to_fhir_bundle(body, issued=ISSUED), "mutual-information")
    assert mi["interpretation"][0]["coding"][0]["code"] == "within-referral-threshold"
    text = mi["referenceRange"][0]["text"]
    assert "defers no image for uncertainty" in text and "above it a human grader" not in text
    usual = observation(to_fhir_bundle(response(), issued=ISSUED), "mutual-information")
    assert "above it a human grader reviews the image" in usual["referenceRange"][0]["text"]


def test_mi_and_threshold_are_printed_with_significant_digits() -> None:
    conclusion = report_of(to_fhir_bundle(response(**UNCERTAIN), issued=ISSUED))["conclusion"]
    assert "(mutual information): high: 3.1e-06 nat, above the grader-review threshold of 1.01e-06 nat" in conclusion
    assert "0.0000" not in conclusion


def test_report_conclusion_states_provenance_and_not_for_clinical_use() -> None:
    report = report_of(to_fhir_bundle(response(), issued=ISSUED))
    assert report["status"] == "preliminary"
    assert "83.0 %" in report["conclusion"]
    assert "radial_vgg16_star 0.1.0 (sha256 ab12cd34ef56)" in report["conclusion"]
    assert "synthetic" in report["conclusion"]
    assert NOT_FOR_CLINICAL_USE in report["conclusion"]
    assert report["issued"] == "2026-01-02T03:04:05Z"
    assert {"system": STUDY_ID_SYSTEM, "value": "STUDY-42"} in report["identifier"]


def test_device_carries_model_identity() -> None:
    device = resources(to_fhir_bundle(response(), issued=ISSUED))["Device"][0]
    assert device["identifier"] == [{"system": MODEL_SHA256_SYSTEM, "value": SHA}]
    assert device["deviceName"] == [{"name": "radial_vgg16_star", "type": "model-name"}]
    assert device["version"] == [{"value": "0.1.0"}]
    assert device["property"][0]["valueQuantity"][0]["value"] == 16
    assert device["property"][1]["type"]["coding"][0]["code"] == "head-draws"
    assert device["property"][1]["valueQuantity"][0]["value"] == 1  # a response from before head draws
    model = {**response()["model"], "head_draws": 64}
    heads = resources(to_fhir_bundle(response(model=model), issued=ISSUED))["Device"][0]["property"][1]
    assert heads["valueQuantity"][0] == {"value": 64, "unit": "draws"}
    notes = " ".join(n["text"] for n in device["note"])
    assert "synthetic" in notes and "not for clinical use" in notes.lower()


def test_ungradable_image_is_not_graded_and_its_issues_listed() -> None:
    bundle = to_fhir_bundle(response(**UNGRADABLE), issued=ISSUED)
    Bundle.model_validate(bundle)
    quality = observation(bundle, "image-gradable")
    assert quality["valueBoolean"] is False
    assert [c["valueString"] for c in quality["component"][1:]] == ["too_dark", "blurred"]
    prob = observation(bundle, "referable-dr-probability")
    assert "valueQuantity" not in prob and "interpretation" not in prob  # 100 % is not a finding here
    assert prob["dataAbsentReason"]["text"].startswith("Not graded")
    report = report_of(bundle)
    assert "not graded" in report["conclusion"] and "100.0%" not in report["conclusion"]
    reasons = observation(bundle, "screening-outcome")["component"][1:]
    assert [c["valueCodeableConcept"]["coding"][0]["code"] for c in reasons] == ["image_quality"]
    assert all(i["system"] != STUDY_ID_SYSTEM for i in report["identifier"])  # no study id -> no identifier


def test_an_outcome_that_contradicts_its_fields_is_refused() -> None:
    with pytest.raises(ValueError, match="contradicts"):
        to_fhir_bundle(response(outcome="no_referable_dr"))  # p = 0.83 >= 0.5, confident, gradable


@pytest.mark.parametrize("label", ["non_referable", "not_graded"])
def test_a_graded_image_whose_label_contradicts_its_probability_is_refused(label: str) -> None:
    diagnosis = {"referable_dr_probability": 0.83, "label": label, "decision_threshold": 0.5}
    with pytest.raises(ValueError, match=r"label .* contradicts"):
        to_fhir_bundle(response(diagnosis=diagnosis))


def test_an_ungradable_answer_renders_whatever_its_label() -> None:
    """Answers written before the not_graded label (label by probability) still render: it is never shown."""
    diagnosis = {"referable_dr_probability": 1.0, "label": "referable", "decision_threshold": 0.5}
    old = {**UNGRADABLE, "diagnosis": diagnosis}
    assert report_of(to_fhir_bundle(response(**old), issued=ISSUED))["conclusion"] == report_of(
        to_fhir_bundle(response(**UNGRADABLE), issued=ISSUED))["conclusion"]


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

