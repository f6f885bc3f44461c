"""What every scoring route answers with: one image's result body, the JSON-or-FHIR negotiation, FHIR bytes.

Shared by ``/v1/predict`` and ``/v1/exams`` (no router imports another's private names): :func:`image_result`
is one scored photograph's body with its request fields, :func:`wants_fhir` the one negotiation rule, and
:func:`fhir_response` the one way a FHIR document becomes a response (406 when this build cannot render FHIR).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import Query, Request
from fastapi.responses import Response

from service.http.errors import ServiceProblem
from service.inference.scoring import Scorer
from service.model_host import Prediction
from service.screening.payload import score_payload

FHIR_MEDIA_TYPE = "application/fhir+json"
FormatQuery = Annotated[
    Literal["json", "fhir"] | None,
    Query(description="'fhir' returns a FHIR R4 Bundle (same as Accept: application/fhir+json); 'json' returns "
                      "the JSON answer whatever the Accept header says."),
]


def wants_fhir(request: Request, fmt: str | None) -> bool:
    """FHIR when ``?format=fhir``, or with no ``format`` when the Accept header names FHIR: an explicit
    ``?format=json`` wins over the header."""
    if fmt is not None:
        return fmt == "fhir"
    return FHIR_MEDIA_TYPE in request.headers.get("accept", "")


def image_result(pred: Prediction, scorer: Scorer, study_id: str | None) -> dict[str, Any]:
    """One scored photograph's ``/v1/predict`` result (``service.screening.payload``) with its ``study_id``
    and timings."""
    body = score_payload(pred.scored.score, scorer)
    body["study_id"] = study_id
    body["timing_ms"] = {
        "decode": round(pred.decode_ms, 3),
        "queue": round(pred.scored.queue_ms, 3),
        "inference": round(pred.scored.inference_ms, 3),
    }
    return body


def fhir_response(render: Callable[[], dict[str, Any]]) -> Response:
    """``render()`` (which imports the FHIR module it needs) as an ``application/fhir+json`` response."""
    try:
        bundle = render()
    except ImportError as exc:
        raise ServiceProblem("not-acceptable", 406, "FHIR output is not available in this build.") from exc
    return Response(json.dumps(bundle, ensure_ascii=False, allow_nan=False).encode("utf-8"),
                    media_type=FHIR_MEDIA_TYPE)
