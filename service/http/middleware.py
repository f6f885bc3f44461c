"""ASGI middleware: request ids, access logs, request metrics, the request-body size and time limits,
client disconnects, the security headers of every answer and the refusal of ambiguous framing
(``service.http.security_headers``: a request with both Content-Length and Transfer-Encoding is answered 400).

Pure ASGI (not ``BaseHTTPMiddleware``) so the body is streamed, never buffered here.

Body limit: a declared ``Content-Length`` above the limit is answered 413 before a byte of the body
is read; a chunked body is counted as it streams and the request fails with 413 as soon as it
passes the limit. The limit is ``max_upload_bytes`` + 64 KiB of multipart overhead, times
``max_batch_items`` on the batch endpoint, ``max_exam_images`` on ``/v1/exams``, ``FHIR_BODY_LIMIT`` (64 KiB)
on ``/v1/fhir``.

Body time: uvicorn has no request-body timeout, so a stalled upload would hold its connection and
its partial body forever. Each body chunk must arrive within ``upload_idle_timeout_s`` of the
previous one and the whole body within ``upload_timeout_s`` of the request start, else 408
``request-timeout``.

Client disconnects: a client that goes away while its body is being read (stage ``upload``;
Starlette raises ``ClientDisconnect`` in the route, mapped quietly in ``service.http.errors``) or after
sending it but before the answer (stage ``processing``: a watcher sees ``http.disconnect`` and
cancels the request, so its queued images are skipped by the batcher) is counted in
``radscreen_client_disconnects_total{stage}`` and logged as the request's one info-level access
line with status 499 (nginx's "client closed request"; nothing is sent), never as an error.

Logs carry method, route template, status, latency and request id, never bodies, query strings or
study ids.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.http.errors import PROBLEM_MEDIA_TYPE, ServiceProblem, problem_body
from service.http.security_headers import framing_problem, response_headers
from service.metrics import ServiceMetrics
from service.settings import Settings

logger = logging.getLogger("service.access")

MULTIPART_OVERHEAD = 64 * 1024
# POST /v1/fhir takes a prediction document (about 2 KB): 64 KiB is room for any real one, and keeps a
# hostile body of millions of invalid items out before it is parsed.
FHIR_PATH = "/v1/fhir"
FHIR_BODY_LIMIT = 64 * 1024
_PLAIN_ROUTES = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")


CLIENT_CLOSED_REQUEST = 499  # nginx's status for "the client went away before the answer"


def _body_too_large(limit: int) -> ServiceProblem:
    return ServiceProblem("payload-too-large", 413, f"The request body exceeds the limit of {limit} bytes.")


def _body_too_slow(what: str, seconds: float, setting: str) -> ServiceProblem:
    return ServiceProblem(
        "request-timeout",
        408,
        f"The request body did not arrive in time: {what} took longer than {seconds:g} s ({setting}).",
        headers={"Connection": "close"},
    )


class _Exchange:
    """What the middleware learns about one request while the app runs."""

    def __init__(self) -> None:
        self.status = 500
        self.response_started = False
        self.body_done = False
        self.received = 0
        self.disconnected: str | None = None  # "upload" | "processing"
        self.gone = asyncio.Event()


class RequestContextMiddleware:
    """Assigns X-Request-ID, enforces the body limit, records metrics and one access-log line."""

    def __init__(self, app: ASGIApp, *, settings: Settings, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self.single_limit = settings.max_upload_bytes + MULTIPART_OVERHEAD
        self.batch_limit = (settings.max_upload_bytes + MULTIPART_OVERHEAD) * settings.max_batch_items
        self.exam_limit = (settings.max_upload_bytes + MULTIPART_OVERHEAD) * settings.max_exam_images
        self.idle_timeout = settings.upload_idle_timeout_s
        self.body_timeout = settings.upload_timeout_s

    def _limit_for(self, path: str) -> int:
        path = path.rstrip("/")
        if path == FHIR_PATH:
            return FHIR_BODY_LIMIT
        if path.endswith("/batch"):
            return self.batch_limit
        return self.exam_limit if path.endswith("/v1/exams") or path.startswith("/dicomweb/") else self.single_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        security = response_headers(scope["path"])
        incoming = headers.get("x-request-id", "")
        request_id = incoming if _SAFE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        limit = self._limit_for(scope["path"])
        ex = _Exchange()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                ex.status, ex.response_started = message["status"], True
                present = {bytes(k).lower() for k, _ in message.get("headers", [])}
                added = [(k, v) for k, v in security if k not in present]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode()), *added]
            await send(message)

        async def guarded_receive() -> Message:
            if ex.body_done:  # after the whole body only a disconnect can come: the watcher owns receive
                await ex.gone.wait()
                return {"type": "http.disconnect"}
            message = await self._receive_in_time(receive, started)
            if message["type"] == "http.request":
                ex.received += len(message.get("body", b""))
                if ex.received > limit:
                    raise _body_too_large(limit)
                if not message.get("more_body", False):
                    ex.body_done = True
                    watchers.append(asyncio.create_task(self._watch(receive, ex, app_task)))
            elif message["type"] == "http.disconnect":
                ex.disconnected = "upload"
            return message

        watchers: list[asyncio.Task[None]] = []
        app_task: asyncio.Task[None] | None = None
        try:
            declared = headers.get("content-length")
            framing = framing_problem(headers, [k.decode("latin-1").lower() for k, _ in scope["headers"]])
            if framing is not None:
                await self._reject(send_with_id, request_id, ServiceProblem("bad-request", 400, framing))
            elif declared is not None and declared.isdigit() and int(declared) > limit:
                await self._reject(send_with_id, request_id, _body_too_large(limit))
            else:
                app_task = asyncio.ensure_future(self.app(scope, guarded_receive, send_with_id))
                await self._run(app_task, ex)
        finally:
            for watcher in watchers:
                watcher.cancel()
            self._record(scope, ex, request_id, time.perf_counter() - started)

    async def _receive_in_time(self, receive: Receive, started: float) -> Message:
        """The next body message, or 408 after ``idle_timeout`` s of silence / ``body_timeout`` s in all."""
        left = self.body_timeout - (time.perf_counter() - started)
        wait = min(self.idle_timeout, left)
        try:
            async with asyncio.timeout(max(wait, 0.0)):
                return await receive()
        except TimeoutError:
            if left <= self.idle_timeout:
                raise _body_too_slow("the whole body", self.body_timeout, "RADSCREEN_UPLOAD_TIMEOUT_S") from None
            raise _body_too_slow(
                "waiting for the next part", self.idle_timeout, "RADSCREEN_UPLOAD_IDLE_TIMEOUT_S"
            ) from None

    @staticmethod
    async def _watch(receive: Receive, ex: _Exchange, app_task: asyncio.Task[None] | None) -> None:
        """After the body: wait for ``http.disconnect``; before any answer, the request is abandoned."""
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        except Exception:  # the server's receive failed: stop watching, let the request finish on its own
            logger.debug("receive failed while watching for a disconnect", exc_info=True)
            ex.gone.set()
            return
        if not ex.response_started and app_task is not None and not app_task.done():
            ex.disconnected = "processing"
            app_task.cancel()
        ex.gone.set()

    @staticmethod
    async def _run(app_task: asyncio.Task[None], ex: _Exchange) -> None:
        """Await the app; a cancellation caused by our own disconnect watcher ends the request quietly."""
        try:
            await app_task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if ex.disconnected != "processing" or (current is not None and current.cancelling()):
                raise  # the server itself is cancelling us (shutdown): let it

    def _record(self, scope: Scope, ex: _Exchange, request_id: str, elapsed: float) -> None:
        """Metrics and the one access-log line (with the disconnect stage when the client left)."""
        status = CLIENT_CLOSED_REQUEST if ex.disconnected else ex.status
        endpoint = self._endpoint(scope, status)
        self.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
        self.metrics.request_latency.labels(endpoint=endpoint).observe(elapsed)
        extra: dict[str, Any] = {
            "request_id": request_id,
            "method": scope["method"],
            "endpoint": endpoint,
            "status": status,
            "latency_ms": round(elapsed * 1e3, 2),
        }
        note = ""
        if ex.disconnected:
            self.metrics.client_disconnects.labels(stage=ex.disconnected).inc()
            extra["client_disconnected"] = ex.disconnected
            note = f" (client disconnected during {ex.disconnected}; nothing sent)"
        logger.info("%s %s %d %.1fms%s", scope["method"], endpoint, status, elapsed * 1e3, note, extra=extra)

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
