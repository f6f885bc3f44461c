"""DICOM photographs in: Ophthalmic Photography (and VL Photographic / Secondary Capture) files as 8-bit RGB.

Fundus cameras in clinics send DICOM. This module reads one DICOM Part-10 file (128-byte preamble +
``DICM``) and hands back the same uint8 [H, W, 3] array :func:`service.inference.imaging.decode_rgb`
gives for a JPEG/PNG, so everything after decoding (quality gate, preprocessing, the model) is shared.

Rules, in the order they are applied, all from the header before any pixel is decoded; the header is read once
per file, with bounded work (``service.inference.dicom_header``):

1. Byte limit (``max_bytes``) as for any upload; a file that cannot be parsed -> 400.
2. Transfer syntax, from the file meta before the dataset is read: uncompressed (Explicit/Implicit VR Little
   Endian) or JPEG Baseline (1.2.840.10008.1.2.4.50), what fundus cameras write; anything else (JPEG 2000,
   JPEG-LS, RLE, big endian, and Deflated Explicit VR Little Endian, which is refused rather than inflated)
   -> 415 naming it.
3. Header size: at most ``MAX_HEADER_BYTES`` (1 MiB) of elements before the pixel data, else 422
   ``image-too-complex``.
4. SOP class: Ophthalmic Photography 8/16 bit, VL Photographic or Secondary Capture (:data:`PHOTO_SOP_CLASSES`);
   any other (a CT slice, an OCT volume, a structured report) -> 415 ``unsupported-media-type``.
5. Pixel data present, else 415; ``NumberOfFrames`` > 1 -> 415 ``multi-frame-image`` (one photograph per image).
6. Geometry: ``Rows`` x ``Columns`` go through the same :func:`~service.inference.imaging.check_geometry` as a
   JPEG's header (pixel budget, padded square, minimum side, aspect ratio), so a declared 65535 x 65535 frame is
   refused (413) before a single pixel buffer is built.
7. Uncompressed pixel data: 8 or 16 bits allocated, 1 (MONOCHROME1/2) or 3 (RGB, YBR_FULL) samples, either
   planar configuration; fewer bytes than the header declares -> 400 ``undecodable-image`` (truncated).
   JPEG Baseline: the one encapsulated frame goes through ``decode_rgb`` itself (every JPEG rule applies:
   scans counted, truncation, the decode deadline) and must be a sequential (not progressive) JPEG of the
   header's size.

With a decode deadline (the service's), reading the header and decoding the pixels both stop when it passes or
the request is abandoned (422 ``image-too-complex``), as for any other image.

Identifiers: :func:`read_dicom_tags` returns the laterality and the StudyInstanceUID for grouping eyes into an
exam (:func:`read_dicom` returns them with the header it decodes from); this module never logs them (nor any
other tag), and pydicom's own value validation, whose warnings and log lines quote the values, is switched off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from models.outcome.decision import Eye
from service.inference.decode_deadline import DecodeDeadline
from service.inference.dicom_header import (
    IMPLICIT_VR_LITTLE_ENDIAN,
    MAX_HEADER_BYTES,
    DicomHeader,
    corrupt_is_rejected,
    is_dicom,
    pixel_value,
    read_header,
)
from service.inference.imaging import ImageRejected, check_geometry, decode_rgb, open_image

__all__ = ["MAX_HEADER_BYTES", "DicomPhoto", "DicomTags", "decode_dicom_rgb",
           "decode_photograph", "dicom_rgb", "is_dicom", "read_dicom", "read_dicom_tags"]

EXPLICIT_VR_LITTLE_ENDIAN = "1.2.840.10008.1.2.1"
JPEG_BASELINE = "1.2.840.10008.1.2.4.50"
UNCOMPRESSED_SYNTAXES = frozenset({EXPLICIT_VR_LITTLE_ENDIAN, IMPLICIT_VR_LITTLE_ENDIAN})
ACCEPTED_SYNTAXES = UNCOMPRESSED_SYNTAXES | {JPEG_BASELINE}
_SYNTAX_HINT = (f"uncompressed (Explicit VR Little Endian {EXPLICIT_VR_LITTLE_ENDIAN}) or JPEG Baseline "
                f"({JPEG_BASELINE}) pixel data")

OPHTHALMIC_PHOTOGRAPHY_8BIT = "1.2.840.10008.5.1.4.1.1.77.1.5.1"
PHOTO_SOP_CLASSES: dict[str, str] = {
    OPHTHALMIC_PHOTOGRAPHY_8BIT: "Ophthalmic Photography 8 Bit Image",
    "1.2.840.10008.5.1.4.1.1.77.1.5.2": "Ophthalmic Photography 16 Bit Image",
    "1.2.840.10008.5.1.4.1.1.77.1.4": "VL Photographic Image",
    "1.2.840.10008.5.1.4.1.1.7": "Secondary Capture Image",
}
_LATERALITY = {"R": Eye.RIGHT, "L": Eye.LEFT}


@dataclass(frozen=True)
class DicomTags:
    """What the service reads from a DICOM header besides the pixels. Never logged."""

    laterality: Eye | None  # ImageLaterality (0020,0062), else Laterality (0020,0060); None if absent or B/U
    study_uid: str | None  # StudyInstanceUID (0020,000D): the visit
    patient_id: str | None = None  # PatientID (0010,0020): whose visit (compared, never shown)


@dataclass(frozen=True)
class DicomPhoto:
    """A DICOM photograph whose header passed rules 1-6: what to decode, and its tags."""

    header: DicomHeader
    tags: DicomTags
    rows: int
    columns: int


def _text(ds: Any, keyword: str) -> str:
    value = ds.get(keyword)
    return str(value).strip().upper() if value is not None else ""


def _tags(ds: Any) -> DicomTags:
    side = _text(ds, "ImageLaterality") or _text(ds, "Laterality")
    uid = ds.get("StudyInstanceUID")
    patient = ds.get("PatientID")
    return DicomTags(laterality=_LATERALITY.get(side), study_uid=str(uid).strip() or None if uid else None,
                     patient_id=str(patient).strip() or None if patient else None)


def read_dicom_tags(data: bytes, deadline: DecodeDeadline | None = None) -> DicomTags:
    """Laterality, study UID and PatientID from the header (bounded as for decoding; the pixel data is not read)."""
    with corrupt_is_rejected():
        return _tags(read_header(data, accepted=ACCEPTED_SYNTAXES, hint=_SYNTAX_HINT, deadline=deadline).dataset)


def _int(ds: Any, keyword: str, default: int | None = None) -> int:
    value = ds.get(keyword, default)
    if value is None:
        raise ImageRejected("undecodable-image", f"The DICOM header lacks {keyword}, needed to read its pixels.")
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ImageRejected("undecodable-image", f"The DICOM header's {keyword} is not a number.") from exc


def _check_header(header: DicomHeader, *, max_pixels: int) -> tuple[int, int]:
    """Rules 4-6 of the module docstring; returns (rows, columns)."""
    ds = header.dataset
    sop = str(ds.get("SOPClassUID") or header.meta.get("MediaStorageSOPClassUID") or "")
    if sop not in PHOTO_SOP_CLASSES:
        raise ImageRejected(
            "unsupported-media-type",
            f"The DICOM object is not a photograph (SOP class {sop or 'missing'}); send an Ophthalmic "
            "Photography, VL Photographic or Secondary Capture image.",
        )
    if header.pixel_at is None:
        raise ImageRejected("unsupported-media-type", "The DICOM file has no pixel data: there is no image to grade.")
    frames = _int(ds, "NumberOfFrames", 1)
    if frames != 1:
        raise ImageRejected(
            "multi-frame-image", f"The DICOM file holds {frames} frames; send one photograph per file."
        )
    rows, columns = _int(ds, "Rows"), _int(ds, "Columns")
    check_geometry(columns, rows, max_pixels=max_pixels)
    return rows, columns


def read_dicom(data: bytes, *, max_pixels: int, max_bytes: int, deadline: DecodeDeadline | None = None) -> DicomPhoto:
    """Rules 1-6: the header read once, checked, and its tags (module docstring)."""
    if len(data) > max_bytes:
        raise ImageRejected("payload-too-large", f"The image is {len(data)} bytes; the limit is {max_bytes} bytes.")
    with corrupt_is_rejected():
        header = read_header(data, accepted=ACCEPTED_SYNTAXES, hint=_SYNTAX_HINT, deadline=deadline)
        rows, columns = _check_header(header, max_pixels=max_pixels)
        return DicomPhoto(header, _tags(header.dataset), rows, columns)


def _uncompressed_rgb(ds: Any, pixel_data: memoryview, rows: int, columns: int) -> np.ndarray:
    """Rule 7 for uncompressed pixel data -> uint8 [rows, columns, 3]."""
    bits = _int(ds, "BitsAllocated")
    samples = _int(ds, "SamplesPerPixel", 1)
    photometric = _text(ds, "PhotometricInterpretation")
    if bits not in (8, 16) or samples not in (1, 3):
        raise ImageRejected(
            "unsupported-media-type",
            f"DICOM pixels of {bits} bits x {samples} samples are not accepted; send 8- or 16-bit grey or colour.",
        )
    expected = rows * columns * samples * bits // 8
    if len(pixel_data) < expected:
        raise ImageRejected(
            "undecodable-image",
            f"The DICOM pixel data is truncated: {len(pixel_data)} bytes where the header declares {expected}.",
        )
    dtype = np.uint8 if bits == 8 else np.dtype("<u2")
    flat = np.frombuffer(pixel_data, dtype=dtype, count=rows * columns * samples)
    if samples == 3 and _int(ds, "PlanarConfiguration", 0) == 1:
        arr = flat.reshape(3, rows, columns).transpose(1, 2, 0)  # [H, W, 3] from [3, H, W]
    else:
        arr = flat.reshape(rows, columns, samples)  # [H, W, S]
    if bits == 16:
        stored = min(max(_int(ds, "BitsStored", 16), 1), 16)
        top = (1 << stored) - 1
        arr = np.round(np.clip(arr, 0, top).astype(np.float32) * (255.0 / top)).astype(np.uint8)
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    if samples == 1:
        grey = arr[:, :, 0]
        if photometric == "MONOCHROME1":  # 0 is white
            grey = 255 - grey
        return np.repeat(grey[:, :, None], 3, axis=2)
    if photometric.startswith("YBR"):
        return np.asarray(Image.fromarray(arr, mode="YCbCr").convert("RGB"), dtype=np.uint8)
    return arr


def _jpeg_frame(pixel_data: memoryview) -> bytes:
    """The one encapsulated frame of JPEG Baseline pixel data (its fragments joined)."""
    from pydicom.encaps import generate_frames

    try:
        frames = list(generate_frames(bytes(pixel_data), number_of_frames=1))
    except (ValueError, KeyError, IndexError, TypeError, EOFError) as exc:
        raise ImageRejected("undecodable-image", "The DICOM encapsulated pixel data is corrupt or truncated.") from exc
    if len(frames) != 1 or not frames[0]:
        raise ImageRejected("undecodable-image", "The DICOM encapsulated pixel data holds no complete frame.")
    return frames[0]


def dicom_rgb(data: bytes, photo: DicomPhoto, *, max_pixels: int, max_bytes: int, size: int | None = None,
              deadline: DecodeDeadline | None = None) -> np.ndarray:
    """Rule 7: the pixels of a photograph :func:`read_dicom` accepted (``data``: the same file) -> uint8 [H, W, 3]."""
    header, rows, columns = photo.header, photo.rows, photo.columns
    with corrupt_is_rejected():
        pixel_data, encapsulated = pixel_value(data, header)
        if header.syntax in UNCOMPRESSED_SYNTAXES:
            if encapsulated or not pixel_data:
                raise ImageRejected("undecodable-image", "The DICOM pixel data is empty or of undefined length.")
            if deadline is not None:
                deadline.check()
            return _uncompressed_rgb(header.dataset, pixel_data, rows, columns)
        if not encapsulated:
            raise ImageRejected("undecodable-image", "The DICOM JPEG pixel data is not encapsulated.")
        frame = _jpeg_frame(pixel_data)
    inner = open_image(frame, max_pixels=max_pixels, max_bytes=max_bytes)
    if inner.format != "JPEG" or inner.size != (columns, rows):
        raise ImageRejected(
            "undecodable-image",
            f"The DICOM frame is a {inner.format} of {inner.size[0]}x{inner.size[1]} px where the header declares "
            f"a JPEG of {columns}x{rows} px.",
        )
    if inner.info.get("progressive") or inner.info.get("progression"):
        raise ImageRejected(
            "unsupported-media-type",
            f"The DICOM frame is a progressive JPEG where its transfer syntax ({JPEG_BASELINE}) says JPEG Baseline.",
        )
    return decode_rgb(frame, max_pixels=max_pixels, max_bytes=max_bytes, size=size, deadline=deadline)


def decode_dicom_rgb(data: bytes, *, max_pixels: int, max_bytes: int, size: int | None = None,
                     deadline: DecodeDeadline | None = None) -> np.ndarray:
    """Validate a DICOM photograph from its header, then decode it to uint8 [H, W, 3] (module docstring)."""
    photo = read_dicom(data, max_pixels=max_pixels, max_bytes=max_bytes, deadline=deadline)
    return dicom_rgb(data, photo, max_pixels=max_pixels, max_bytes=max_bytes, size=size, deadline=deadline)


def decode_photograph(data: bytes, *, max_pixels: int, max_bytes: int, size: int | None = None,
                      deadline: DecodeDeadline | None = None) -> np.ndarray:
    """Any accepted upload -> uint8 [H, W, 3]: a DICOM file here, every other format by ``decode_rgb``; both
    within ``deadline``, when given."""
    if is_dicom(data):
        return decode_dicom_rgb(data, max_pixels=max_pixels, max_bytes=max_bytes, size=size, deadline=deadline)
    return decode_rgb(data, max_pixels=max_pixels, max_bytes=max_bytes, size=size, deadline=deadline)
