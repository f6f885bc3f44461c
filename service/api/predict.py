"""POST /v1/predict (alias /predict) and POST /v1/predict/batch."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from models.outcome.decision import ScreeningOutcome
from service.api.fhir_body import parse_prediction
from service.api.responses import FHIR_MEDIA_TYPE, FormatQuery, fhir_response, image_result, wants_fhir
from service.api.uploads import (
    PHOTO_SCHEMA,
    STUDY_ID_MAX,
    STUDY_ID_PATTERN,
    check_study_id,
    read_uploads,
    request_body,
)
from service.http.deps import ApiKeyDep, ModelHostDep, SettingsDep
from service.http.errors import ServiceProblem, image_problem, request_id_of
from service.http.schemas import (
    EXAMPLE_PREDICTION,
    BatchItem,
    BatchResponse,
    PredictionResponse,
    problem_responses,
)
from service.inference.imaging import ImageRejected

router = APIRouter(tags=["predict"], dependencies=[ApiKeyDep])

StudyIdQuery = Annotated[
    str | None,
    Query(
        max_length=STUDY_ID_MAX,
        pattern=STUDY_ID_PATTERN,
        description="Opaque id echoed back (never logged); also accepted as a form field.",
    ),
]
_SINGLE_BODY = request_body({"image": PHOTO_SCHEMA, "study_id": {"type": "string", "maxLength": STUDY_ID_MAX}},
                            required=("image",), raw_types=("image/jpeg", "image/png", "image/tiff"))
_BATCH_BODY = request_body({"image": {"type": "array", "items": PHOTO_SCHEMA},
                            "study_id": {"type": "array", "items": {"type": "string"}}}, required=("image",))
_FHIR_CONTENT = {FHIR_MEDIA_TYPE: {"schema": {"type": "object", "description": "FHIR R4 Bundle"}}}


def _fhir(body: dict[str, Any], outcome: ScreeningOutcome | None = None) -> Response:
    def render() -> dict[str, Any]:
        from service.interop.fhir import to_fhir_bundle

        return to_fhir_bundle(body, outcome=outcome)

    try:
        return fhir_response(render)
    except UnicodeEncodeError as exc:  # render endpoint only: a lone surrogate (\ud800) in a text field
        raise ServiceProblem(
            "validation-error", 422, "The body holds text that is not valid Unicode (a lone surrogate escape)."
        ) from exc
    except ValueError as exc:  # render endpoint only: a contradicting outcome, or a number out of range
        detail = str(exc) if "contradicts" in str(exc) else "The body holds a number too large to render."
        raise ServiceProblem("validation-error", 422, detail) from exc


@router.post(
    "/v1/predict",
    response_model=PredictionResponse,
    summary="Score one fundus photograph",
    description=(
        "Send the image as multipart/form-data field `image` or as the raw body with an image/* "
        "Content-Type. Returns the referable-DR probability, its uncertainty (mutual information "
        "over the fixed posterior draws), the image-quality verdict and whether to refer to an expert."
    ),
    responses={
        200: {"content": {"application/json": {"example": EXAMPLE_PREDICTION}, **_FHIR_CONTENT}},
        **problem_responses(400, 401, 406, 413, 415, 422, 503),
    },
    openapi_extra=_SINGLE_BODY,
)
async def predict(
    request: Request,
    host: ModelHostDep,
    settings: SettingsDep,
    study_id: StudyIdQuery = None,
    format: FormatQuery = None,
) -> Any:
    scorer = host.require_ready()
    uploads, form_ids = await read_uploads(request, max_files=1, max_bytes=settings.max_upload_bytes)
    sid = check_study_id(form_ids[0] if form_ids else study_id)
    pred = await host.predict(uploads[0].read)  # admitted before the worker reads the bytes
    body = image_result(pred, scorer, sid)
    if wants_fhir(request, format):
        return _fhir({"request_id": request_id_of(request), **body}, pred.scored.score.outcome)
    return PredictionResponse(request_id=request_id_of(request), **body)


router.add_api_route(
    "/predict",
    predict,
    methods=["POST"],
    response_model=PredictionResponse,
    summary="Alias of POST /v1/predict",
    responses=problem_responses(400, 401, 413, 415, 422, 503),
    openapi_extra=_SINGLE_BODY,
)


@router.post(
    "/v1/predict/batch",
    response_model=BatchResponse,
    summary="Score several images in one request",
    description=(
        "Several multipart `image` parts; items come back in the same order, each with either a "
        "`result` or a `problem` (a bad image does not fail the others). Optional `study_id` parts "
        "must then be given once per image."
    ),
    responses=problem_responses(401, 413, 415, 422, 503),
    openapi_extra=_BATCH_BODY,
)
async def predict_batch(request: Request, host: ModelHostDep, settings: SettingsDep) -> BatchResponse:
    scorer = host.require_ready()
    uploads, study_ids = await read_uploads(request, max_files=settings.max_batch_items,
                                            max_bytes=settings.max_upload_bytes)
    if study_ids and len(study_ids) != len(uploads):
        raise ServiceProblem(
            "validation-error",
            422,
            f"Got {len(study_ids)} study_id parts for {len(uploads)} images; give one per image or none.",
        )
    ids = [check_study_id(s) for s in study_ids] or [None] * len(uploads)
    outcomes = await host.predict_many([u.read for u in uploads])  # admitted before any is read
    rid = request_id_of(request)
    items = []
    for i, (upload, outcome, sid) in enumerate(zip(uploads, outcomes, ids, strict=True)):
        if isinstance(outcome, ImageRejected):
            problem = image_problem(outcome, rid)
            items.append(BatchItem(index=i, filename=upload.filename, problem=problem))  # type: ignore[arg-type]
        else:
            items.append(BatchItem(index=i, filename=upload.filename, result=image_result(outcome, scorer, sid)))  # type: ignore[arg-type]
    return BatchResponse(request_id=rid, count=len(items), items=items)


@router.post(
    "/v1/fhir",
    summary="Render a prediction already made as a FHIR R4 Bundle (no re-scoring)",
    description=(
        "Send the JSON body that `POST /v1/predict` returned (as is); get the same result as a FHIR R4 "
        "Bundle, with the same request id. The model is not run again: this only converts the document, so "
        "the FHIR report always matches the result a user saw. The document must come from the loaded model: its "
        "`model` and both thresholds must equal this service's (422 naming the fields otherwise). The stated "
        "`outcome` (and a graded image's `label`) must agree with the fields they are derived from (422 "
        "otherwise)."
    ),
    response_class=JSONResponse,
    responses={200: {"content": _FHIR_CONTENT}, **problem_responses(401, 406, 413, 422, 503)},
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/PredictionResponse"}}}}},
)
async def render_fhir(request: Request, host: ModelHostDep) -> Response:
    scorer = host.require_ready()  # the document's provenance is checked against the loaded model
    body = await request.body()  # at most FHIR_BODY_LIMIT (the middleware's 413)
    return await asyncio.to_thread(lambda: _fhir(parse_prediction(body, scorer)))
