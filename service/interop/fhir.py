"""FHIR R4 rendering of a prediction, for clinical systems that ingest FHIR rather than our JSON.

Shape chosen: one ``Bundle`` of type ``collection`` (not a ``DiagnosticReport`` with contained
resources), because every part is then a first-class resource a receiving system can store and
reference on its own, and the bundle is a single POSTable document. It holds:

- ``DiagnosticReport`` — status ``preliminary`` (an automated, unreviewed result of a model that is not
  cleared for clinical use; a human must confirm it), ``conclusionCode`` = the screening outcome
  (``retake_ungradable`` / ``grader_review_uncertain`` / ``refer_referable_dr`` / ``no_referable_dr``,
  computed once in ``models.outcome.decision.screening_outcome``: the scorer's own for a fresh answer, else the
  body's after ``service.screening.payload.checked_outcome``), conclusion text stating that outcome, the probability
  beside the referral threshold and the uncertainty beside the grader-review threshold in the words every
  surface shares (``models.outcome.wording.result_words``) and the not-for-clinical-use note, ``result``
  references to the observations, ``identifier`` for the request id and (if given) the caller's opaque ``study_id``;
- ``Observation`` referable-DR probability — ``valueQuantity`` in ``%`` (UCUM), the decision threshold
  as ``referenceRange.high``, the diagnosis label as ``interpretation``; for an ungradable image no value
  at all but ``dataAbsentReason`` "not graded" (the number is not a finding);
- ``Observation`` mutual information — ``valueQuantity`` in ``nat`` (no UCUM code exists for nats, so
  unit text only), the calibrated referral threshold as ``referenceRange.high``;
- ``Observation`` image quality — ``valueBoolean`` = gradable, the score and each issue as components;
- ``Observation`` screening outcome — ``valueCodeableConcept`` = the outcome, components: deferred to a
  human (``refer_to_expert``) and its reasons as coded values with plain-word displays;
- ``Observation`` referral recommended — ``valueBoolean`` true only for ``refer_referable_dr``; for
  ``grader_review_uncertain`` / ``retake_ungradable`` it is false with an ``interpretation`` and a note
  saying the decision is pending a human grader / a new photograph (false is then NOT "no referral");
- ``Device`` — the model: name, version, sha256 of its artifact manifest as identifier, MC samples,
  training data and intended use.

Codes that no public terminology covers live in our own code system :data:`CODE_SYSTEM`. The four
screening outcomes are coded there too: no SNOMED CT concept for "human grader review because the model is
uncertain" or "retake the photograph" could be verified in this project, and mixing verified public codes
for two outcomes with local ones for the other two would make the value set uneven to consume; the
outcome's ``display`` and ``text`` carry the plain words. References
between entries are ``urn:uuid:`` full URLs derived deterministically from the request id, so the same
response always renders to the same bundle (auditable; a retried upload is recognisably a duplicate).

Validated in tests against ``fhir.resources.R4B`` (FHIR 4.3.0; the resources used here are unchanged
from R4 4.0.1). Example::

    from service.interop.fhir import to_fhir_bundle
    bundle = to_fhir_bundle(response_json)   # dict, ready for json.dumps (the body's outcome is checked)
    bundle = to_fhir_bundle(body, outcome=score.outcome)   # an answer just scored: its outcome as is
"""

from __future__ import annotations

import html
import uuid
from datetime import UTC, datetime
from typing import Any

from models.outcome.decision import OUTCOME_TEXT, ScreeningOutcome, defers_by_uncertainty, is_uncertain
from service.screening.payload import MI_THRESHOLD_FIELD, checked_outcome, require_field, words_of

FHIR_MEDIA_TYPE = "application/fhir+json"
CODE_SYSTEM = "urn:radial-screen:fhir:codes"
STUDY_ID_SYSTEM = "urn:radial-screen:study-id"
REQUEST_ID_SYSTEM = "urn:radial-screen:request-id"
MODEL_SHA256_SYSTEM = "urn:radial-screen:model-sha256"
UCUM = "http://unitsofmeasure.org"
OBSERVATION_CATEGORY = "http://terminology.hl7.org/CodeSystem/observation-category"
SNOMED = "http://snomed.info/sct"
_UUID_NAMESPACE = uuid.UUID("6f1d3d4e-6a0e-4c7b-9a53-2f7d0c1b9e11")  # fixed: stable ids across restarts

NOT_FOR_CLINICAL_USE = (
    "NOT FOR CLINICAL USE: research prototype; a qualified clinician must make every diagnostic decision."
)

# Plain-word reasons, shared with the dashboard wording.
REASON_TEXT: dict[str, str] = {
    "uncertain": "the model is uncertain about this image",
    "image_quality": "image quality too low to grade",
}
DATA_ABSENT = "http://terminology.hl7.org/CodeSystem/data-absent-reason"
# What the referral-recommended Observation says when it is false because a human must decide.
PENDING_TEXT: dict[str, str] = {
    "grader_review_uncertain": "No decision by the model: a human grader must review this image",
    "retake_ungradable": "No decision by the model: retake the photograph, then screen again",
    "no_referable_dr": "No referable diabetic retinopathy found: rescreen at the routine interval",
}


def _code(code: str, display: str) -> dict[str, Any]:
    """A CodeableConcept from our own code system."""
    return {"coding": [{"system": CODE_SYSTEM, "code": code, "display": display}], "text": display}


def _percent(fraction: float) -> dict[str, Any]:
    """A UCUM percent Quantity from a fraction in [0, 1]."""
    return {"value": round(100.0 * fraction, 4), "unit": "%", "system": UCUM, "code": "%"}


def _urn(request_id: str, part: str) -> str:
    """Deterministic ``urn:uuid:`` for one bundle entry of one request."""
    return f"urn:uuid:{uuid.uuid5(_UUID_NAMESPACE, f'{request_id}/{part}')}"


def _device(model: dict[str, Any]) -> dict[str, Any]:
    """The model as a FHIR Device: name, version, sha256 identifier, intended use as a note."""
    sha = str(model.get("sha256", ""))
    device: dict[str, Any] = {
        "resourceType": "Device",
        "identifier": [{"system": MODEL_SHA256_SYSTEM, "value": sha}] if sha else [],
        "status": "active",
        "deviceName": [{"name": str(model.get("name", "unknown")), "type": "model-name"}],
        "type": _code("bayesian-dr-screening-model", "Uncertainty-aware DR screening model (software)"),
        "version": [{"value": str(model.get("version", "unknown"))}],
        "note": [
            {"text": f"Intended use: {model.get('intended_use', 'not stated')}"},
            {"text": f"Training data: {model.get('training_data', 'not stated')}. {NOT_FOR_CLINICAL_USE}"},
        ],
    }
    if "mc_samples" in model:
        device["property"] = [
            {
                "type": _code("mc-samples", "Fixed posterior draws per prediction"),
                "valueQuantity": [{"value": int(model["mc_samples"]), "unit": "draws"}],
            },
            {
                "type": _code("head-draws", "Draws of the final layer per posterior draw"),
                "valueQuantity": [{"value": int(model.get("head_draws", 1)), "unit": "draws"}],
            },
            {
                "type": _code("views", "Orientations each image is scored in (2: also mirrored, draws pooled)"),
                "valueQuantity": [{"value": 2 if model.get("test_time_flip") else 1, "unit": "views"}],
            },
        ]
        if "passes" in model:
            device["property"] += [
                {
                    "type": _code("passes", "Forward passes of the network per image (draws x views)"),
                    "valueQuantity": [{"value": int(model["passes"]), "unit": "passes"}],
                },
                {
                    "type": _code("pass-budget", "The most forward passes per image the model may be served with"),
                    "valueQuantity": [{"value": int(model.get("pass_budget", model["passes"])), "unit": "passes"}],
                },
            ]
    if not device["identifier"]:
        del device["identifier"]
    return device


def _observation(
    code: dict[str, Any], device_ref: str, issued: str, **value: Any
) -> dict[str, Any]:
    """An Observation skeleton (status preliminary, imaging category, device-made) plus its value."""
    return {
        "resourceType": "Observation",
        "status": "preliminary",
        "category": [
            {"coding": [{"system": OBSERVATION_CATEGORY, "code": "imaging", "display": "Imaging"}]}
        ],
        "code": code,
        "issued": issued,
        "device": {"reference": device_ref},
        **value,
    }


def _nat(x: float) -> str:
    """A nat value with 3 significant digits, readable at every scale (1.42e-13, 1.01e-06, 0.0123)."""
    return f"{x:.3g}"


def _observations(body: dict[str, Any], outcome: ScreeningOutcome, device_ref: str,
                  issued: str) -> dict[str, dict[str, Any]]:
    """The Observations keyed by entry name (outcome, referral, probability, mi, quality)."""
    return {
        "outcome": _outcome_observation(body, outcome, device_ref, issued),
        "referral": _referral_observation(outcome, device_ref, issued),
        "probability": _probability_observation(body["diagnosis"], outcome, device_ref, issued),
        "mi": _uncertainty_observation(body["uncertainty"], device_ref, issued),
        "quality": _quality_observation(body["quality"], device_ref, issued),
    }


def _outcome_observation(body: dict[str, Any], outcome: ScreeningOutcome, device_ref: str,
                         issued: str) -> dict[str, Any]:
    """The screening outcome, whether the model defers the image to a human, and why."""
    reasons = [str(r) for r in body.get("referral_reasons") or []]
    return _observation(
        _code("screening-outcome", "Diabetic retinopathy screening outcome"),
        device_ref,
        issued,
        valueCodeableConcept=_code(outcome.value, OUTCOME_TEXT[outcome]),
        component=[
            {
                "code": _code("deferred-to-human", "The model defers this image to a human"),
                "valueBoolean": bool(require_field(body, "refer_to_expert")),
            },
            *(
                {
                    "code": _code("deferral-reason", "Reason the model defers to a human"),
                    "valueCodeableConcept": _code(r, REASON_TEXT.get(r, r.replace("_", " "))),
                }
                for r in reasons
            ),
        ],
    )


def _referral_observation(outcome: ScreeningOutcome, device_ref: str, issued: str) -> dict[str, Any]:
    """Whether a referral is recommended; when not, what the outcome asks for instead."""
    recommended = outcome is ScreeningOutcome.REFER_REFERABLE_DR
    return _observation(
        _code("referral-recommended", "Referral to an eye-care professional recommended"),
        device_ref,
        issued,
        valueBoolean=recommended,
        **(
            {}
            if recommended
            else {
                "interpretation": [_code(outcome.value, OUTCOME_TEXT[outcome])],
                "note": [{"text": PENDING_TEXT[outcome.value]}],
            }
        ),
    )


def _probability_observation(diagnosis: dict[str, Any], outcome: ScreeningOutcome, device_ref: str,
                             issued: str) -> dict[str, Any]:
    """The referable-DR probability beside its decision threshold; absent (not performed) for an ungradable
    image, whose probability is no finding."""
    label = str(diagnosis["label"])
    if outcome is not ScreeningOutcome.RETAKE_UNGRADABLE:
        value: dict[str, Any] = {
            "valueQuantity": _percent(float(diagnosis["referable_dr_probability"])),
            "interpretation": [_code(label, label.replace("_", " ").capitalize())],
        }
    else:
        value = {
            "dataAbsentReason": {
                "coding": [{"system": DATA_ABSENT, "code": "not-performed", "display": "Not Performed"}],
                "text": "Not graded: the image is ungradable, so the model's probability is not a finding",
            }
        }
    return _observation(
        _code("referable-dr-probability", "Probability of referable diabetic retinopathy"),
        device_ref,
        issued,
        **value,
        referenceRange=[
            {
                "high": _percent(float(diagnosis["decision_threshold"])),
                "text": "Decision threshold: at or above it the diagnosis label is 'referable'",
            }
        ],
    )


def _uncertainty_observation(unc: dict[str, Any], device_ref: str, issued: str) -> dict[str, Any]:
    """The mutual information beside the grader-review threshold (or the statement that this model defers no
    image for uncertainty)."""
    mi = float(unc["mutual_information"])
    referral_threshold_mi = float(unc[MI_THRESHOLD_FIELD])
    unit = str(unc.get("unit", "nat"))
    return _observation(
        _code("mutual-information", "Model uncertainty (mutual information, epistemic)"),
        device_ref,
        issued,
        valueQuantity={"value": mi, "unit": unit},
        interpretation=[
            _code("above-referral-threshold", "Above the calibrated threshold: grader review")
            if is_uncertain(mi, referral_threshold_mi)
            else _code("within-referral-threshold", "Within the calibrated threshold")
        ],
        referenceRange=[
            {
                "high": {"value": referral_threshold_mi, "unit": unit},
                "text": f"Calibrated threshold {_nat(referral_threshold_mi)} {unit}: "
                        "above it a human grader reviews the image"
                if defers_by_uncertainty(referral_threshold_mi)
                else f"Threshold {_nat(referral_threshold_mi)} {unit} (ln 2, the largest possible): this model "
                     "defers no image for uncertainty, since on its validation eyes deferring by it answered no "
                     "more eyes automatically at the same sensitivity; reported for monitoring only",
            }
        ],
    )


def _quality_observation(quality: dict[str, Any], device_ref: str, issued: str) -> dict[str, Any]:
    """Whether the image is gradable, with its quality score and issues."""
    components: list[dict[str, Any]] = []
    if quality.get("score") is not None:
        components.append(
            {
                "code": _code("image-quality-score", "Image quality score (0-1)"),
                "valueQuantity": {"value": float(quality["score"]), "unit": "1", "system": UCUM, "code": "1"},
            }
        )
    for issue in quality.get("issues") or []:
        components.append({"code": _code("image-quality-issue", "Image quality issue"), "valueString": str(issue)})
    return _observation(
        _code("image-gradable", "Fundus image gradable"),
        device_ref,
        issued,
        valueBoolean=bool(quality["gradable"]),
        **({"component": components} if components else {}),
    )


def _conclusion(body: dict[str, Any], outcome: ScreeningOutcome) -> str:
    """One paragraph: the answer's words (models/outcome/wording.py: outcome, probability beside the referral
    threshold or "not graded", uncertainty beside the grader-review threshold), provenance,
    not-for-clinical-use."""
    m = body.get("model", {})
    words = words_of(body, outcome)
    return (
        f"{words.outcome}. Referable-DR probability: {words.probability}. "
        f"Uncertainty (mutual information): {words.uncertainty}. "
        f"Model {m.get('name', '?')} {m.get('version', '?')} (sha256 {str(m.get('sha256', ''))[:12]}), "
        f"trained on {m.get('training_data', 'unstated')} data. {NOT_FOR_CLINICAL_USE}"
    )


def to_fhir_bundle(body: dict[str, Any], *, outcome: ScreeningOutcome | None = None,
                   issued: datetime | None = None) -> dict[str, Any]:
    """Render one ``/v1/predict`` response dict as a FHIR R4 ``Bundle`` (type ``collection``).

    ``outcome``: the scorer's outcome of an answer just scored in this process; ``None`` (a body from
    outside) takes the body's stated outcome once ``service.screening.payload.checked_outcome`` has verified it.
    ``issued`` stamps the report and observations (default: now, UTC); pass it for reproducible output.
    Raises ``ValueError`` naming the missing field when ``body`` is not a prediction response, or when its
    stated outcome contradicts its numbers.
    """
    if not isinstance(body, dict):
        raise ValueError(f"expected the prediction response as a dict, got {type(body).__name__}")
    request_id = str(body.get("request_id") or uuid.uuid4())
    stamp = stamp_of(issued)
    model = require_field(body, "model")
    outcome = checked_outcome(body) if outcome is None else outcome
    device_ref = _urn(request_id, "device")
    observations = _observations(body, outcome, device_ref, stamp)
    conclusion = _conclusion(body, outcome)
    identifiers = [{"system": REQUEST_ID_SYSTEM, "value": request_id}]
    if body.get("study_id"):
        identifiers.append({"system": STUDY_ID_SYSTEM, "value": str(body["study_id"])})
    report = screening_report(
        request_id, stamp, identifiers, observations,
        code=("referable-dr-screening", "Referable DR screen"),
        text="Automated referable diabetic retinopathy screening (research prototype)",
        conclusion=conclusion, conclusion_code=_code(outcome.value, OUTCOME_TEXT[outcome]),
    )
    return collection_bundle(request_id, stamp, report, observations, model)


def screening_report(request_id: str, stamp: str, identifiers: list[dict[str, str]], observations: dict[str, Any], *,
                     code: tuple[str, str], text: str, conclusion: str, conclusion_code: dict[str, Any]
                     ) -> dict[str, Any]:
    """The preliminary DiagnosticReport of one answer (one image or one exam): SNOMED CT 4855003 plus our
    ``code``, the observations as results, the conclusion in words and as a code, and its narrative."""
    return {
        "resourceType": "DiagnosticReport",
        "identifier": identifiers,
        "status": "preliminary",
        "code": {
            "coding": [
                {"system": SNOMED, "code": "4855003", "display": "Retinopathy due to diabetes mellitus"},
                {"system": CODE_SYSTEM, "code": code[0], "display": code[1]},
            ],
            "text": text,
        },
        "issued": stamp,
        "result": [{"reference": _urn(request_id, key)} for key in observations],
        "conclusion": conclusion,
        "conclusionCode": [conclusion_code],
        "text": narrative(conclusion),
    }


def stamp_of(issued: datetime | None) -> str:
    """The FHIR instant of ``issued`` (default: now), UTC, to the second: ``2026-01-02T03:04:05Z``."""
    return (issued or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def narrative(text: str) -> dict[str, str]:
    """A generated XHTML narrative holding ``text`` (escaped)."""
    return {"status": "generated", "div": f'<div xmlns="http://www.w3.org/1999/xhtml"><p>{html.escape(text)}</p></div>'}


def collection_bundle(request_id: str, stamp: str, report: dict[str, Any], observations: dict[str, dict[str, Any]],
                      model: dict[str, Any]) -> dict[str, Any]:
    """The ``collection`` Bundle of one answer: the report, its observations (by entry name), the model's Device."""
    entries: list[dict[str, Any]] = [{"fullUrl": _urn(request_id, "report"), "resource": report}]
    entries += [{"fullUrl": _urn(request_id, key), "resource": obs} for key, obs in observations.items()]
    entries.append({"fullUrl": _urn(request_id, "device"), "resource": _device(model)})
    return {
        "resourceType": "Bundle",
        "identifier": {"system": REQUEST_ID_SYSTEM, "value": request_id},
        "type": "collection",
        "timestamp": stamp,
        "entry": entries,
    }
