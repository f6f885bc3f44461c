"""CORS whose refusal of a preflight is an RFC 9457 problem like every other error of the service.

Starlette's ``CORSMiddleware`` answers a disallowed preflight (origin, method or header not allowed)
with a ``text/plain`` 400 "Disallowed CORS origin"; here the same 400, with the same CORS headers, is
``application/problem+json`` of type ``cors-refused`` carrying the request id.
"""

from __future__ import annotations

import json

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from service.http.errors import PROBLEM_MEDIA_TYPE, problem_body


class _ProblemPreflight(Response):
    """A 400 problem+json whose request id is read from the scope when it is sent."""

    media_type = PROBLEM_MEDIA_TYPE

    def __init__(self, detail: str, headers: dict[str, str]) -> None:
        super().__init__(b"", status_code=400, headers=headers)
        self.detail = detail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = str(scope.get("state", {}).get("request_id", ""))
        self.body = json.dumps(problem_body("cors-refused", 400, self.detail, request_id)).encode()
        self.headers["content-length"] = str(len(self.body))
        await super().__call__(scope, receive, send)


class ProblemCORSMiddleware(CORSMiddleware):
    """``CORSMiddleware`` with its preflight refusal as problem+json."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        headers = {k: v for k, v in response.headers.items() if k not in ("content-type", "content-length")}
        what = bytes(response.body).decode("utf-8", "replace").removeprefix("Disallowed CORS ")
        detail = (f"Cross-origin request refused: its {what} is not allowed (RADSCREEN_CORS_ORIGINS; "
                  "methods GET and POST).")
        return _ProblemPreflight(detail, headers)
