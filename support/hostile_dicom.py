"""Hostile DICOM files and JPEG streams, written byte by byte (shared by tests/service/hostile and
benchmarks/hostile_bounds.py).

Each is small on the wire and was costly to read before the service checked it:

- ``deflate_bomb``: Deflated Explicit VR Little Endian (1.2.840.10008.1.2.1.99) whose dataset is zeros; it
  inflates about 1,000-fold, and a DICOM reader that inflates first parses hundreds of MB of empty elements;
- ``many_elements``: an uncompressed photograph whose header carries ``n`` tiny private elements before the
  pixel data (10 bytes each, so 10 MB is a million elements to parse);
- ``jpeg_with_garbage``: a progressive JPEG with thousands of repeated scans and one garbage byte before the
  first scan, where a marker walk that stops at the first non-marker byte counts no scan at all (libjpeg only
  warns, skips the byte and decodes every scan);
- ``jpeg_dicom``: any JPEG frame wrapped as a JPEG Baseline (1.2.840.10008.1.2.4.50) photograph.

Elements are written as Explicit VR Little Endian by hand (as ``support.hostile`` writes PNG chunks), so a
file can say things a well-behaved writer refuses to.
"""

from __future__ import annotations

import struct
import zlib

from support.hostile_decode import jpeg_many_scans

EXPLICIT_VR_LE = "1.2.840.10008.1.2.1"
DEFLATED_EXPLICIT_VR_LE = "1.2.840.10008.1.2.1.99"
JPEG_BASELINE = "1.2.840.10008.1.2.4.50"
OP_8BIT = "1.2.840.10008.5.1.4.1.1.77.1.5.1"
STUDY_UID = "1.2.826.0.1.3680043.8.498.39"
_LONG_VRS = frozenset({"OB", "OW", "OF", "SQ", "UT", "UN"})
_UNDEFINED = 0xFFFFFFFF


def element(group: int, number: int, vr: str, value: bytes) -> bytes:
    """One Explicit VR Little Endian element; ``value`` is padded to an even length."""
    if len(value) % 2:
        value += b"\0" if vr in ("UI", "OB") else b" "
    if vr in _LONG_VRS:
        return struct.pack("<HH2sHI", group, number, vr.encode(), 0, len(value)) + value
    return struct.pack("<HH2sH", group, number, vr.encode(), len(value)) + value


def file_meta(syntax: str, sop_class: str = OP_8BIT) -> bytes:
    """Preamble, ``DICM`` and the file meta group (0002) naming ``syntax``."""
    body = b"".join([
        element(0x0002, 0x0001, "OB", b"\x00\x01"),
        element(0x0002, 0x0002, "UI", sop_class.encode()),
        element(0x0002, 0x0003, "UI", b"1.2.826.0.1.3680043.8.498.39.1"),
        element(0x0002, 0x0010, "UI", syntax.encode()),
        element(0x0002, 0x0012, "UI", b"1.2.826.0.1.3680043.8.498"),
    ])
    return b"\0" * 128 + b"DICM" + element(0x0002, 0x0000, "UL", struct.pack("<I", len(body))) + body


def photo_header(rows: int, columns: int, *, photometric: str = "RGB", laterality: str = "R",
                 study_uid: str = STUDY_UID) -> bytes:
    """The dataset elements of an 8-bit colour Ophthalmic Photography image, up to its pixel data."""
    return b"".join([
        element(0x0008, 0x0016, "UI", OP_8BIT.encode()),
        element(0x0008, 0x0018, "UI", b"1.2.826.0.1.3680043.8.498.39.1"),
        element(0x0008, 0x0060, "CS", b"OP"),
        element(0x0010, 0x0020, "LO", b"anon"),
        element(0x0020, 0x000D, "UI", study_uid.encode()),
        element(0x0020, 0x000E, "UI", b"1.2.826.0.1.3680043.8.498.39.2"),
        element(0x0020, 0x0062, "CS", laterality.encode()),
        element(0x0028, 0x0002, "US", struct.pack("<H", 3)),
        element(0x0028, 0x0004, "CS", photometric.encode()),
        element(0x0028, 0x0006, "US", struct.pack("<H", 0)),
        element(0x0028, 0x0010, "US", struct.pack("<H", rows)),
        element(0x0028, 0x0011, "US", struct.pack("<H", columns)),
        element(0x0028, 0x0100, "US", struct.pack("<H", 8)),
        element(0x0028, 0x0101, "US", struct.pack("<H", 8)),
        element(0x0028, 0x0102, "US", struct.pack("<H", 7)),
        element(0x0028, 0x0103, "US", struct.pack("<H", 0)),
    ])


def deflate_bomb(compressed_bytes: int) -> bytes:
    """A deflated-syntax DICOM whose dataset is about ``compressed_bytes`` of raw deflate of zeros
    (each KiB inflates to about 1 MiB)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    zeros = b"\0" * (1 << 20)
    chunks: list[bytes] = []
    size = 0
    while size < compressed_bytes:
        chunk = comp.compress(zeros)
        chunks.append(chunk)
        size += len(chunk)
    chunks.append(comp.flush())
    return file_meta(DEFLATED_EXPLICIT_VR_LE) + b"".join(chunks)


def many_elements(count: int, *, side: int = 64) -> bytes:
    """An uncompressed ``side``-px photograph with ``count`` 10-byte private elements before its pixel data."""
    groups = [0x1001 + 2 * g for g in range(count // 0x10000 + 1)]  # odd groups: private, any number
    filler = bytearray()
    for i in range(count):
        filler += struct.pack("<HH2sH2s", groups[i >> 16], i & 0xFFFF, b"LO", 2, b"x ")
    pixels = element(0x7FE0, 0x0010, "OB", bytes(side * side * 3))
    return file_meta(EXPLICIT_VR_LE) + photo_header(side, side) + bytes(filler) + pixels


def jpeg_with_garbage(side: int, extra_scans: int) -> bytes:
    """``jpeg_many_scans(side, extra_scans)`` with one zero byte right before its first scan (SOS) marker."""
    data = jpeg_many_scans(side, extra_scans)
    first_scan = data.index(b"\xff\xda")
    return data[:first_scan] + b"\x00" + data[first_scan:]


def jpeg_dicom(frame: bytes, rows: int, columns: int) -> bytes:
    """``frame`` as the one encapsulated frame of a JPEG Baseline photograph declared ``columns x rows``."""
    if len(frame) % 2:
        frame += b"\0"
    items = (struct.pack("<HHI", 0xFFFE, 0xE000, 0)  # empty basic offset table
             + struct.pack("<HHI", 0xFFFE, 0xE000, len(frame)) + frame
             + struct.pack("<HHI", 0xFFFE, 0xE0DD, 0))  # sequence delimiter
    pixels = struct.pack("<HH2sHI", 0x7FE0, 0x0010, b"OB", 0, _UNDEFINED) + items
    return file_meta(JPEG_BASELINE) + photo_header(rows, columns, photometric="YBR_FULL_422") + pixels
