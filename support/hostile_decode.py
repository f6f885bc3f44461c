"""Hostile uploads that are cheap on the wire and costly to decode (shared with benchmarks).

- ``jpeg_many_scans``: a progressive JPEG of a flat frame whose cheapest scan (an end-of-band run over
  every block) is repeated: each copy is ~14 bytes and makes the decoder walk every 8x8 block again.
- ``tiff_tile_bomb``: a small TIFF whose single deflate tile is declared far larger than the frame.
- ``truncated_jpeg``: a real JPEG cut at a fraction of its length with an end-of-image marker appended.
"""

from __future__ import annotations

import io
import re
import struct
import zlib

import numpy as np
from PIL import Image


def _scans(data: bytes) -> tuple[list[bytes], int]:
    """The scan segments (SOS header + entropy data) of a JPEG written by Pillow, and where EOI is."""
    starts = [m.start() for m in re.finditer(b"\xff\xda", data)]
    eoi = data.rindex(b"\xff\xd9")
    return [data[s : (starts[i + 1] if i + 1 < len(starts) else eoi)] for i, s in enumerate(starts)], eoi


def jpeg_many_scans(side: int, extra_scans: int) -> bytes:
    """A ``side``-px progressive JPEG with its smallest scan repeated ``extra_scans`` more times."""
    buf = io.BytesIO()
    Image.fromarray(np.full((side, side, 3), 90, np.uint8)).save(buf, "JPEG", quality=90, progressive=True)
    data = buf.getvalue()
    scans, eoi = _scans(data)
    return data[:eoi] + min(scans, key=len) * extra_scans + data[eoi:]


def tiff_tile_bomb(side: int, tile: int) -> bytes:
    """A ``side``-px 8-bit grey TIFF with one deflate tile declared ``tile x tile`` (compressed zeros)."""
    comp = zlib.compressobj(9)
    zeros = b"\x00" * (1 << 20)
    total, chunks = tile * tile, []
    while total > 0:
        chunks.append(comp.compress(zeros[: min(total, len(zeros))]))
        total -= len(zeros)
    payload = b"".join(chunks) + comp.flush()
    entries = [  # (tag, type, value): 3 = SHORT, 4 = LONG
        (256, 4, side), (257, 4, side), (258, 3, 8), (259, 3, 8), (262, 3, 1), (277, 3, 1),
        (322, 4, tile), (323, 4, tile), (324, 4, 0), (325, 4, len(payload)),
    ]
    ifd_at = 8
    data_at = ifd_at + 2 + 12 * len(entries) + 4
    ifd = struct.pack("<H", len(entries))
    for tag, typ, value in entries:
        value = data_at if tag == 324 else value
        packed = struct.pack("<HH", value, 0) if typ == 3 else struct.pack("<I", value)
        ifd += struct.pack("<HHI", tag, typ, 1) + packed
    return b"II*\x00" + struct.pack("<I", ifd_at) + ifd + struct.pack("<I", 0) + payload


def truncated_jpeg(image: np.ndarray, fraction: float) -> bytes:
    """``image`` as a baseline JPEG cut at ``fraction`` of its bytes, with ``FF D9`` appended."""
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "JPEG", quality=90)
    data = buf.getvalue()
    return data[: int(len(data) * fraction)] + b"\xff\xd9"
