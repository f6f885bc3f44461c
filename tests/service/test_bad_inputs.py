"""Hostile and odd uploads against a live server: each gets the right status AND problem body."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from support.hostile import png_claiming
from support.images import encode, fundus_like
from support.live_server import live_server, settings_for

PROBLEM = "application/problem+json"
LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def server(tiny_artifact: Path) -> Iterator[str]:
    with live_server(settings_for(tiny_artifact, max_upload_bytes=LIMIT)) as base:
        yield base


def _raw(server: str, data: bytes, content_type: str = "image/png") -> httpx.Response:
    return httpx.post(f"{server}/v1/predict", content=data, headers={"Content-Type": content_type}, timeout=30)


def _assert_problem(r: httpx.Response, status: int, slug: str, needle: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    body = r.json()
    assert body["type"] == f"https://radscreen.dev/problems/{slug}" and body["status"] == status
    assert needle.lower() in body["detail"].lower(), body["detail"]
    assert body["request_id"] == r.headers["x-request-id"] and body["instance"].endswith(body["request_id"])
    assert "Traceback" not in r.text


def _jpeg(arr: np.ndarray, mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    img = Image.fromarray(arr)
    (img.convert(mode) if mode else img).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def test_empty_random_and_truncated(server: str) -> None:
    _assert_problem(_raw(server, b""), 400, "undecodable-image", "empty")
    rng = np.random.default_rng(0)
    _assert_problem(_raw(server, rng.bytes(4096)), 415, "unsupported-media-type", "not a recognised image")
    png = encode(fundus_like(1))
    _assert_problem(_raw(server, png[: len(png) // 2]), 400, "undecodable-image", "truncated")
    jpg = _jpeg(fundus_like(1))
    _assert_problem(_raw(server, jpg[: len(jpg) // 2], "image/jpeg"), 400, "undecodable-image", "truncated")


def test_size_limits(server: str) -> None:
    _assert_problem(_raw(server, encode(np.zeros((1, 1, 3), np.uint8))), 400, "image-too-small", "1x1")
    _assert_problem(_raw(server, png_claiming(30000, 30000)), 413, "image-too-large", "pixels")
    big = np.random.default_rng(0).integers(0, 255, (400, 400, 3)).astype(np.uint8)  # ~480 KB PNG of noise
    data = encode(big)
    assert len(data) > LIMIT
    r = httpx.post(f"{server}/v1/predict", files={"image": ("big.png", data, "image/png")}, timeout=30)
    _assert_problem(r, 413, "payload-too-large", "exceeds the limit")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
        for i in range(0, len(data), 16384):
            yield data[i : i + 16384]

    r = httpx.post(f"{server}/v1/predict", content=chunks(), headers={"Content-Type": "image/png"}, timeout=30)
    _assert_problem(r, 413, "payload-too-large", "exceeds the limit")


def test_formats_that_must_work(server: str) -> None:
    fundus = fundus_like(2, size=128)
    cmyk = _raw(server, _jpeg(fundus, "CMYK"), "image/jpeg")
    assert cmyk.status_code == 200, cmyk.text
    sixteen = fundus[..., 0].astype(np.uint16) * 257  # 16-bit grayscale PNG
    r = _raw(server, encode(sixteen))
    assert r.status_code == 200 and r.json()["quality"]["gradable"] is False  # grey: not a fundus colour
    pal = Image.fromarray(fundus).convert("P", palette=Image.Palette.ADAPTIVE)
    buf = io.BytesIO()
    pal.save(buf, format="PNG")
    r = _raw(server, buf.getvalue())
    assert r.status_code == 200 and r.json()["quality"]["gradable"] is True
    wide = np.zeros((128, 256, 3), np.uint8)
    wide[:, 64:192] = fundus
    r = _raw(server, encode(wide))
    assert r.status_code == 200 and r.json()["quality"]["gradable"] is True  # FOV centred, any aspect


def test_unsupported_kinds(server: str) -> None:
    frames = [Image.new("RGB", (32, 32), (60 * i, 10, 10)) for i in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    _assert_problem(_raw(server, buf.getvalue(), "image/gif"), 415, "multi-frame-image", "3 frames")
    _assert_problem(_raw(server, b"%PDF-1.7\n1 0 obj<<>>endobj\n", "image/png"), 415, "unsupported-media-type", "PDF")
    _assert_problem(_raw(server, b"hello", "text/plain"), 415, "unsupported-media-type", "text/plain")
    _assert_problem(httpx.post(f"{server}/v1/predict", content=b"{}"), 415, "unsupported-media-type", "none")


def test_invalid_fields(server: str) -> None:
    png = encode(fundus_like(3))
    r = httpx.post(f"{server}/v1/predict", files={"picture": ("a.png", png, "image/png")})
    _assert_problem(r, 422, "validation-error", "body.image")
    r = httpx.post(f"{server}/v1/predict", data={"image": "not-a-file"}, files={"x": ("x", b"", "text/plain")})
    _assert_problem(r, 422, "validation-error", "file part")
    r = httpx.post(f"{server}/v1/predict?study_id=" + "x" * 200, content=png, headers={"Content-Type": "image/png"})
    _assert_problem(r, 422, "validation-error", "study_id")
    assert "x" * 200 not in r.text  # the rejected value is not echoed back
    r = httpx.post(f"{server}/v1/predict?format=xml", content=png, headers={"Content-Type": "image/png"})
    _assert_problem(r, 422, "validation-error", "format")
    r = httpx.get(f"{server}/v1/predict")
    _assert_problem(r, 405, "method-not-allowed", "")
    _assert_problem(httpx.get(f"{server}/nowhere"), 404, "not-found", "/nowhere")
    files = [("image", (f"{i}.png", png, "image/png")) for i in range(17)]
    r = httpx.post(f"{server}/v1/predict/batch", files=files)  # 413 naming the limit and the count
    _assert_problem(r, 413, "payload-too-large", "has 17 images; at most 16 images")
    assert "RADSCREEN_MAX_BATCH_ITEMS=16" in r.json()["detail"]
    two = [("image", (f"{i}.png", png, "image/png")) for i in range(2)]
    _assert_problem(httpx.post(f"{server}/v1/predict", files=two), 422, "validation-error", "got 2 images")
