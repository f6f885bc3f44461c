"""The image path of the service and the batch job: image bytes -> ``PreparedImage``, ready for the network.

One photograph (JPEG/PNG/TIFF/WebP/BMP through ``service.inference.imaging``, DICOM through
``service.inference.dicom``) is decoded with the upload checks, quality-checked (``service.inference.quality``)
and preprocessed by the artifact's ``models.transform.ImageTransform``: the same transform training ran on
the same file (tests/training/test_one_image_path.py). Scoring (``service.inference.scoring``) takes it from
here; nothing in this module knows the network.

Example::

    prepared = prepare_image(Path("eye.jpg").read_bytes(), scorer.pipeline)   # may raise ImageRejected
    prepared.quality.gradable, prepared.pixels.shape                         # True, (3, 256, 256)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from models.fov import fit_fov_circle
from service.inference.decode_deadline import DecodeDeadline
from service.inference.dicom import decode_photograph
from service.inference.imaging import ImagePipeline
from service.inference.quality import QualityReport, assess_quality


@dataclass(frozen=True)
class PreparedImage:
    """A validated, quality-assessed, normalised image ready for the network."""

    pixels: np.ndarray  # float32 [C, H, W], normalised with the artifact's mean/std
    quality: QualityReport
    decode_ms: float


def prepare_image(data: bytes, pipeline: ImagePipeline, deadline: DecodeDeadline | None = None) -> PreparedImage:
    """Decode, validate, quality-check and preprocess one image; raises ImageRejected (400/413/415).

    JPEG/PNG/TIFF/WebP/BMP go through ``service.inference.imaging``, DICOM photographs through
    ``service.inference.dicom``; both end in the same uint8 RGB array, decoded by ``models.decode``'s rule
    for the model's input size. The FOV circle is fitted once on that frame and used by both the quality
    gate and the artifact's transform (``pipeline.transform``, the ``models.transform.ImageTransform``
    training ran on the same file).
    """
    start = time.perf_counter()
    transform = pipeline.transform
    rgb = decode_photograph(data, max_pixels=pipeline.max_pixels, max_bytes=pipeline.max_bytes, size=transform.size,
                            deadline=deadline)
    circle = fit_fov_circle(rgb)
    quality = assess_quality(rgb, circle)
    pixels = transform.normalise(transform.square(rgb, circle))  # [3, size, size]
    return PreparedImage(pixels=pixels, quality=quality, decode_ms=(time.perf_counter() - start) * 1e3)
