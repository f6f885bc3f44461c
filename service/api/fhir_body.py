"""The body of ``POST /v1/fhir``: a prediction document, validated off the event loop with bounded errors.

The middleware caps the body at ``FHIR_BODY_LIMIT`` (64 KiB) before it is read. Parsing, validation and
rendering then run in a worker thread, so a large invalid body never blocks ``/healthz``; a 422 lists at
most ``MAX_REPORTED_ERRORS`` entries (with ``error_count``), so an error answer is never larger than a
few KiB whatever the body holds. The ``study_id`` obeys the same rule as on ``/v1/predict``
(``check_study_id``): one validation for both.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from service.api.uploads import check_study_id
from service.errors import validation_problem
from service.schemas import PredictionResponse


def parse_prediction(body: bytes) -> dict[str, Any]:
    """The validated prediction document as JSON-ready data; raises ``ServiceProblem`` 422."""
    try:
        document = PredictionResponse.model_validate_json(body)
    except ValidationError as exc:
        raise validation_problem(exc.errors(include_url=False, include_input=False)) from None
    check_study_id(document.study_id)
    return document.model_dump(mode="json")
