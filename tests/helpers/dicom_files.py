"""DICOM Ophthalmic Photography files built with pydicom, for the decode, API and batch tests.

``op_dicom(rgb, syntax=...)`` writes a real Part-10 file around an RGB photograph: uncompressed (Explicit VR
Little Endian) or JPEG Baseline encapsulated (the JPEG encoded by Pillow, as a camera's codec would). Keyword
arguments override header fields, so hostile files (a declared 65535 x 65535 frame, another SOP class, several
frames) are the same builder with one field changed. ``raw`` writes an element's value byte for byte, for values
pydicom corrects when it writes them (a UID with a trailing space, a lower-case code string).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from support.shared_data import ODIR

EXPLICIT_VR_LE = "1.2.840.10008.1.2.1"
JPEG_BASELINE = "1.2.840.10008.1.2.4.50"
OP_8BIT = "1.2.840.10008.5.1.4.1.1.77.1.5.1"
CT_IMAGE = "1.2.840.10008.5.1.4.1.1.2"
ODIR_IMAGES = ODIR / "images"


def op_dicom(
    rgb: np.ndarray,
    *,
    syntax: str = EXPLICIT_VR_LE,
    laterality: str | None = "R",
    study_uid: str = "1.2.826.0.1.3680043.8.498.1",
    jpeg_quality: int = 95,
    pixel_data: bytes | None = None,
    with_pixels: bool = True,
    raw: Mapping[str, bytes] | None = None,
    **fields: Any,
) -> bytes:
    """A DICOM OP 8-bit file of ``rgb`` (uint8 [H, W, 3]); ``fields`` override any header keyword; ``raw`` gives
    data set elements (by keyword) their value bytes exactly, padding included (even lengths, Explicit VR)."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.encaps import encapsulate
    from pydicom.uid import UID, generate_uid

    rows, columns = rgb.shape[:2]
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = UID(fields.get("SOPClassUID", OP_8BIT))
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = UID(syntax)
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = study_uid
    ds.SeriesInstanceUID = generate_uid()
    ds.Modality = "OP"
    ds.PatientID = "anon"
    if laterality is not None:
        ds.ImageLaterality = laterality
    ds.SamplesPerPixel = 3
    ds.PlanarConfiguration = 0
    ds.Rows, ds.Columns = rows, columns
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    if syntax != EXPLICIT_VR_LE:
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, "JPEG", quality=jpeg_quality)
        ds.PhotometricInterpretation = "YBR_FULL_422"
        frame = buf.getvalue()
        data = encapsulate([frame]) if pixel_data is None else pixel_data
    else:
        ds.PhotometricInterpretation = "RGB"
        data = np.ascontiguousarray(rgb, dtype=np.uint8).tobytes() if pixel_data is None else pixel_data
    if with_pixels:
        ds.PixelData = data
        ds["PixelData"].VR = "OB"
        if syntax != EXPLICIT_VR_LE:
            ds["PixelData"].is_undefined_length = True
    for key, value in fields.items():
        setattr(ds, key, value)
    placeholders = {}
    for keyword, value in (raw or {}).items():
        assert len(value) % 2 == 0, "a DICOM value has an even length"
        placeholders[keyword] = "9" * len(value)  # a valid value of every text VR, same length: patched below
        setattr(ds, keyword, placeholders[keyword])
    out = io.BytesIO()
    ds.save_as(out, enforce_file_format=True, little_endian=True, implicit_vr=False)
    return _patched(out.getvalue(), ds, raw or {}) if raw else out.getvalue()


def _patched(data: bytes, ds: Any, raw: Mapping[str, bytes]) -> bytes:
    """``data`` (Explicit VR Little Endian) with each ``raw`` element's value bytes replaced in place."""
    out = bytearray(data)
    for keyword, value in raw.items():
        elem = ds[keyword]
        head = struct.pack("<HH", elem.tag.group, elem.tag.element) + elem.VR.encode() + struct.pack("<H", len(value))
        at = out.find(head, 132)
        assert at > 0 and out[at + 8 : at + 8 + len(value)] == b"9" * len(value), f"{keyword} not found"
        out[at + 8 : at + 8 + len(value)] = value
    return bytes(out)


def odir_pair() -> tuple[Path, Path] | None:
    """Both eyes of one ODIR patient from the shared data, or None (with the reason printed) when absent."""
    right, left = ODIR_IMAGES / "0_right.jpg", ODIR_IMAGES / "0_left.jpg"
    if not (right.is_file() and left.is_file()):
        print(f"ODIR photographs not found under {ODIR_IMAGES}: the real-photograph cases are skipped")
        return None
    return right, left


def rgb_of(path: Path) -> np.ndarray:
    """uint8 [H, W, 3] of a photograph file."""
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"), dtype=np.uint8)
