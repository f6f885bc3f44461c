"""STOW-RS (``POST /dicomweb/studies``) bounds its body before any work, against a real ``radscreen serve`` process
with a spool (``RADSCREEN_PACS_SPOOL_DIR``) and 16 MiB uploads (``RADSCREEN_MAX_UPLOAD_BYTES``):

- 100,000 header-less parts are refused 413 (``RADSCREEN_PACS_STOW_MAX_PARTS``) within seconds, the server's
  memory barely moves, nothing is stored, and normal requests are answered afterwards (before the fix: every
  part was parsed and answered, one Failed SOP item each; 1,000,000 parts took 188 s and 2.7 GiB);
- a part larger than ``RADSCREEN_MAX_UPLOAD_BYTES`` is refused 413 while the client is still sending the body
  (before: the whole body was read first);
- four concurrent bodies of two 12 MiB parts cost the server less memory than the bodies' size (before: the body,
  a bytearray copy of each part and a bytes copy again, 2.6x the body);
- a body that never sends its closing delimiter, and one whose delimiters end in a bare LF, are 400 and nothing of
  them is stored (before: their first part was stored).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from pydicom.uid import generate_uid

from support.hostile_service import Service, hostile_service, read_response, request_head, watch_rss
from support.images import encode, fundus_like
from tests.helpers.dicom_listener import two_eye_study

pytestmark = pytest.mark.timeout(300)
MAX_UPLOAD = 16 * 1024 * 1024
PROBLEM = "application/problem+json"
DICOM_JSON = "application/dicom+json"


@pytest.fixture(scope="module")
def spool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stow-bounds") / "spool"


@pytest.fixture(scope="module")
def service(tiny_artifact: Path, spool: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    env = {"RADSCREEN_PACS_SPOOL_DIR": str(spool), "RADSCREEN_MAX_UPLOAD_BYTES": str(MAX_UPLOAD),
           "RADSCREEN_BACKEND": "torch", "RADSCREEN_PACS_QUIET_S": "3600", "RADSCREEN_PACS_SETTLE_S": "3600"}
    with hostile_service(tiny_artifact, tmp_path_factory.mktemp("stow-log") / "service.log", env) as svc:
        yield svc


def related(parts: list[bytes], boundary: str = "b") -> tuple[bytes, str]:
    """A well-formed STOW-RS body of ``parts`` and its Content-Type."""
    body = b"".join(f"--{boundary}\r\nContent-Type: application/dicom\r\n\r\n".encode() + p + b"\r\n"
                    for p in parts) + f"--{boundary}--\r\n".encode()
    return body, f'multipart/related; type="application/dicom"; boundary={boundary}'


def stow(svc: Service, body: bytes, content_type: str, timeout: float = 120.0) -> httpx.Response:
    return httpx.post(f"{svc.base}/dicomweb/studies", content=body, headers={"Content-Type": content_type},
                      timeout=timeout)


def stored(spool: Path) -> set[Path]:
    return set((spool / "studies").glob("*/*.dcm"))


def problem(response: httpx.Response, status: int, slug: str) -> str:
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["type"].endswith("/" + slug), body
    return str(body["detail"])


def still_serving(svc: Service, spool: Path) -> None:
    """A normal STOW-RS study is stored and a normal photograph scored; no traceback in the log, no UID either."""
    study = generate_uid()
    right, left = two_eye_study(study)
    before = stored(spool)
    answer = stow(svc, *related([right, left]))
    assert answer.status_code == 200 and answer.headers["content-type"] == DICOM_JSON, answer.text
    assert len(stored(spool) - before) == 2
    scored = httpx.post(f"{svc.base}/v1/predict", content=encode(fundus_like(3)),
                        headers={"Content-Type": "image/png"}, timeout=120)
    assert scored.status_code == 200, scored.text
    log = svc.log_path.read_text(errors="replace")
    assert "Traceback" not in log and study not in log


def test_many_tiny_parts_refused_by_count(service: Service, spool: Path) -> None:
    body = b"--b\r\n\r\n\r\n" * 100_000 + b"--b--\r\n"  # 100,000 parts without headers or bytes: 900 kB
    before = stored(spool)
    with watch_rss(service.pid) as rss:
        started = time.monotonic()
        response = stow(service, body, 'multipart/related; type="application/dicom"; boundary=b')
        elapsed = time.monotonic() - started
    detail = problem(response, 413, "payload-too-large")
    assert "RADSCREEN_PACS_STOW_MAX_PARTS=32" in detail and "more than 32 parts" in detail
    assert elapsed < 10, f"refused after {elapsed:.1f} s"  # a safety bound: before the fix, 100,000 parts ~20 s
    grown_mib = (rss.peak() - rss.baseline) / 1024
    assert grown_mib < 150, f"the server grew by {grown_mib:.0f} MiB"
    assert stored(spool) == before
    still_serving(service, spool)


def test_part_over_the_upload_limit_refused_while_it_streams(service: Service, spool: Path) -> None:
    """Declare a body of three parts' limits, send one part 64 KiB over the limit, send nothing more: the answer
    must come while the client still owes most of its body."""
    head = b'--b\r\nContent-Type: application/dicom\r\n\r\n'
    declared = 3 * MAX_UPLOAD  # within the body cap ((MAX_UPLOAD + 64 KiB) x 8), so the middleware lets it in
    content_type = 'multipart/related; type="application/dicom"; boundary=b'
    before = stored(spool)
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
        sock.sendall(request_head(service.port, "/dicomweb/studies", content_type, declared, "stow-big-part-01"))
        sock.sendall(head)
        chunk = b"\x00" * (1024 * 1024)
        for _ in range(MAX_UPLOAD // len(chunk)):
            sock.sendall(chunk)
        sock.sendall(b"\x00" * 65536)  # now one part is 64 KiB over the limit; 2 x MAX_UPLOAD of the body unsent
        status, headers, raw = read_response(sock, timeout=15)  # before the fix: no answer (the body never ends)
    assert status == 413 and headers["content-type"].startswith(PROBLEM), raw[:300]
    assert b"RADSCREEN_MAX_UPLOAD_BYTES=16777216" in raw and b"Part 1" in raw
    assert stored(spool) == before
    still_serving(service, spool)


def test_concurrent_large_bodies_cost_less_than_their_size(service: Service, spool: Path) -> None:
    """Four bodies of two 12 MiB parts each (96 MiB in all, within every bound): the parts are garbage, so each
    answer is 409; what matters is what the server held meanwhile."""
    part = 12 * 1024 * 1024
    bodies = [related([bytes([i]) * part, bytes([i + 1]) * part], boundary=f"b{i}") for i in range(4)]
    total_mib = sum(len(b) for b, _ in bodies) / 2**20
    before = stored(spool)
    with watch_rss(service.pid) as rss, ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda bc: stow(service, *bc), bodies))
    for answer in answers:
        assert answer.status_code == 409 and answer.headers["content-type"] == DICOM_JSON, answer.text[:300]
    grown_mib = (rss.peak() - rss.baseline) / 1024
    assert grown_mib < total_mib, f"{total_mib:.0f} MiB of bodies grew the server by {grown_mib:.0f} MiB"
    assert stored(spool) == before


@pytest.mark.parametrize("case", ["unterminated", "lf-after-crlf-start", "lf-only"])
def test_bad_framing_is_refused_and_nothing_stored(service: Service, spool: Path, case: str) -> None:
    right, left = two_eye_study(generate_uid())
    typed = b"Content-Type: application/dicom"
    bodies = {  # each would store at least one instance if it were taken as framed
        "unterminated": b"--b\r\n" + typed + b"\r\n\r\n" + right + b"\r\n--b\r\n" + typed + b"\r\n\r\n" + left,
        "lf-after-crlf-start": b"--b\r\n" + typed + b"\r\n\r\n" + right + b"\n--b\n" + typed + b"\n\n" + left
        + b"\n--b--\n",
        "lf-only": b"--b\n" + typed + b"\n\n" + right + b"\n--b\n" + typed + b"\n\n" + left + b"\n--b--\n",
    }
    before = stored(spool)
    response = stow(service, bodies[case], 'multipart/related; type="application/dicom"; boundary=b')
    detail = problem(response, 400, "validation-error")
    expected = "closing delimiter" if case == "unterminated" else "bare LF, not CRLF"
    assert expected in detail and "nothing of it is stored" in detail, detail
    assert stored(spool) == before
