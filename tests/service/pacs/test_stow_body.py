"""``service.pacs.stow.StowBody`` fed a STOW-RS body in chunks of every size: the same parts whatever the chunking,
and each bound and framing rule held across chunk edges (a bare LF split from its delimiter, a part's bytes
counted over many chunks)."""

from __future__ import annotations

import pytest

from service.pacs.stow import StowBody, StowRefused

CONTENT_TYPE = 'multipart/related; type="application/dicom"; boundary=xyz'
TYPED = b"Content-Type: application/dicom\r\n"


def _feed(body: bytes, size: int, *, max_parts: int = 8, max_part_bytes: int = 1000) -> list[bytes]:
    with StowBody(CONTENT_TYPE, max_parts=max_parts, max_part_bytes=max_part_bytes) as stow:
        for i in range(0, len(body), size):
            stow.feed(body[i:i + size])
        stow.finish()
        return list(stow.parts())


def _refusal(body: bytes, size: int, **bounds: int) -> StowRefused:
    with pytest.raises(StowRefused) as caught:
        _feed(body, size, **bounds)
    return caught.value


PARTS = [b"first part \r\n--xy not a delimiter", b"", b"\x00" * 700]
WELL_FORMED = b"".join(
    b"--xyz\r\n" + TYPED + b"\r\n" + p + b"\r\n" for p in PARTS) + b"--xyz--\r\nepilogue\r\n"


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 10_000])
def test_parts_are_the_same_whatever_the_chunks(size: int) -> None:
    assert _feed(WELL_FORMED, size) == PARTS


@pytest.mark.parametrize("size", [1, 5, 64])
def test_bounds_and_framing_hold_across_chunk_edges(size: int) -> None:
    too_many = _refusal(WELL_FORMED, size, max_parts=2)
    assert too_many.status == 413 and "RADSCREEN_PACS_STOW_MAX_PARTS=2" in too_many.detail
    too_big = _refusal(WELL_FORMED, size, max_part_bytes=699)
    assert too_big.status == 413 and "Part 3" in too_big.detail and "RADSCREEN_MAX_UPLOAD_BYTES=699" in too_big.detail
    bare_lf = WELL_FORMED.replace(b"\r\n--xyz\r\n", b"\n--xyz\r\n", 1)
    refused = _refusal(bare_lf, size)
    assert refused.status == 400 and "bare LF" in refused.detail
    unterminated = WELL_FORMED[:WELL_FORMED.index(b"--xyz--")]
    refused = _refusal(unterminated, size)
    assert refused.status == 400 and "closing delimiter" in refused.detail


def test_media_types_and_boundary() -> None:
    with pytest.raises(StowRefused) as caught:
        StowBody("multipart/form-data; boundary=xyz", max_parts=1, max_part_bytes=1)
    assert caught.value.status == 415
    with pytest.raises(StowRefused) as caught:
        StowBody('multipart/related; type="application/dicom"', max_parts=1, max_part_bytes=1)
    assert caught.value.status == 400
    png = WELL_FORMED.replace(TYPED, b"Content-Type: image/png\r\n", 1)
    refused = _refusal(png, 64)
    assert refused.status == 415 and "'image/png'" in refused.detail
    assert _refusal(b"--xyz--\r\n", 64).detail == "The multipart/related body holds no part."
