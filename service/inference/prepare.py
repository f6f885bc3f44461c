"""The image path of the service and the batch job: image bytes -> ``PreparedImage``, ready for the network.

One photograph (JPEG/PNG/TIFF/WebP/BMP through ``service.inference.imaging``, DICOM through
``service.inference.dicom``) is decoded with the upload checks, quality-checked (``models.image.quality``)
and preprocessed by the artifact's ``models.image.transform.ImageTransform``: the same transform training ran on
the same file (tests/training/test_one_image_path.py). Scoring (``service.inference.scoring``) takes it from
here; nothing in this module knows the network.

Each prepared image also carries the digest of its decoded pixels (:func:`pixel_digest`), which the exam
identity rules (``service.screening.identity``, rule 5) compare: two files that differ only in their metadata
(DICOM laterality or SOPInstanceUID, a JPEG's EXIF) decode to the same pixels and are the same photograph.

Example::

    prepared = prepare_image(Path("eye.jpg").read_bytes(), scorer.pipeline)   # may raise ImageRejected
    prepared.quality.gradable, prepared.pixels.shape                         # True, (3, 256, 256)
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import numpy as np

from models.image.fov import fit_fov_circle
from models.image.quality import QualityReport, assess_quality
from service.inference.decode_deadline import DecodeDeadline
from service.inference.dicom import DicomTags, dicom_rgb, is_dicom, read_dicom
from service.inference.imaging import ImagePipeline, decode_rgb


@dataclass(frozen=True)
class PreparedImage:
    """A validated, quality-assessed, normalised image ready for the network."""

    pixels: np.ndarray  # float32 [C, H, W], normalised with the artifact's mean/std
    quality: QualityReport
    decode_ms: float
    dicom: DicomTags | None = None  # a DICOM file's laterality, study and patient, from the header it was decoded by
    # pixel_digest of the decoded frame (None only where an image was built without decoding, as in tests)
    pixel_sha256: str | None = None


def pixel_digest(rgb: np.ndarray) -> str:
    """sha256 hex over a decoded photograph's shape, dtype and pixel bytes (row-major), before any crop or resize.

    Equal digests are the same pixels, whatever the file around them said: a DICOM file re-sent with another
    laterality or SOPInstanceUID, a JPEG with other EXIF bytes. Exact, so it has no false matches; it does not
    catch the same photograph re-encoded (another JPEG quality, a PNG of a JPEG), resized, cropped, rotated or
    mirrored, whose pixels differ. The frame hashed is the one :func:`prepare_image` decodes (a large JPEG at its
    reduced DCT scale, ``models.image.decode.draft_for``), so two files compare alike only under one pipeline. Cost:
    sha256 on one core, about 2-3 ms per megapixel of uint8 RGB (random frames: 0.9 ms at 0.5 Mpx, 3.8 ms at
    2 Mpx, 12.7 ms at 4 Mpx); on the frames decoded for the 256 px model, a median 0.8 ms for ODIR-5K (0.26 Mpx)
    and 0.3 ms for EyePACS (benchmarks/cross_eye_phash.py), against a median 230 ms to prepare an ODIR-5K or
    IDRiD photograph.
    """
    frame = np.ascontiguousarray(rgb)
    digest = hashlib.sha256(f"{frame.shape}|{frame.dtype.str}|".encode())
    digest.update(frame.data)  # C-contiguous: hashed in place, no copy
    return digest.hexdigest()


def prepare_image(data: bytes, pipeline: ImagePipeline, deadline: DecodeDeadline | None = None) -> PreparedImage:
    """Decode, validate, quality-check and preprocess one image; raises ImageRejected (400/413/415/422).

    JPEG/PNG/TIFF/WebP/BMP go through ``service.inference.imaging``, DICOM photographs through
    ``service.inference.dicom``; both end in the same uint8 RGB array, decoded by ``models.image.decode``'s rule
    for the model's input size. The FOV circle is fitted once on that frame and used by both the quality
    gate and the artifact's transform (``pipeline.transform``, the ``models.image.transform.ImageTransform``
    training ran on the same file). A DICOM header is read once, and its tags come back with the image.
    The decode stops at ``deadline`` (default: ``pipeline.decode_timeout_s`` from now) with 422
    ``image-too-complex``; the service passes its own, which also stops when the client has gone.
    """
    start = time.perf_counter()
    deadline = deadline if deadline is not None else DecodeDeadline(pipeline.decode_timeout_s)
    transform = pipeline.transform
    limits = {"max_pixels": pipeline.max_pixels, "max_bytes": pipeline.max_bytes}
    tags = None
    if is_dicom(data):
        photo = read_dicom(data, **limits, deadline=deadline)
        rgb, tags = dicom_rgb(data, photo, **limits, size=transform.size, deadline=deadline), photo.tags
    else:
        rgb = decode_rgb(data, **limits, size=transform.size, deadline=deadline)
    digest = pixel_digest(rgb)  # the decoded frame, before the FOV crop and resize
    circle = fit_fov_circle(rgb)
    quality = assess_quality(rgb, circle)
    pixels = transform.normalise(transform.square(rgb, circle))  # [3, size, size]
    return PreparedImage(pixels=pixels, quality=quality, decode_ms=(time.perf_counter() - start) * 1e3, dicom=tags,
                         pixel_sha256=digest)
