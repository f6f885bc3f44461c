"""Admission before work, and DICOM bombs against a real service.

- ``/v1/exams`` neither reads a part into memory nor parses a DICOM header before the exam is admitted; each
  header is then parsed once, in a decode worker (where a deadline and the client's departure stop it), not
  in the default thread pool. Before the fix the route read every part and parsed every DICOM header before
  admission, in ``asyncio.to_thread``, and the decode parsed it again.
- ``/v1/predict`` and ``/v1/predict/batch`` likewise: a raw body is spooled (memory up to 1 MiB, then disk)
  and every image is read by its decode worker after admission. Before, each body was read whole into memory
  first, so a refused request had already cost its upload's size in RAM.
- Against a ``radscreen serve`` process: each DICOM bomb gets its 4xx on ``/v1/predict`` and ``/v1/exams``,
  exams of deflate bombs whose clients leave cost the service next to no CPU (79 CPU-s for six of them before
  the fix), a normal image is answered the same afterwards, and the log stays clean.
- An exam of legitimately costly DICOM headers (just within the bound) whose client leaves costs a fraction of
  its full CPU: the decode workers stop it (a guard of the property, which the code before the fix also had
  for headers this small, since it parsed them one at a time).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api.exams import ExamPart
from service.api.uploads import Upload
from service.inference.dicom import MAX_HEADER_BYTES
from service.inference.loading import load_scorer
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from support.hostile_dicom import deflate_bomb, jpeg_dicom, jpeg_with_garbage, many_elements
from support.hostile_service import (
    Service,
    cpu_seconds,
    disconnect_while_processing,
    hostile_service,
    multipart_body,
    post,
)
from support.images import encode, fundus_like
from support.live_server import live_server, settings_for
from tests.helpers.dicom_files import op_dicom
from tests.helpers.gated_scorer import GatedScorer

PROBLEM = "application/problem+json"


def _exam_parts() -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("image", (f"{side}.dcm", op_dicom(fundus_like(i, size=80), laterality=side), "application/dicom"))
            for i, side in enumerate("RL")]


def test_exam_parts_are_neither_read_nor_parsed_before_admission(tiny_artifact: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import service.inference.dicom as dicom

    parsed: list[str] = []  # the thread of each DICOM header parse
    read: list[int] = []  # the part index of each part read into memory
    real_header, real_read = dicom.read_header, ExamPart.read

    def counted_header(*args: Any, **kwargs: Any) -> Any:
        parsed.append(threading.current_thread().name)
        return real_header(*args, **kwargs)

    def counted_read(self: ExamPart) -> bytes:
        read.append(self.index)
        return real_read(self)

    monkeypatch.setattr(dicom, "read_header", counted_header)
    monkeypatch.setattr(ExamPart, "read", counted_read)
    holder: dict[str, GatedScorer] = {}

    def factory(spec: ScorerSpec) -> Scorer:
        holder["s"] = GatedScorer(load_scorer(spec))
        return holder["s"]

    settings = settings_for(tiny_artifact, max_batch_size=1, max_wait_ms=0.0, max_queue_wait_s=0.001)
    with live_server(settings, scorer_factory=factory) as base:

        async def busy_then_exam() -> tuple[httpx.Response, httpx.Response]:
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                first = asyncio.ensure_future(client.post("/v1/predict", content=encode(fundus_like(6)),
                                                          headers={"Content-Type": "image/png"}))
                entered = await asyncio.to_thread(holder["s"].entered.wait, 60)
                assert entered, "the first image never reached the forward"
                refused = await client.post("/v1/exams", files=_exam_parts())
                holder["s"].gate.set()
                return refused, await first

        refused, first = asyncio.run(busy_then_exam())
        assert first.status_code == 200
        assert refused.status_code == 503 and refused.json()["type"].endswith("/overloaded"), refused.text
        assert parsed == [] and read == []  # refused before a part was read or a header parsed
        admitted = httpx.post(f"{base}/v1/exams", files=_exam_parts(), timeout=60)
    assert admitted.status_code == 200, admitted.text
    assert [im["format"] for im in admitted.json()["images"]] == ["dicom", "dicom"]
    assert sorted(read) == [0, 1]
    assert len(parsed) == 2 and all(name.startswith("radscreen-decode") for name in parsed), parsed  # once each


def test_predict_bodies_are_read_only_after_admission(tiny_artifact: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []  # the thread of each image read into memory
    real_read = Upload.read

    def counted_read(self: Upload) -> bytes:
        reads.append(threading.current_thread().name)
        return real_read(self)

    monkeypatch.setattr(Upload, "read", counted_read)
    holder: dict[str, GatedScorer] = {}

    def factory(spec: ScorerSpec) -> Scorer:
        holder["s"] = GatedScorer(load_scorer(spec))
        return holder["s"]

    image = encode(fundus_like(6))
    padded = image + bytes(3 * 1024 * 1024)  # a PNG with 3 MiB after its IEND: beyond the 1 MiB held in memory
    settings = settings_for(tiny_artifact, max_batch_size=1, max_wait_ms=0.0, max_queue_wait_s=0.001,
                            max_upload_bytes=4 * 1024 * 1024)
    with live_server(settings, scorer_factory=factory) as base:

        async def busy_then_more() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                first = asyncio.ensure_future(client.post("/v1/predict", content=image,
                                                          headers={"Content-Type": "image/png"}))
                entered = await asyncio.to_thread(holder["s"].entered.wait, 60)
                assert entered, "the first image never reached the forward"
                reads.clear()  # the first image's own read
                refused = [await client.post("/v1/predict", content=padded, headers={"Content-Type": "image/png"}),
                           await client.post("/v1/predict", files={"image": ("e.png", padded, "image/png")}),
                           await client.post("/v1/predict/batch", files=[("image", ("a.png", image, "image/png")),
                                                                          ("image", ("b.png", padded, "image/png"))])]
                holder["s"].gate.set()
                return [*refused, await first]

        *refused, first = asyncio.run(busy_then_more())
        assert first.status_code == 200
        for r in refused:
            assert r.status_code == 503 and r.json()["type"].endswith("/overloaded"), r.text
        assert reads == []  # refused before any image was read
        admitted = httpx.post(f"{base}/v1/predict", content=padded, headers={"Content-Type": "image/png"}, timeout=60)
    assert admitted.status_code == 200, admitted.text
    assert len(reads) == 1 and reads[0].startswith("radscreen-decode"), reads  # read once, by its decode worker


def test_an_exam_part_over_the_upload_limit_is_refused_unread(tiny_artifact: Path) -> None:
    """The exam's body limit is 8 uploads; one part of it may still not exceed one upload's limit."""
    settings = settings_for(tiny_artifact)  # 256 KiB uploads
    big = ("left", ("l.png", b"\x89PNG\r\n\x1a\n" + bytes(1024 * 1024), "image/png"))
    with live_server(settings) as base:
        r = httpx.post(f"{base}/v1/exams", files=[_exam_parts()[0], big], timeout=60)
    assert r.status_code == 413 and r.json()["type"].endswith("/payload-too-large"), r.text
    assert r.json()["detail"] == (f"The left-eye photograph (part 2) was refused: The image is {1024 * 1024 + 8} "
                                  f"bytes; the limit is {settings.max_upload_bytes} bytes.")


ENV = {"RADSCREEN_MAX_PIXELS": "4000000", "RADSCREEN_MAX_UPLOAD_BYTES": str(2 * 1024 * 1024),
       "RADSCREEN_DECODE_WORKERS": "2", "RADSCREEN_MAX_WAIT_MS": "50"}


@pytest.fixture(scope="module")
def svc(tiny_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with hostile_service(tiny_artifact, tmp_path_factory.mktemp("hostile") / "service.log", ENV) as service:
        yield service


def _problem(r: httpx.Response, status: int, slug: str, needle: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM) and r.json()["type"].endswith("/" + slug)
    detail = str(r.json()["detail"])
    assert needle in detail, detail
    return detail


def test_dicom_bombs_get_their_4xx_on_predict_and_exams(svc: Service) -> None:
    bombs = {
        "deflate": (deflate_bomb(256 * 1024), 415, "unsupported-media-type", "1.2.840.10008.1.2.1.99"),
        "elements": (many_elements(150_000), 422, "image-too-complex", "DICOM header runs over"),
        "jpeg-scans": (jpeg_dicom(jpeg_with_garbage(2000, 3000), 2000, 2000), 422, "image-too-complex", "scans"),
    }
    for i, (name, (body, status, slug, needle)) in enumerate(bombs.items()):
        _problem(post(svc, "/v1/predict", body, "application/dicom", f"hostile-predict-{i:04d}"), status, slug, needle)
        form, ctype = multipart_body([("image", f"{name}.dcm", body)])
        detail = _problem(post(svc, "/v1/exams", form, ctype, f"hostile-exam-{i:04d}"), status, slug, needle)
        assert detail.startswith("The photograph (part 1) was refused")


def test_abandoned_exams_of_bombs_cost_next_to_nothing(svc: Service) -> None:
    good = encode(fundus_like(7, size=128))
    before = post(svc, "/v1/predict", good, "image/png", "hostile-good-0001")
    assert before.status_code == 200
    spent = cpu_seconds(svc.pid)
    form, ctype = multipart_body([("right", "r.dcm", deflate_bomb(32 * 1024)),
                                  ("left", "l.dcm", deflate_bomb(32 * 1024))])
    leavers = [threading.Thread(target=disconnect_while_processing, args=(svc, f"hostile-gone-{i:04d}", form, 1.0),
                                kwargs={"path": "/v1/exams", "content_type": ctype}) for i in range(6)]
    for thread in leavers:
        thread.start()
    for thread in leavers:
        thread.join(60)
    after = post(svc, "/v1/predict", good, "image/png", "hostile-good-0002")
    assert after.status_code == 200
    assert {k: v for k, v in after.json().items() if k not in ("request_id", "timing_ms")} == {
        k: v for k, v in before.json().items() if k not in ("request_id", "timing_ms")}
    for i in range(6):
        assert svc.access_line(f"hostile-gone-{i:04d}")["status"] in (415, 499)
    used = cpu_seconds(svc.pid) - spent
    print(f"\nservice CPU for six abandoned deflate exams and one image: {used:.2f} s (79 CPU-s before the fix)")
    assert used < 10.0
    entries = svc.log_entries()
    assert "Traceback" not in svc.log_path.read_text(errors="replace")
    assert not [e for e in entries if e.get("level") in ("error", "critical") or "raw" in e]


def test_an_exam_whose_client_leaves_stops_costing_cpu(svc: Service) -> None:
    """Eight DICOM photographs whose headers are just within the bound (about a CPU-second of parsing each):
    answered, the exam costs the service its full CPU; abandoned after 0.3 s, its queued parts never start and
    the running ones stop at their next element, so it costs a fraction of that."""
    heavy = many_elements((MAX_HEADER_BYTES - 4096) // 10)
    form, ctype = multipart_body([("right", f"{i}.dcm", heavy) for i in range(8)])
    spent = cpu_seconds(svc.pid)
    answered = post(svc, "/v1/exams", form, ctype, "hostile-heavy-0001")
    assert answered.status_code == 200, answered.text
    full = cpu_seconds(svc.pid) - spent
    spent = cpu_seconds(svc.pid)
    disconnect_while_processing(svc, "hostile-heavy-0002", form, 0.3, path="/v1/exams", content_type=ctype)
    assert svc.access_line("hostile-heavy-0002")["status"] == 499
    settled = post(svc, "/v1/predict", encode(fundus_like(7, size=128)), "image/png", "hostile-heavy-0003")
    assert settled.status_code == 200  # answered after the abandoned exam's decodes stopped (2 workers)
    abandoned = cpu_seconds(svc.pid) - spent
    print(f"\nexam of 8 heavy DICOM headers: answered {full:.2f} CPU-s, abandoned after 0.3 s {abandoned:.2f} CPU-s")
    assert abandoned < 0.5 * full
