"""Hostile uploads crafted cheaply: headers that declare huge images, metadata "zip bombs", odd frames.

Every body here is at most a few hundred KiB: the declared sizes are written into the headers by
hand (PNG IHDR, BMP info header, GIF screen/descriptor, TIFF IFDs, JPEG SOF, WebP VP8L), so nothing
of the declared size is ever allocated by the test. Shared by tests/service/test_hostile_inputs.py
and benchmarks/memory_bound.py (which replays them against a live service).

``BOMBS`` maps a name to ``(body, expected status, expected problem slug)``.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class Hostile:
    """One crafted upload and the answer the service must give it."""

    body: bytes
    status: int
    slug: str
    needle: str  # a word the problem ``detail`` must contain (limit name, numbers, ...)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_claiming(width: int, height: int, *, extra: bytes = b"", idat: bytes | None = None) -> bytes:
    """A PNG whose IHDR declares ``width x height`` RGB; ``extra`` chunks go before the (tiny) IDAT."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = idat if idat is not None else zlib.compress(b"\x00" * 64)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + extra + _png_chunk(b"IDAT", data)
            + _png_chunk(b"IEND", b""))


def png_black(side: int) -> bytes:
    """A real, complete ``side x side`` black RGB PNG built row by row from one compressed stream.

    Budget-sized "decompression bomb": tiny on the wire, ``3 * side**2`` bytes once decoded.
    """
    row = b"\x00" + b"\x00" * (3 * side)  # filter byte + pixels
    comp = zlib.compressobj(9)
    idat = b"".join(comp.compress(row) for _ in range(side)) + comp.flush()
    return png_claiming(side, side, idat=idat)


def bmp_claiming(width: int, height: int) -> bytes:
    """A 24-bit BMP header (BITMAPINFOHEADER) declaring ``width x height`` followed by 64 bytes of data."""
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    pixels = b"\x00" * 64
    header = struct.pack("<2sIHHI", b"BM", 14 + len(info) + len(pixels), 0, 0, 14 + len(info))
    return header + info + pixels


def gif_claiming(width: int, height: int) -> bytes:
    """A GIF89a whose screen and single image descriptor declare ``width x height`` (a 1-code LZW body)."""
    screen = struct.pack("<6sHHBBB", b"GIF89a", width, height, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    descriptor = b"," + struct.pack("<HHHHB", 0, 0, width, height, 0)
    lzw = b"\x02\x02\x4c\x01\x00"  # min code size 2, one sub-block, terminator
    return screen + descriptor + lzw + b";"


def _tiff_ifd(width: int, height: int, strip_offset: int, next_ifd: int) -> bytes:
    entries = [  # (tag, type, count, value): 3 = SHORT, 4 = LONG
        (256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
        (273, 4, 1, strip_offset), (277, 3, 1, 1), (278, 4, 1, height), (279, 4, 1, 64),
    ]
    body = struct.pack("<H", len(entries))
    for tag, typ, count, value in entries:
        packed = struct.pack("<HI", value, 0)[:4] if typ == 3 else struct.pack("<I", value)
        body += struct.pack("<HHI", tag, typ, count) + packed
    return body + struct.pack("<I", next_ifd)


def tiff_pages(sizes: list[tuple[int, int]], *, loop: bool = False) -> bytes:
    """A little-endian grayscale TIFF with one IFD per ``(width, height)``; ``loop``: last IFD -> first."""
    strip = 8
    ifd_size = 2 + 9 * 12 + 4
    first = strip + 64
    out = b"II*\x00" + struct.pack("<I", first) + b"\x00" * 64
    for i, (w, h) in enumerate(sizes):
        here = first + i * ifd_size
        nxt = here + ifd_size if i + 1 < len(sizes) else (first if loop else 0)
        out += _tiff_ifd(w, h, strip, nxt)
    return out


def jpeg_claiming(width: int, height: int) -> bytes:
    """A real 16x16 baseline JPEG with its SOF0 width/height patched to ``width x height``."""
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (120, 40, 20)).save(buf, format="JPEG", quality=80)
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


def webp_claiming(width: int, height: int) -> bytes:
    """A lossless WebP (VP8L) whose 14-bit width/height fields are patched to ``width x height``."""
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (120, 40, 20)).save(buf, format="WEBP", lossless=True)
    data = bytearray(buf.getvalue())
    at = data.index(b"VP8L") + 8  # chunk header: fourcc + size; then the 0x2f signature byte
    assert data[at] == 0x2F
    bits = int.from_bytes(data[at + 1 : at + 5], "little")
    bits = (bits & ~((1 << 28) - 1)) | (width - 1) | ((height - 1) << 14)
    data[at + 1 : at + 5] = bits.to_bytes(4, "little")
    return bytes(data)


def small_png(side: int = 64) -> bytes:
    """A plain ``side``-px RGB PNG (a valid base to hang metadata on)."""
    buf = io.BytesIO()
    Image.fromarray(np.full((side, side, 3), (120, 40, 20), np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def png_with_chunks(chunks: list[tuple[bytes, bytes]]) -> bytes:
    """``small_png`` with ``chunks`` inserted right after IHDR."""
    base = small_png()
    cut = 8 + 12 + 13  # signature + IHDR chunk
    return base[:cut] + b"".join(_png_chunk(k, d) for k, d in chunks) + base[cut:]


def _zeros_zlib(n: int) -> bytes:
    return zlib.compress(b"\x00" * n, 9)


def hostile_bodies(max_pixels: int) -> dict[str, Hostile]:
    """Every crafted upload, for a service whose ``RADSCREEN_MAX_PIXELS`` is ``max_pixels``.

    Needles name what the ``detail`` must say (the limit, the declared numbers).
    """
    mib = 1024 * 1024
    ztxt_bomb = b"comment\x00\x00" + _zeros_zlib(8 * mib)  # 8 MiB of text from ~8 KiB
    iccp_bomb = b"icc\x00\x00" + _zeros_zlib(8 * mib)
    many_ztxt = [(b"zTXt", b"k%d\x00\x00" % i + _zeros_zlib(mib - 64)) for i in range(80)]  # ~80 MiB total
    exif = b"Exif\x00\x00" + b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", 1) + struct.pack(
        "<HHII", 0x010E, 2, 0x7FFFFFFF, 26)  # ImageDescription claiming 2 GiB of ASCII
    return {
        "png-100000x10": Hostile(png_claiming(100_000, 10), 413, "image-too-large", "RADSCREEN_MAX_PIXELS"),
        "png-10x100000": Hostile(png_claiming(10, 100_000), 413, "image-too-large", "100000x100000"),
        "png-60000x700": Hostile(png_claiming(60_000, 700), 413, "image-too-large", "60000x700"),
        "bmp-100000x10": Hostile(bmp_claiming(100_000, 10), 413, "image-too-large", "RADSCREEN_MAX_PIXELS"),
        "bmp-60000x700": Hostile(bmp_claiming(60_000, 700), 413, "image-too-large", "60000x700"),
        "png-aspect-5:1": Hostile(png_claiming(640, 128), 400, "extreme-aspect-ratio", "5.0:1"),
        "png-declared-65535^2": Hostile(png_claiming(65_535, 65_535), 413, "image-too-large", "pixels"),
        "png-declared-over-budget": Hostile(
            png_claiming(max_pixels // 1000 + 1, 1000), 413, "image-too-large", str(max_pixels)),
        "jpeg-declared-65000^2": Hostile(jpeg_claiming(65_000, 65_000), 413, "image-too-large", "pixels"),
        "jpeg-declared-20000x3000": Hostile(jpeg_claiming(20_000, 3000), 413, "image-too-large", "20000x3000"),
        "webp-declared-16384^2": Hostile(webp_claiming(16_384, 16_384), 413, "image-too-large", "pixels"),
        "webp-declared-16000x900": Hostile(webp_claiming(16_000, 900), 413, "image-too-large", "16000x900"),
        "gif-declared-65535^2": Hostile(gif_claiming(65_535, 65_535), 413, "image-too-large", "pixels"),
        "gif-declared-30000x500": Hostile(gif_claiming(30_000, 500), 413, "image-too-large", "30000x500"),
        "tiff-declared-100000^2": Hostile(tiff_pages([(100_000, 100_000)]), 413, "image-too-large", "pixels"),
        "tiff-page2-huge": Hostile(tiff_pages([(64, 64), (100_000, 100_000)]), 415, "multi-frame-image", "2 frames"),
        "tiff-1000-pages": Hostile(tiff_pages([(64, 64)] * 1000), 415, "multi-frame-image", "more than 64 frames"),
        "tiff-ifd-loop": Hostile(tiff_pages([(64, 64), (64, 64)], loop=True), 415, "multi-frame-image", "frames"),
        "png-ztxt-8MiB-bomb": Hostile(png_with_chunks([(b"zTXt", ztxt_bomb)]), 400, "undecodable-image", "metadata"),
        "png-iccp-8MiB-bomb": Hostile(png_with_chunks([(b"iCCP", iccp_bomb)]), 400, "undecodable-image", "metadata"),
        "png-80-ztxt-1MiB": Hostile(png_with_chunks(many_ztxt), 400, "undecodable-image", "metadata"),
        "png-exif-claims-2GiB": Hostile(png_with_chunks([(b"eXIf", exif[6:])]), 200, "", ""),
    }
