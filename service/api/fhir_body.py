"""The body of ``POST /v1/fhir``: a prediction document, validated off the event loop with bounded errors.

The middleware caps the body at ``FHIR_BODY_LIMIT`` (64 KiB) before it is read. Parsing, validation and
rendering then run in a worker thread, so a large invalid body never blocks ``/healthz``; a 422 lists at
most ``MAX_REPORTED_ERRORS`` entries (with ``error_count``), so an error answer is never larger than a
few KiB whatever the body holds. The ``study_id`` obeys the same rule as on ``/v1/predict``
(``check_study_id``): one validation for both.

**Provenance.** The rendered report names a model (the FHIR ``Device``: name, version, sha256) and states
the thresholds its outcome was decided with, so a document is rendered only when it was made by the model
this service has loaded: every field of its ``model`` and both thresholds (``diagnosis.decision_threshold``,
``uncertainty.referral_threshold_mi``) must equal the loaded model's exactly (JSON carries Python floats
exactly). A document of another model, or with forged thresholds, is refused with 422 naming the fields that
differ, never rendered as though this model had made it; the outcome is then re-derived with the loaded
model's thresholds (``service.screening.payload.checked_outcome``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from service.api.uploads import check_study_id
from service.http.errors import ServiceProblem, validation_problem
from service.http.schemas import PredictionResponse
from service.screening.payload import MI_THRESHOLD_FIELD

if TYPE_CHECKING:
    from service.inference.scoring import Scorer


def provenance_mismatches(document: dict[str, Any], scorer: Scorer) -> list[str]:
    """The fields of ``document`` (a validated prediction, JSON-ready) that differ from the loaded model's."""
    loaded = scorer.model_identity.to_dict()
    posted = document["model"]
    fields = [f"model.{key}" for key in loaded if posted.get(key) != loaded[key]]
    if document["diagnosis"]["decision_threshold"] != scorer.calibration.decision_threshold:
        fields.append("diagnosis.decision_threshold")
    if document["uncertainty"][MI_THRESHOLD_FIELD] != scorer.calibration.referral_threshold_mi:
        fields.append(f"uncertainty.{MI_THRESHOLD_FIELD}")
    return fields


def parse_prediction(body: bytes, scorer: Scorer) -> dict[str, Any]:
    """The validated prediction document as JSON-ready data, made by the loaded model (module docstring);
    raises ``ServiceProblem`` 422."""
    try:
        document = PredictionResponse.model_validate_json(body)
    except ValidationError as exc:
        raise validation_problem(exc.errors(include_url=False, include_input=False)) from None
    check_study_id(document.study_id)
    data = document.model_dump(mode="json")
    mismatches = provenance_mismatches(data, scorer)
    if mismatches:
        model = scorer.model_identity
        raise ServiceProblem(
            "validation-error", 422,
            f"The document was not made by the loaded model ({model.name} {model.version}, sha256 "
            f"{model.sha256[:12]}): {', '.join(mismatches)} differ. Render it with the service that scored it, "
            "or score the photograph again here.",
            extra={"errors": [{"loc": ["body", *f.split(".")], "msg": "differs from the loaded model",
                               "type": "provenance_mismatch"} for f in mismatches]},
        )
    return data
