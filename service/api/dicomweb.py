"""POST /dicomweb/studies (and /dicomweb/studies/{study}): DICOMweb STOW-RS into the PACS spool.

HTTP only: the body is split and each instance checked and stored by :mod:`service.pacs.stow`; grading and the SR
back to the archive are the PACS worker's (``service.pacs.worker``, started by the app when
``RADSCREEN_PACS_SPOOL_DIR`` is set). Authenticated like every other route (``X-API-Key``). The answer is the
standard STOW-RS response in the DICOM JSON model: 200 every instance stored, 202 some refused, 409 none stored,
each refusal with its Failure Reason (0x0122 not an Ophthalmic Photography instance, 0xC122 transfer syntax,
0xA900 no laterality or UIDs or another study than the URL's, 0xC000 not DICOM, 0xA700 too many photographs in
the study, or not written); a part too large for any photograph refuses the whole request (413, below).

The body is read as it streams (``request.stream()``, capped in bytes by the middleware like ``/v1/exams``) into a
:class:`service.pacs.stow.StowBody`, which spools the parts (memory up to 1 MiB, then a temporary file) and
refuses the request as soon as it breaks a bound, before any part is parsed as DICOM: 413 a part beyond
``RADSCREEN_PACS_STOW_MAX_PARTS`` or one larger than ``RADSCREEN_MAX_UPLOAD_BYTES`` (the rest of the body is not
read), 400 malformed framing (a bare LF where RFC 2046 needs CRLF, no closing delimiter), 415 a part that is not
``application/dicom``. Instances are stored only once the whole body has passed, one part in memory at a time, so
a refused request stores nothing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.http.deps import ApiKeyDep, MetricsDep, SettingsDep
from service.http.errors import ServiceProblem
from service.http.schemas import problem_responses
from service.pacs.settings import PacsSettings
from service.pacs.store import Spool
from service.pacs.stow import DICOM_JSON_MEDIA_TYPE, StowBody, StowRefused, store_all
from service.settings import Settings

router = APIRouter(tags=["dicomweb"], dependencies=[ApiKeyDep])

_SLUGS = {400: "validation-error", 413: "payload-too-large", 415: "unsupported-media-type"}  # StowRefused.status

_BODY = {"requestBody": {"required": True, "content": {
    'multipart/related; type="application/dicom"': {"schema": {"type": "string", "format": "binary"}}}}}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {DICOM_JSON_MEDIA_TYPE: {"schema": {"type": "object"}}}}
    for code, text in ((200, "Every instance stored"), (202, "Some instances stored, some refused"),
                       (409, "No instance stored"))
}


async def _stow(request: Request, metrics: Any, settings: Settings, study: str | None) -> Response:
    spool: Spool | None = request.app.state.pacs_spool
    if spool is None:
        raise ServiceProblem("not-found", 404, "DICOMweb is not enabled on this service: set RADSCREEN_PACS_SPOOL_DIR.")
    pacs: PacsSettings = request.app.state.pacs_settings
    try:
        with StowBody(request.headers.get("content-type", ""), max_parts=pacs.stow_max_parts,
                      max_part_bytes=settings.max_upload_bytes) as body:
            async for chunk in request.stream():  # capped in bytes by the middleware, like /v1/exams
                if body.in_memory:
                    body.feed(chunk)
                else:  # the parts have rolled over to a temporary file: its writes block
                    await asyncio.to_thread(body.feed, chunk)
            body.finish()
            outcome = await asyncio.to_thread(store_all, body.parts(), spool, max_bytes=settings.max_upload_bytes,
                                              max_instances=settings.max_exam_images, study_uid=study)
    except StowRefused as exc:
        raise ServiceProblem(_SLUGS[exc.status], exc.status, exc.detail) from exc
    metrics.pacs_instances.labels(path="stow", result="stored").inc(len(outcome.stored))
    metrics.pacs_instances.labels(path="stow", result="refused").inc(len(outcome.failed))
    return Response(json.dumps(outcome.body()).encode(), status_code=outcome.status, media_type=DICOM_JSON_MEDIA_TYPE)


@router.post("/dicomweb/studies", summary="DICOMweb STOW-RS: store Ophthalmic Photography instances for grading",
             responses={**_RESPONSES, **problem_responses(400, 401, 413, 415)}, openapi_extra=_BODY)
async def stow_studies(request: Request, metrics: MetricsDep, settings: SettingsDep) -> Response:
    return await _stow(request, metrics, settings, None)


@router.post("/dicomweb/studies/{study}", summary="DICOMweb STOW-RS into one study (instances of another refused)",
             responses={**_RESPONSES, **problem_responses(400, 401, 413, 415)}, openapi_extra=_BODY)
async def stow_study(study: str, request: Request, metrics: MetricsDep, settings: SettingsDep) -> Response:
    return await _stow(request, metrics, settings, study)
