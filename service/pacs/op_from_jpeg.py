"""A JPEG fundus photograph as an Ophthalmic Photography 8 Bit instance, to try the PACS path without a camera.

``radscreen dicom-from-jpeg`` writes it (``radscreen dicom-from-jpeg examples/fundus-gradable.jpg right.dcm --eye R``;
docs/integration.md). dcmtk's ``img2dcm`` makes Secondary Capture, which the PACS path refuses (only OP is graded);
this makes what a fundus camera sends: SOP class OP 8 Bit (1.2.840.10008.5.1.4.1.1.77.1.5.1), the photograph's own
JPEG bytes encapsulated unchanged as JPEG Baseline (no second lossy step), ``ImageLaterality`` R or L, and the
Patient / Study / Series / Equipment / OP attributes a validator (dciodvfy) asks for. Type 2 identifiers are left
empty unless given: the instance names no one.

Only a baseline 8-bit colour JPEG can be wrapped as it is; a progressive, 12-bit or greyscale file is refused
with :class:`JpegNotWrappableError`, which says how to re-save it. Two photographs of one visit share a study:
pass the first one's Study Instance UID (printed by the command) as ``--study-uid`` for the other eye.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, datetime

from PIL import Image, JpegImagePlugin
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.encaps import encapsulate
from pydicom.sequence import Sequence
from pydicom.uid import UID, JPEGBaseline8Bit, generate_uid

OP_8BIT = "1.2.840.10008.5.1.4.1.1.77.1.5.1"
MANUFACTURER = "Radial Screen dicom-from-jpeg (research prototype)"
_EYE_CODES = {"R": ("24028007", "Right eye"), "L": ("8966001", "Left eye")}  # SNOMED CT, Anatomic Region


class JpegNotWrappableError(ValueError):
    """The file is not a JPEG that can become an OP instance unchanged (the message says what to do)."""


@dataclass(frozen=True)
class OpInstance:
    """The written instance's bytes and the UIDs a second eye of the same visit needs."""

    data: bytes
    study_uid: str
    sop_instance_uid: str


def _check(jpeg: bytes) -> tuple[int, int, str]:
    """(rows, columns, photometric interpretation) of a baseline 8-bit colour JPEG, else JpegNotWrappableError."""
    try:
        image = Image.open(io.BytesIO(jpeg))
        image.verify()
        image = Image.open(io.BytesIO(jpeg))
    except Exception as exc:  # PIL's failure modes on arbitrary bytes are open-ended
        raise JpegNotWrappableError("not a readable image file") from exc
    if image.format != "JPEG":
        raise JpegNotWrappableError(f"a {image.format or 'non-JPEG'} file: save the photograph as a JPEG first")
    if image.mode != "RGB":
        raise JpegNotWrappableError(f"a {image.mode} JPEG: only colour (3-component, 8-bit) photographs are graded")
    if image.info.get("progressive") or image.info.get("progression"):
        raise JpegNotWrappableError("a progressive JPEG: re-save it as baseline (PIL: progressive=False)")
    if not isinstance(image, JpegImagePlugin.JpegImageFile) or getattr(image, "bits", 8) != 8:
        raise JpegNotWrappableError("not an 8-bit baseline JPEG")
    # 4:4:4 is full-resolution YCbCr; subsampled chroma is the 422 family in DICOM's terms (PS3.5 8.2.1)
    photometric = "YBR_FULL" if JpegImagePlugin.get_sampling(image) == 0 else "YBR_FULL_422"
    columns, rows = image.size
    return rows, columns, photometric


def op_from_jpeg(jpeg: bytes, *, eye: str, study_uid: str | None = None, patient_id: str = "",
                 patient_name: str = "", now: datetime | None = None) -> OpInstance:
    """The OP 8 Bit instance of ``jpeg`` for eye ``R`` or ``L`` (module docstring)."""
    if eye not in _EYE_CODES:
        raise ValueError(f"unknown eye {eye!r}; expected one of: R, L")
    rows, columns, photometric = _check(jpeg)
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d%H%M%S")
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = UID(OP_8BIT)
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = JPEGBaseline8Bit
    ds = Dataset()
    ds.file_meta = meta
    ds.SpecificCharacterSet = "ISO_IR 192"
    ds.SOPClassUID, ds.SOPInstanceUID = OP_8BIT, meta.MediaStorageSOPInstanceUID
    # Patient, General Study (type 2 left empty unless given: the instance names no one)
    ds.PatientName, ds.PatientID, ds.PatientBirthDate, ds.PatientSex = patient_name, patient_id, "", ""
    ds.StudyInstanceUID = study_uid or generate_uid()
    ds.StudyDate, ds.StudyTime = stamp[:8], stamp[8:]
    ds.ReferringPhysicianName, ds.StudyID, ds.AccessionNumber = "", "", ""
    # General Series, Ophthalmic Photography Series, General Equipment
    ds.Modality = "OP"
    ds.SeriesInstanceUID = generate_uid()
    ds.SeriesNumber = 1
    ds.Manufacturer = MANUFACTURER
    # General Image, Ophthalmic Photography Image, General Acquisition
    ds.InstanceNumber = 1
    ds.ImageType = ["ORIGINAL", "PRIMARY"]  # the camera's pixels, wrapped unchanged
    ds.PatientOrientation = ""
    ds.NumberOfFrames = 1
    ds.FrameIncrementPointer = 0x00181063  # Frame Time (one frame)
    ds.FrameTime = 0
    ds.ContentDate, ds.ContentTime = stamp[:8], stamp[8:]
    ds.AcquisitionDateTime = stamp
    ds.ImageLaterality = eye
    ds.BurnedInAnnotation = "NO"
    ds.LossyImageCompression = "01"
    ds.LossyImageCompressionMethod = "ISO_10918_1"
    ds.LossyImageCompressionRatio = f"{rows * columns * 3 / len(jpeg):.2f}"
    code, meaning = _EYE_CODES[eye]
    region = Dataset()
    region.CodeValue, region.CodingSchemeDesignator, region.CodeMeaning = code, "SCT", meaning
    ds.AnatomicRegionSequence = Sequence([region])
    ds.AcquisitionContextSequence = Sequence()
    ds.PatientEyeMovementCommanded = "NO"
    # Ophthalmic Photography Acquisition Parameters (type 2: unknown for a wrapped file)
    ds.RefractiveStateSequence = Sequence()
    ds.EmmetropicMagnification = None
    ds.IntraOcularPressure = None
    ds.HorizontalFieldOfView = None
    ds.PupilDilated = None
    # Ophthalmic Photographic Parameters: a fundus camera, the rest unknown (type 2)
    device = Dataset()
    device.CodeValue, device.CodingSchemeDesignator, device.CodeMeaning = "409898007", "SCT", "Fundus Camera"
    ds.AcquisitionDeviceTypeCodeSequence = Sequence([device])
    ds.IlluminationTypeCodeSequence = Sequence()
    ds.LightPathFilterTypeStackCodeSequence = Sequence()
    ds.ImagePathFilterTypeStackCodeSequence = Sequence()
    ds.LensesCodeSequence = Sequence()
    ds.DetectorType = ""
    # Synchronization (one photograph: nothing to synchronise with)
    ds.SynchronizationFrameOfReferenceUID = generate_uid()
    ds.SynchronizationTrigger = "NO TRIGGER"
    ds.AcquisitionTimeSynchronized = "N"
    # Image Pixel: the JPEG's own bytes, one frame
    ds.SamplesPerPixel, ds.PhotometricInterpretation, ds.PlanarConfiguration = 3, photometric, 0
    ds.Rows, ds.Columns = rows, columns
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = encapsulate([jpeg])
    ds["PixelData"].VR = "OB"
    ds["PixelData"].is_undefined_length = True
    out = io.BytesIO()
    ds.save_as(out, enforce_file_format=True)
    return OpInstance(out.getvalue(), str(ds.StudyInstanceUID), str(ds.SOPInstanceUID))
