"""DICOM photographs in: Ophthalmic Photography (and VL Photographic / Secondary Capture) files as 8-bit RGB.

Fundus cameras in clinics send DICOM. This module reads one DICOM Part-10 file (128-byte preamble +
``DICM``) with pydicom and hands back the same uint8 [H, W, 3] array :func:`service.inference.imaging.decode_rgb`
gives for a JPEG/PNG, so everything after decoding (quality gate, preprocessing, the model) is shared.

Rules, in the order they are applied, all from the header before any pixel is decoded:

1. Byte limit (``max_bytes``) as for any upload; a file that pydicom cannot parse -> 400.
2. SOP class: Ophthalmic Photography 8/16 bit, VL Photographic or Secondary Capture (:data:`PHOTO_SOP_CLASSES`);
   any other (a CT slice, an OCT volume, a structured report) -> 415 ``unsupported-media-type``.
3. Pixel data present, else 415; ``NumberOfFrames`` > 1 -> 415 ``multi-frame-image`` (one photograph per image).
4. Transfer syntax: uncompressed (Explicit/Implicit VR Little Endian) or JPEG Baseline (1.2.840.10008.1.2.4.50),
   what fundus cameras write; anything else (JPEG 2000, JPEG-LS, RLE, deflate, big endian) -> 415 naming it.
5. Geometry: ``Rows`` x ``Columns`` go through the same :func:`~service.inference.imaging.check_geometry` as a
   JPEG's header (pixel budget, padded square, minimum side, aspect ratio), so a declared 65535 x 65535 frame is
   refused (413) before a single pixel buffer is built.
6. Uncompressed pixel data: 8 or 16 bits allocated, 1 (MONOCHROME1/2) or 3 (RGB, YBR_FULL) samples, either
   planar configuration; fewer bytes than the header declares -> 400 ``undecodable-image`` (truncated).
   JPEG Baseline: the one encapsulated frame goes through ``decode_rgb`` itself (every JPEG rule applies,
   truncation included) and its size must match the header's.

Identifiers: :func:`read_dicom_tags` returns the laterality and the StudyInstanceUID for grouping eyes into an
exam; this module never logs them (nor any other tag), and pydicom's own value validation, whose warnings and
log lines quote the values, is switched off and its logger silenced before the first read (``_quiet_pydicom``).
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from models.decision import Eye
from service.inference.decode_deadline import DecodeDeadline
from service.inference.imaging import ImageRejected, check_geometry, decode_rgb, open_image

DICOM_MAGIC_OFFSET = 128
DICOM_MAGIC = b"DICM"

EXPLICIT_VR_LITTLE_ENDIAN = "1.2.840.10008.1.2.1"
IMPLICIT_VR_LITTLE_ENDIAN = "1.2.840.10008.1.2"
JPEG_BASELINE = "1.2.840.10008.1.2.4.50"
UNCOMPRESSED_SYNTAXES = frozenset({EXPLICIT_VR_LITTLE_ENDIAN, IMPLICIT_VR_LITTLE_ENDIAN})
ACCEPTED_SYNTAXES = UNCOMPRESSED_SYNTAXES | {JPEG_BASELINE}

OPHTHALMIC_PHOTOGRAPHY_8BIT = "1.2.840.10008.5.1.4.1.1.77.1.5.1"
PHOTO_SOP_CLASSES: dict[str, str] = {
    OPHTHALMIC_PHOTOGRAPHY_8BIT: "Ophthalmic Photography 8 Bit Image",
    "1.2.840.10008.5.1.4.1.1.77.1.5.2": "Ophthalmic Photography 16 Bit Image",
    "1.2.840.10008.5.1.4.1.1.77.1.4": "VL Photographic Image",
    "1.2.840.10008.5.1.4.1.1.7": "Secondary Capture Image",
}
_LATERALITY = {"R": Eye.RIGHT, "L": Eye.LEFT}


def is_dicom(data: bytes) -> bool:
    """True for a DICOM Part-10 file (``DICM`` after the 128-byte preamble)."""
    return data[DICOM_MAGIC_OFFSET:DICOM_MAGIC_OFFSET + 4] == DICOM_MAGIC


@dataclass(frozen=True)
class DicomTags:
    """What the service reads from a DICOM header besides the pixels. Never logged."""

    laterality: Eye | None  # ImageLaterality (0020,0062), else Laterality (0020,0060); None if absent or B/U
    study_uid: str | None  # StudyInstanceUID (0020,000D): the visit
    patient_id: str | None = None  # PatientID (0010,0020): whose visit (compared, never shown)


@functools.cache
def _quiet_pydicom() -> None:
    """Once per process, before the first read: pydicom neither validates values it reads (this module checks
    what it uses) nor logs. Its validation messages quote the offending value, e.g. a malformed
    StudyInstanceUID, and it logs them as well as warning: identifiers must never reach the logs."""
    from pydicom import config

    config.settings.reading_validation_mode = config.IGNORE
    pydicom_logger = logging.getLogger("pydicom")
    pydicom_logger.propagate = False
    pydicom_logger.handlers[:] = [logging.NullHandler()]


@contextlib.contextmanager
def _corrupt_is_rejected() -> Iterator[None]:
    """Any failure while parsing hostile bytes -> 400 ``undecodable-image``.

    pydicom parses lazily and raises many types on malformed data (its own errors, ``struct.error``,
    ``ValueError``, ``KeyError``, ``UnicodeDecodeError``, ...), at read time or when an element is first
    accessed; every one of them means the file is corrupt, never a server error.
    """
    try:
        with warnings.catch_warnings():  # pydicom's value warnings can quote identifiers
            warnings.simplefilter("ignore")
            yield
    except ImageRejected:
        raise
    except Exception as exc:  # the parser's failure modes are open-ended (docstring); none is a server error
        raise ImageRejected("undecodable-image", "The DICOM file is corrupt or truncated and cannot be read.") from exc


def _read(data: bytes, *, pixels: bool) -> Any:
    """pydicom's Dataset of the file (call inside ``_corrupt_is_rejected``)."""
    import pydicom

    _quiet_pydicom()
    return pydicom.dcmread(io.BytesIO(data), stop_before_pixels=not pixels)


def _text(ds: Any, keyword: str) -> str:
    value = ds.get(keyword)
    return str(value).strip().upper() if value is not None else ""


def read_dicom_tags(data: bytes) -> DicomTags:
    """Laterality and study UID from the header (the pixel data is not read)."""
    with _corrupt_is_rejected():
        ds = _read(data, pixels=False)
        side = _text(ds, "ImageLaterality") or _text(ds, "Laterality")
        uid = ds.get("StudyInstanceUID")
        patient = ds.get("PatientID")
        return DicomTags(laterality=_LATERALITY.get(side), study_uid=str(uid).strip() or None if uid else None,
                         patient_id=str(patient).strip() or None if patient else None)


def _int(ds: Any, keyword: str, default: int | None = None) -> int:
    value = ds.get(keyword, default)
    if value is None:
        raise ImageRejected("undecodable-image", f"The DICOM header lacks {keyword}, needed to read its pixels.")
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ImageRejected("undecodable-image", f"The DICOM header's {keyword} is not a number.") from exc


def _check_header(ds: Any, *, max_pixels: int) -> tuple[str, int, int]:
    """Rules 2-5 of the module docstring; returns (transfer syntax, rows, columns)."""
    sop = str(ds.get("SOPClassUID") or ds.file_meta.get("MediaStorageSOPClassUID") or "")
    if sop not in PHOTO_SOP_CLASSES:
        raise ImageRejected(
            "unsupported-media-type",
            f"The DICOM object is not a photograph (SOP class {sop or 'missing'}); send an Ophthalmic "
            "Photography, VL Photographic or Secondary Capture image.",
        )
    if "PixelData" not in ds:
        raise ImageRejected("unsupported-media-type", "The DICOM file has no pixel data: there is no image to grade.")
    frames = _int(ds, "NumberOfFrames", 1)
    if frames != 1:
        raise ImageRejected(
            "multi-frame-image", f"The DICOM file holds {frames} frames; send one photograph per file."
        )
    syntax = str(ds.file_meta.get("TransferSyntaxUID") or "")
    if syntax not in ACCEPTED_SYNTAXES:
        raise ImageRejected(
            "unsupported-media-type",
            f"DICOM transfer syntax {syntax or 'missing'} is not accepted; send uncompressed (Explicit VR Little "
            f"Endian {EXPLICIT_VR_LITTLE_ENDIAN}) or JPEG Baseline ({JPEG_BASELINE}) pixel data.",
        )
    rows, columns = _int(ds, "Rows"), _int(ds, "Columns")
    check_geometry(columns, rows, max_pixels=max_pixels)
    return syntax, rows, columns


def _uncompressed_rgb(ds: Any, pixel_data: bytes, rows: int, columns: int) -> np.ndarray:
    """Rule 6 for uncompressed pixel data -> uint8 [rows, columns, 3]."""
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


def _jpeg_frame(pixel_data: bytes) -> bytes:
    """The one encapsulated frame of JPEG Baseline pixel data (its fragments joined)."""
    from pydicom.encaps import generate_frames

    try:
        frames = list(generate_frames(pixel_data, number_of_frames=1))
    except (ValueError, KeyError, IndexError, TypeError, EOFError) as exc:
        raise ImageRejected("undecodable-image", "The DICOM encapsulated pixel data is corrupt or truncated.") from exc
    if len(frames) != 1 or not frames[0]:
        raise ImageRejected("undecodable-image", "The DICOM encapsulated pixel data holds no complete frame.")
    return frames[0]


def decode_dicom_rgb(data: bytes, *, max_pixels: int, max_bytes: int, size: int | None = None) -> np.ndarray:
    """Validate a DICOM photograph from its header, then decode it to uint8 [H, W, 3] (module docstring)."""
    if len(data) > max_bytes:
        raise ImageRejected("payload-too-large", f"The image is {len(data)} bytes; the limit is {max_bytes} bytes.")
    with _corrupt_is_rejected():
        ds = _read(data, pixels=True)  # the raw element bytes only (at most max_bytes): nothing is decoded yet
        syntax, rows, columns = _check_header(ds, max_pixels=max_pixels)
        pixel_data = ds.get("PixelData")
        if not isinstance(pixel_data, bytes | bytearray) or not pixel_data:
            raise ImageRejected("undecodable-image", "The DICOM pixel data is empty or truncated.")
        if syntax in UNCOMPRESSED_SYNTAXES:
            return _uncompressed_rgb(ds, bytes(pixel_data), rows, columns)
        frame = _jpeg_frame(bytes(pixel_data))
    inner = open_image(frame, max_pixels=max_pixels, max_bytes=max_bytes)
    if inner.format != "JPEG" or inner.size != (columns, rows):
        raise ImageRejected(
            "undecodable-image",
            f"The DICOM frame is a {inner.format} of {inner.size[0]}x{inner.size[1]} px where the header declares "
            f"a JPEG of {columns}x{rows} px.",
        )
    return decode_rgb(frame, max_pixels=max_pixels, max_bytes=max_bytes, size=size)


def decode_photograph(data: bytes, *, max_pixels: int, max_bytes: int, size: int | None = None,
                      deadline: DecodeDeadline | None = None) -> np.ndarray:
    """Any accepted upload -> uint8 [H, W, 3]: a DICOM file here, every other format by ``decode_rgb``
    (within ``deadline``, when given)."""
    if is_dicom(data):
        return decode_dicom_rgb(data, max_pixels=max_pixels, max_bytes=max_bytes, size=size)
    return decode_rgb(data, max_pixels=max_pixels, max_bytes=max_bytes, size=size, deadline=deadline)
