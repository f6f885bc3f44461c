"""ASGI middleware: request ids, access logs, request metrics and the request-body size limit.

Pure ASGI (not ``BaseHTTPMiddleware``) so the body is streamed, never buffered here.

Body limit: a declared ``Content-Length`` above the limit is answered 413 before a byte of the body
is read; a chunked body is counted as it streams and the request fails with 413 as soon as it
passes the limit. The limit is ``max_upload_bytes`` + 64 KiB of multipart overhead, times
``max_batch_items`` on the batch endpoint.

Logs carry method, route template, status, latency and request id, never bodies, query strings or
study ids.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import PROBLEM_MEDIA_TYPE, ServiceProblem, problem_body
from service.metrics import ServiceMetrics
from service.settings import Settings

logger = logging.getLogger("service.access")

MULTIPART_OVERHEAD = 64 * 1024
_PLAIN_ROUTES = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")


def _body_too_large(limit: int) -> ServiceProblem:
    return ServiceProblem("payload-too-large", 413, f"The request body exceeds the limit of {limit} bytes.")


class RequestContextMiddleware:
    """Assigns X-Request-ID, enforces the body limit, records metrics and one access-log line."""

    def __init__(self, app: ASGIApp, *, settings: Settings, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self.single_limit = settings.max_upload_bytes + MULTIPART_OVERHEAD
        self.batch_limit = (settings.max_upload_bytes + MULTIPART_OVERHEAD) * settings.max_batch_items

    def _limit_for(self, path: str) -> int:
        return self.batch_limit if path.rstrip("/").endswith("/batch") else self.single_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        incoming = headers.get("x-request-id", "")
        request_id = incoming if _SAFE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        limit = self._limit_for(scope["path"])

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _body_too_large(limit)
            return message

        try:
            declared = headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                await self._reject(send_with_id, request_id, _body_too_large(limit))
            else:
                await self.app(scope, counting_receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            endpoint = self._endpoint(scope, status)
            self.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
            self.metrics.request_latency.labels(endpoint=endpoint).observe(elapsed)
            logger.info(
                "%s %s %d %.1fms",
                scope["method"],
                endpoint,
                status,
                elapsed * 1e3,
                extra={
                    "request_id": request_id,
                    "method": scope["method"],
                    "endpoint": endpoint,
                    "status": status,
                    "latency_ms": round(elapsed * 1e3, 2),
                },
            )

    @staticmethod
    def _endpoint(scope: Scope, status: int) -> str:
        """Route template for metrics/logs; never a raw unmatched path (unbounded label values)."""
        route = scope.get("route")
        if getattr(route, "path", None):
            return str(route.path)  # type: ignore[union-attr]
        if scope["path"].startswith("/static/"):
            return "/static"
        return scope["path"] if status not in (404, 405) and scope["path"] in _PLAIN_ROUTES else "unmatched"

    @staticmethod
    async def _reject(send: Send, request_id: str, problem: ServiceProblem) -> None:
        body = json.dumps(problem_body(problem.slug, problem.status, problem.detail, request_id)).encode()
        headers: list[Any] = [
            (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": problem.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
