"""The one place where domain errors become HTTP problems (RFC 9457, ``application/problem+json``).

Every error body has a stable ``type`` URI under ``https://radscreen.dev/problems/``, a ``title``
fixed per type, the ``status``, a human ``detail`` and the request id (also as ``instance``,
``urn:radscreen:request:<id>``). Clients branch on ``type``, never on ``detail`` text.

| type slug               | status | raised by                                            |
| ----------------------- | ------ | ---------------------------------------------------- |
| undecodable-image       | 400    | empty, truncated or corrupt image                    |
| bad-request             | 400    | ambiguous framing (Content-Length with Transfer-Encoding, an obs-folded header) |
| image-too-small         | 400    | a side below 16 px                                   |
| extreme-aspect-ratio    | 400    | long side > 4x the short one (not a fundus frame)    |
| unauthorized            | 401    | missing/wrong X-API-Key when a key is configured     |
| not-found               | 404    | unknown path                                         |
| method-not-allowed      | 405    | wrong method                                         |
| not-acceptable          | 406    | FHIR asked for but not available                     |
| request-timeout         | 408    | body chunks too slow (upload idle / total timeout)   |
| payload-too-large       | 413    | body or image above the byte limit, too many parts   |
| image-too-large         | 413    | pixels or padded square above the limit, bomb        |
| cors-refused            | 400    | CORS preflight from an origin/method/header not allowed |
| unsupported-media-type  | 415    | not an image (PDF, text, ...), wrong content type    |
| multi-frame-image       | 415    | animated GIF/WebP/PNG, multi-page TIFF               |
| image-too-complex       | 422    | decoding beyond its work bound (JPEG scans, deadline)|
| validation-error        | 422    | missing/invalid fields                               |
| overloaded              | 503    | queue full (Retry-After)                             |
| not-ready               | 503    | model loading or failed to load (Retry-After)        |
| internal-error          | 500    | a bug; the detail never leaks internals              |
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from service.batcher import RetryLater
from service.inference.imaging import REJECTION_SLUGS, ImageRejected

logger = logging.getLogger(__name__)

PROBLEM_BASE = "https://radscreen.dev/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"

TITLES: dict[str, str] = {
    "undecodable-image": "Image cannot be decoded",
    "bad-request": "Bad request",
    "image-too-small": "Image too small",
    "extreme-aspect-ratio": "Image aspect ratio not accepted",
    "image-too-complex": "Image too costly to decode",
    "unauthorized": "Missing or invalid API key",
    "cors-refused": "Cross-origin request refused",
    "not-found": "Not found",
    "method-not-allowed": "Method not allowed",
    "not-acceptable": "Not acceptable",
    "request-timeout": "Request body too slow",
    "payload-too-large": "Payload too large",
    "image-too-large": "Image too large",
    "unsupported-media-type": "Unsupported media type",
    "multi-frame-image": "Multi-frame image",
    "validation-error": "Invalid request",
    "overloaded": "Service overloaded",
    "not-ready": "Model not ready",
    "internal-error": "Internal error",
    "http-error": "HTTP error",
}
# The HTTP status of each rejection slug of the inference core (which knows nothing of HTTP).
IMAGE_PROBLEM_STATUS: dict[str, int] = {
    "undecodable-image": 400,
    "image-too-small": 400,
    "extreme-aspect-ratio": 400,
    "payload-too-large": 413,
    "image-too-large": 413,
    "unsupported-media-type": 415,
    "multi-frame-image": 415,
    "image-too-complex": 422,
}
assert IMAGE_PROBLEM_STATUS.keys() == REJECTION_SLUGS, "every rejection slug needs its HTTP status"
_STATUS_SLUGS = {
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    413: "payload-too-large",
    415: "unsupported-media-type",
}


class ServiceProblem(Exception):  # noqa: N818 (an RFC 9457 "problem")
    """An HTTP-level refusal raised by routers and middleware (auth, content type, body size, fields)."""

    def __init__(
        self,
        slug: str,
        status: int,
        detail: str,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.slug, self.status, self.detail = slug, status, detail
        self.headers = headers or {}
        self.extra = extra or {}


def request_id_of(request: Request) -> str:
    return str(
        getattr(request.state, "request_id", "") or request.scope.get("state", {}).get("request_id", "")
    )


def problem_body(slug: str, status: int, detail: str, request_id: str, **extra: Any) -> dict[str, Any]:
    """The RFC 9457 body; ``extra`` members (e.g. ``errors``) are added as extension members."""
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + slug,
        "title": TITLES.get(slug, TITLES["http-error"]),
        "status": status,
        "detail": detail,
        "instance": f"urn:radscreen:request:{request_id}",
        "request_id": request_id,
    }
    body.update(extra)
    return body


def problem_response(
    request: Request, slug: str, status: int, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = problem_body(slug, status, detail, request_id_of(request), **extra)
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


MAX_REPORTED_ERRORS = 20  # validation errors listed in one problem; ``error_count`` gives the total


def validation_problem(raw_errors: Any) -> ServiceProblem:
    """422 ``validation-error`` listing at most ``MAX_REPORTED_ERRORS`` cleaned entries and the total count.

    A body with millions of invalid items must not become an answer millions of entries long.
    """
    errors = _clean_validation_errors(raw_errors[:MAX_REPORTED_ERRORS])
    where = ", ".join(": ".join(filter(None, (".".join(str(p) for p in e["loc"]), e["msg"]))) for e in errors[:5])
    more = f" (and {len(raw_errors) - 5} more)" if len(raw_errors) > 5 else ""
    return ServiceProblem("validation-error", 422, f"Invalid request fields: {where}{more}",
                          extra={"errors": errors, "error_count": len(raw_errors)})


def _clean_validation_errors(errors: Any) -> list[dict[str, Any]]:
    """Pydantic error entries without ``input``/``ctx`` (they could echo study_id or bytes)."""
    return [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
        for e in errors
    ]


def image_problem(exc: ImageRejected, request_id: str) -> dict[str, Any]:
    """The problem+json body of a rejected image (its status from ``IMAGE_PROBLEM_STATUS``)."""
    return problem_body(exc.problem_type, IMAGE_PROBLEM_STATUS[exc.problem_type], exc.detail, request_id)


async def _on_image_rejected(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ImageRejected)
    return problem_response(request, exc.problem_type, IMAGE_PROBLEM_STATUS[exc.problem_type], exc.detail)


async def _on_service_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceProblem)
    return problem_response(request, exc.slug, exc.status, exc.detail, exc.headers, **exc.extra)


async def _on_retry_later(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RetryLater)  # Overloaded, NotReady
    return problem_response(request, exc.slug, 503, exc.detail, {"Retry-After": str(exc.retry_after)})


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problem = validation_problem(list(exc.errors()))
    return problem_response(request, problem.slug, problem.status, problem.detail, **problem.extra)


async def _on_http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    slug = _STATUS_SLUGS.get(exc.status_code, "http-error")
    detail = exc.detail if isinstance(exc.detail, str) else TITLES.get(slug, "HTTP error")
    if exc.status_code == 404:
        detail = f"No endpoint at {request.url.path}; see /docs for the API."
    return problem_response(request, slug, exc.status_code, detail, dict(exc.headers or {}))


async def _on_client_disconnect(request: Request, exc: Exception) -> Response:
    """The client went away mid-body: nothing to answer and nothing to log as an error.

    The access log (``service.http.middleware``) records it at info level with status 499 and counts it;
    this empty response is never sent (the connection is gone).
    """
    assert isinstance(exc, ClientDisconnect)
    return Response(status_code=499)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error", extra={"request_id": request_id_of(request)})
    return problem_response(
        request,
        "internal-error",
        500,
        "The service failed to process this request; it has been logged under this request id.",
    )


def install_error_handlers(app: FastAPI) -> None:
    """Register every mapping above on ``app``."""
    app.add_exception_handler(ImageRejected, _on_image_rejected)
    app.add_exception_handler(ServiceProblem, _on_service_problem)
    app.add_exception_handler(RetryLater, _on_retry_later)
    app.add_exception_handler(ClientDisconnect, _on_client_disconnect)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    app.add_exception_handler(Exception, _on_unexpected)
