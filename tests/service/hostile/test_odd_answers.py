"""Round three, odd answers, against a real ``radscreen serve`` (uvicorn with the service's h11 protocol):

- a refusal names the limit or field at fault (60 exam parts: the exam limit, not ``MAX_BATCH_ITEMS``; a text
  ``right`` field: it must be a file);
- ``?format=json`` wins over an FHIR ``Accept`` header;
- pages and answers carry a Content-Security-Policy (``frame-ancestors 'none'``), ``X-Frame-Options``,
  ``nosniff`` and ``Cache-Control: no-store``;
- a request with both Content-Length and Transfer-Encoding, or with an obs-folded header line, is refused with
  400 and the connection closed (h11 alone accepts both: a smuggling risk behind a proxy that disagrees).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.hostile_service import Service, hostile_service, multipart_body, post, read_response
from support.images import encode, fundus_like

FHIR = "application/fhir+json"


@pytest.fixture(scope="module")
def svc(tiny_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    log = tmp_path_factory.mktemp("odd-answers") / "service.log"
    with hostile_service(tiny_artifact, log, {"RADSCREEN_MAX_EXAM_IMAGES": "4", "RADSCREEN_MAX_BATCH_ITEMS": "8"}
                         ) as service:
        yield service


@pytest.fixture(scope="module")
def photos() -> tuple[bytes, bytes]:
    return encode(fundus_like(1, size=96)), encode(fundus_like(2, size=96))


def detail(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return str(response.json()["detail"])


def test_sixty_exam_parts_name_the_exam_limit(svc: Service) -> None:
    body, ctype = multipart_body([("right", f"{i}.png", b"x") for i in range(60)])
    text = detail(post(svc, "/v1/exams", body, ctype, "odd-parts-0001"), 413)
    assert "RADSCREEN_MAX_EXAM_IMAGES=4" in text and "MAX_BATCH_ITEMS" not in text
    body, ctype = multipart_body([("right", f"{i}.png", b"x") for i in range(6)])  # under the parser's slack
    text = detail(post(svc, "/v1/exams", body, ctype, "odd-parts-0002"), 413)
    assert "RADSCREEN_MAX_EXAM_IMAGES=4" in text and "6 photographs" in text


def test_a_text_field_where_a_photograph_goes_says_so(svc: Service) -> None:
    body, ctype = multipart_body([("right", None, b"not a file")])
    text = detail(post(svc, "/v1/exams", body, ctype, "odd-field-0001"), 422)
    assert "body.right: must be a file part" in text and "at least one photograph" not in text


def test_format_json_wins_over_a_fhir_accept_header(svc: Service, photos: tuple[bytes, bytes]) -> None:
    files = {"image": ("e.png", photos[0], "image/png")}
    response = httpx.post(f"{svc.base}/v1/predict?format=json", files=files, headers={"Accept": FHIR}, timeout=60)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    assert "outcome" in response.json()
    exam_files = [("right", ("r.png", photos[0], "image/png")), ("left", ("l.png", photos[1], "image/png"))]
    response = httpx.post(f"{svc.base}/v1/exams?format=json", files=exam_files, headers={"Accept": FHIR}, timeout=60)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    as_fhir = httpx.post(f"{svc.base}/v1/exams", files=exam_files, headers={"Accept": FHIR}, timeout=60)
    assert as_fhir.headers["content-type"].startswith(FHIR)  # without ?format the header still chooses


def test_blank_exam_id_is_refused(svc: Service, photos: tuple[bytes, bytes]) -> None:
    body, ctype = multipart_body([("right", "r.png", photos[0]), ("exam_id", None, b"    ")])
    assert "body.exam_id: must be 1-64 characters" in detail(post(svc, "/v1/exams", body, ctype, "odd-blank-01"), 422)


def _secure(response: httpx.Response, *, cacheable: bool = False) -> None:
    headers = response.headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "object-src 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    assert (headers.get("cache-control") == "no-store") is not cacheable


def test_pages_and_results_carry_the_security_headers(svc: Service, photos: tuple[bytes, bytes]) -> None:
    for page in ("/", "/exam"):
        response = httpx.get(f"{svc.base}{page}", timeout=30)
        assert response.status_code == 200
        _secure(response)
        assert "script-src" not in response.headers["content-security-policy"]  # default-src 'self': no inline
    docs = httpx.get(f"{svc.base}/docs", timeout=30)
    _secure(docs)
    assert "'unsafe-inline'" in docs.headers["content-security-policy"]  # Swagger UI's own inline start script
    result = httpx.post(f"{svc.base}/v1/predict", files={"image": ("e.png", photos[0], "image/png")}, timeout=60)
    _secure(result)
    _secure(httpx.post(f"{svc.base}/v1/predict", content=b"nope", headers={"Content-Type": "image/png"}, timeout=30))
    _secure(httpx.get(f"{svc.base}/v1/model", timeout=30))
    _secure(httpx.get(f"{svc.base}/static/app.js", timeout=30), cacheable=True)


def _raw(svc: Service, request: bytes) -> tuple[int, dict[str, str], bytes, bytes]:
    """Send ``request`` as is; the answer, and whatever the server sends after it before closing."""
    with socket.create_connection(("127.0.0.1", svc.port), timeout=30) as sock:
        sock.sendall(request)
        status, headers, body = read_response(sock)
        sock.settimeout(5)
        rest = b""
        try:
            while chunk := sock.recv(65536):
                rest += chunk
        except TimeoutError:
            rest += b"<still open>"
    return status, headers, body, rest


def test_content_length_with_transfer_encoding_is_refused(svc: Service) -> None:
    smuggled = b"GET /v1/model HTTP/1.1\r\nHost: x\r\n\r\n"
    chunked = b"0\r\n\r\n" + smuggled
    head = (f"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: image/png\r\n"
            f"Content-Length: {len(chunked)}\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    status, headers, body, rest = _raw(svc, head + chunked)
    assert status == 400 and b"both Content-Length and Transfer-Encoding" in body
    assert headers["connection"] == "close" and rest == b""  # the smuggled request was never answered


@pytest.mark.parametrize("folded", [b"Transfer-Encoding:\r\n chunked\r\n", b"Transfer-Encoding: \r\n\tchunked\r\n",
                                    b"X-Note: a\r\n b\r\n"])
def test_an_obs_folded_header_is_refused(svc: Service, folded: bytes) -> None:
    head = b"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: image/png\r\n" + folded
    status, headers, body, rest = _raw(svc, head + b"Content-Length: 5\r\n\r\n0\r\n\r\n")
    assert status == 400 and b"obs-fold" in body and headers["connection"] == "close" and rest == b""
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"


def test_a_plain_chunked_request_still_works(svc: Service, photos: tuple[bytes, bytes]) -> None:
    def chunks() -> Iterator[bytes]:
        yield photos[0][:1000]
        yield photos[0][1000:]

    response = httpx.post(f"{svc.base}/v1/predict", content=chunks(), headers={"Content-Type": "image/png"},
                          timeout=60)
    assert response.status_code == 200, response.text
