"""The response headers every answer carries, and the request framing refused before the app sees a request.

**Headers** (added by ``service.http.middleware`` to every response, errors included):

- ``Content-Security-Policy``: the clinician pages and every API answer may load only this origin's own
  scripts, styles and images (photograph previews are ``blob:`` URLs), no plugin, no ``<base>``, and may be
  framed by no one (``frame-ancestors 'none'``). The pages were written for it: no inline script, style
  attribute or event handler. ``/docs`` and ``/redoc`` (Swagger UI and ReDoc, whose generated pages start
  with an inline script and inject styles) get the same policy with ``'unsafe-inline'`` scripts and styles
  and ``blob:`` workers, still same-origin only and never framed.
- ``X-Frame-Options: DENY`` for browsers that predate ``frame-ancestors`` (clickjacking).
- ``X-Content-Type-Options: nosniff``: an answer is read as its declared type, never sniffed into HTML.
- ``Cache-Control: no-store`` on every page and answer (a result concerns one patient: no browser or proxy
  cache keeps it); the static assets of the pages and of the docs (``/static``, ``/docs-assets``) are the
  exception, since they hold no patient data.

**Framing** (RFC 9112 §6.1): a request carrying both ``Content-Length`` and ``Transfer-Encoding`` is how
request smuggling begins when a proxy and the server disagree on which one frames the body. uvicorn's h11
accepts it (and reads the body as chunked), so :func:`framing_problem` refuses it with 400 before the app
runs, and the connection is closed. An obs-folded header line (a header continued on the next line after a
space, RFC 9112 §5.2) is refused at the protocol (``service.http.header_timeout``), where the raw head is seen.
"""

from __future__ import annotations

from collections.abc import Mapping

SELF_ONLY = ("default-src 'self'; img-src 'self' blob: data:; object-src 'none'; base-uri 'none'; "
             "form-action 'self'; frame-ancestors 'none'")
DOCS_POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
               "img-src 'self' blob: data:; worker-src 'self' blob:; object-src 'none'; base-uri 'none'; "
               "form-action 'self'; frame-ancestors 'none'")
DOCS_PAGES = ("/docs", "/docs/oauth2-redirect", "/redoc")
CACHEABLE_PREFIXES = ("/static/", "/docs-assets/")


def response_headers(path: str) -> list[tuple[bytes, bytes]]:
    """The security headers of an answer to ``path`` (module docstring)."""
    policy = DOCS_POLICY if path.rstrip("/") in DOCS_PAGES else SELF_ONLY
    headers = [
        (b"content-security-policy", policy.encode()),
        (b"x-frame-options", b"DENY"),
        (b"x-content-type-options", b"nosniff"),
    ]
    if not path.startswith(CACHEABLE_PREFIXES):
        headers.append((b"cache-control", b"no-store"))
    return headers


def framing_problem(headers: Mapping[str, str], raw_names: list[str]) -> str | None:
    """Why the request's framing is refused (400), or ``None``: both Content-Length and Transfer-Encoding,
    or Transfer-Encoding given more than once. ``raw_names``: every header name, lower case, repeats kept."""
    if "transfer-encoding" in headers and "content-length" in headers:
        return ("The request has both Content-Length and Transfer-Encoding; send one of them (RFC 9112 §6.1: "
                "a request framed both ways is refused).")
    if raw_names.count("transfer-encoding") > 1:
        return "The request has Transfer-Encoding more than once; send it once."
    return None
