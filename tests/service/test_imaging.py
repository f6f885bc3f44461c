"""Decoding and validation: every accepted variant decodes correctly, every refusal is specific."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

from models.image.preprocessing import fov_square
from service.http.errors import IMAGE_PROBLEM_STATUS
from service.inference.imaging import ImageRejected, decode_rgb, open_image
from support.hostile import png_claiming

LIMITS: dict[str, Any] = {"max_pixels": 10_000_000, "max_bytes": 5_000_000}


def _save(img: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _status(exc: ImageRejected) -> int:
    """The HTTP status the service answers this rejection with."""
    return IMAGE_PROBLEM_STATUS[exc.problem_type]


def _rejected(data: bytes, **limits: int) -> ImageRejected:
    with pytest.raises(ImageRejected) as info:
        decode_rgb(data, **{**LIMITS, **limits})
    return info.value


def test_sixteen_bit_grayscale_is_scaled_not_clipped() -> None:
    arr = np.full((32, 32), 32768, np.uint16)  # half of the 16-bit range
    rgb = decode_rgb(_save(Image.fromarray(arr), "PNG"), **LIMITS)
    assert rgb.dtype == np.uint8 and rgb.shape == (32, 32, 3)
    assert np.all(rgb == 128)  # 32768/65535*255 = 127.5 -> 128; clipping would give 255


def test_alpha_is_composited_on_black_and_palette_expanded() -> None:
    rgba = np.zeros((32, 32, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[..., 3] = 128  # half transparent red
    rgb = decode_rgb(_save(Image.fromarray(rgba), "PNG"), **LIMITS)
    assert abs(int(rgb[0, 0, 0]) - 100) <= 1 and rgb[0, 0, 1] == 0
    pal = Image.fromarray(np.full((32, 32, 3), (10, 200, 30), np.uint8)).convert("P", palette=Image.Palette.ADAPTIVE)
    rgb = decode_rgb(_save(pal, "PNG"), **LIMITS)
    assert tuple(rgb[5, 5]) == pytest.approx((10, 200, 30), abs=2)


def test_cmyk_jpeg_becomes_rgb() -> None:
    cmyk = Image.new("CMYK", (40, 40), (0, 255, 255, 0))  # pure red in CMYK
    rgb = decode_rgb(_save(cmyk, "JPEG"), **LIMITS)
    assert rgb.shape == (40, 40, 3)
    assert rgb[20, 20, 0] > 200 and rgb[20, 20, 1] < 60 and rgb[20, 20, 2] < 60


def test_exif_orientation_is_applied() -> None:
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = 255  # left half white, landscape 40x20
    img = Image.fromarray(arr)
    exif = img.getexif()
    exif[0x0112] = 6  # rotate 90 CW on display
    rgb = decode_rgb(_save(img, "JPEG", exif=exif.tobytes(), quality=95), **LIMITS)
    assert rgb.shape[:2] == (40, 20)  # displayed portrait
    assert rgb[5, 10].mean() > 200 and rgb[35, 10].mean() < 50  # white half now on top


@pytest.mark.parametrize("fmt", ["TIFF", "WEBP", "BMP"])
def test_other_formats_decode(fmt: str) -> None:
    arr = np.full((24, 24, 3), (180, 60, 20), np.uint8)
    rgb = decode_rgb(_save(Image.fromarray(arr), fmt, **({"lossless": True} if fmt == "WEBP" else {})), **LIMITS)
    assert tuple(rgb[12, 12]) == (180, 60, 20)


def test_pixel_limit_is_checked_from_the_header_before_decoding() -> None:
    data = png_claiming(30000, 30000)  # 900 Mpx claimed in < 200 bytes
    assert len(data) < 200
    err = _rejected(data)
    assert (_status(err), err.problem_type) == (413, "image-too-large")
    assert "decompression bomb" in err.detail
    err = _rejected(png_claiming(5000, 4000))  # below Pillow's guard, above ours
    assert (_status(err), err.problem_type) == (413, "image-too-large")
    assert "5000x4000 = 20000000 pixels" in err.detail


def test_refusals_are_specific() -> None:
    assert _rejected(b"").problem_type == "undecodable-image"
    assert _status(_rejected(b"%PDF-1.7\n...")) == 415
    good = _save(Image.fromarray(np.full((64, 64, 3), 90, np.uint8)), "JPEG")
    truncated = _rejected(good[: len(good) // 2])
    assert (_status(truncated), truncated.problem_type) == (400, "undecodable-image")
    tiny = _rejected(_save(Image.new("RGB", (1, 1)), "PNG"))
    assert (_status(tiny), tiny.problem_type) == (400, "image-too-small")
    too_big = _rejected(good, max_bytes=len(good) - 1)
    assert (_status(too_big), too_big.problem_type) == (413, "payload-too-large")
    frames = [Image.new("RGB", (32, 32), (80 * i, 40, 200 - 60 * i)) for i in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    animated = _rejected(buf.getvalue())
    assert (_status(animated), animated.problem_type) == (415, "multi-frame-image")
    assert "3 frames" in animated.detail


def test_open_image_reads_no_pixels() -> None:
    img = open_image(png_claiming(640, 480), max_pixels=10**7, max_bytes=10**6)
    assert img.size == (640, 480)


def test_fov_square_keeps_square_images_and_centres_wide_frames() -> None:
    square = np.random.default_rng(0).integers(0, 255, (50, 50, 3)).astype(np.uint8)
    assert fov_square(square) is square
    wide = np.zeros((100, 300, 3), np.uint8)
    wide[10:90, 120:200] = 150  # FOV of 80 px, off to the right of centre, dark margins
    out = fov_square(wide)
    assert out.shape == (100, 100, 3)  # margins trimmed down to a square around the FOV
    cols = np.flatnonzero(out.max(axis=(0, 2)) > 0)
    assert abs((cols[0] + cols[-1]) / 2 - 49.5) <= 1.0  # FOV centred
    assert (out > 0).any(axis=2).sum() == 80 * 80  # and whole
