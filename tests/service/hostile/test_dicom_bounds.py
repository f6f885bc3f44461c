"""DICOM bounds: the transfer syntax and the header size are checked before any dataset is inflated or parsed
beyond its bound, the JPEG scan count cannot be hidden behind a stray byte, and every DICOM pixel decode runs
under the decode deadline and the JPEG rules of a plain image.

Each test reproduces a finding of the red-team pass on the code before the fix (a deflate bomb inflated whole;
a million-element header parsed whole; one garbage byte making ``count_scans`` see no scan; JPEG pixel data in
DICOM decoded with no deadline) and fails there.
"""

from __future__ import annotations

import functools
import threading
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from service.inference.decode_deadline import DecodeDeadline
from service.inference.dicom import MAX_HEADER_BYTES, decode_photograph, read_dicom, read_dicom_tags
from service.inference.imaging import ImageRejected, decode_rgb
from service.inference.jpeg_structure import MAX_JPEG_SCANS, count_scans
from support.hostile_decode import jpeg_many_scans
from support.hostile_dicom import (
    DEFLATED_EXPLICIT_VR_LE,
    deflate_bomb,
    jpeg_dicom,
    jpeg_with_garbage,
    many_elements,
)
from support.images import encode, fundus_like

LIMITS: dict[str, Any] = {"max_pixels": 4_000_000, "max_bytes": 20 * 1024 * 1024}
MIB = 1024 * 1024


def _refused_with_peak(call: Callable[[], object]) -> tuple[ImageRejected, float]:
    """The ImageRejected ``call`` raises and the peak of Python allocations meanwhile, in MiB."""
    tracemalloc.start()
    try:
        with pytest.raises(ImageRejected) as caught:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return caught.value, peak / MIB


def _refused(call: Callable[[], object]) -> ImageRejected:
    with pytest.raises(ImageRejected) as caught:
        call()
    return caught.value


def _gone() -> DecodeDeadline:
    cancelled = threading.Event()
    cancelled.set()
    return DecodeDeadline(60.0, cancelled)


def test_deflate_bomb_is_refused_from_the_file_meta_without_inflating() -> None:
    bomb = deflate_bomb(64 * 1024)  # ~64 KB on the wire, ~64 MiB of zeros once inflated
    assert len(bomb) < 80 * 1024
    read_dicom_tags(many_elements(10))  # pydicom imported before measuring
    for read in (lambda: decode_photograph(bomb, **LIMITS), lambda: read_dicom_tags(bomb)):
        exc, peak_mib = _refused_with_peak(read)
        assert exc.problem_type == "unsupported-media-type", exc.detail
        assert DEFLATED_EXPLICIT_VR_LE in exc.detail and "file meta" in exc.detail
        assert peak_mib < 4, f"{peak_mib:.0f} MiB allocated: the dataset was inflated"


def test_a_header_of_a_million_elements_is_refused_after_its_bound() -> None:
    bomb = many_elements(1_000_000)  # 10 MB of 10-byte private elements before the pixel data
    for read in (lambda: decode_photograph(bomb, **LIMITS), lambda: read_dicom_tags(bomb)):
        exc = _refused(read)
        assert exc.problem_type == "image-too-complex" and f"{MAX_HEADER_BYTES // 1024} KiB" in exc.detail
    within = many_elements((MAX_HEADER_BYTES - 4096) // 10)  # just under the bound: an ordinary photograph
    rgb = decode_photograph(within, **LIMITS)
    assert rgb.shape == (64, 64, 3) and not rgb.any()  # its pixel data is zeros


def test_scans_behind_a_garbage_byte_are_counted_as_libjpeg_decodes_them() -> None:
    clean, dirty = jpeg_many_scans(256, 200), jpeg_with_garbage(256, 200)
    everything = 10**6
    assert count_scans(dirty, stop_after=everything) == count_scans(clean, stop_after=everything) > MAX_JPEG_SCANS
    exc = _refused(lambda: decode_rgb(dirty, **LIMITS, deadline=DecodeDeadline(60.0)))
    assert exc.problem_type == "image-too-complex" and "scans" in exc.detail  # from the markers, not the deadline
    photo = encode(fundus_like(4, size=256), "JPEG", quality=90, progressive=True)
    junk = photo.replace(b"\xff\xda", b"\x00\x17\xff\xda")  # two stray bytes before every scan
    assert count_scans(junk, stop_after=everything) == count_scans(photo, stop_after=everything) > 1
    np.testing.assert_array_equal(decode_rgb(junk, **LIMITS), decode_rgb(photo, **LIMITS))  # libjpeg skips them


def test_jpeg_pixel_data_in_dicom_gets_the_jpeg_rules() -> None:
    bomb = jpeg_dicom(jpeg_with_garbage(2000, 3000), 2000, 2000)
    assert len(bomb) < 128 * 1024
    exc = _refused(lambda: decode_photograph(bomb, **LIMITS, deadline=DecodeDeadline(60.0)))
    assert exc.problem_type == "image-too-complex" and "scans" in exc.detail
    progressive = encode(fundus_like(2, size=128), "JPEG", quality=90, progressive=True)
    exc = _refused(lambda: decode_photograph(jpeg_dicom(progressive, 128, 128), **LIMITS))
    assert exc.problem_type == "unsupported-media-type" and "progressive" in exc.detail


@pytest.mark.parametrize("kind", ["jpeg", "uncompressed"])
def test_every_dicom_decode_stops_at_the_deadline_or_when_abandoned(kind: str) -> None:
    rgb = fundus_like(5, size=256)
    data = (jpeg_dicom(encode(rgb, "JPEG", quality=90), 256, 256) if kind == "jpeg"
            else many_elements(50_000, side=256))
    assert decode_photograph(data, **LIMITS, deadline=DecodeDeadline(60.0)).shape == (256, 256, 3)
    for deadline, needle in ((_gone(), "abandoned"), (DecodeDeadline(-1.0), "DECODE_TIMEOUT")):
        exc = _refused(functools.partial(decode_photograph, data, **LIMITS, deadline=deadline))
        assert exc.problem_type == "image-too-complex" and needle in exc.detail, exc.detail
    exc = _refused(lambda: read_dicom(data, **LIMITS, deadline=_gone()))  # the header parse too
    assert "abandoned" in exc.detail
