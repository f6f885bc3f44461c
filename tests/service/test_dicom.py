"""DICOM photographs: both transfer syntaxes give the photograph's pixels; hostile files get a specific refusal.

Files are built with pydicom (tests.helpers.dicom_files) around generated fundus images, and around real ODIR
photographs when the shared data is present (skipped with a printed reason otherwise).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.outcome.decision import Eye
from service.http.errors import IMAGE_PROBLEM_STATUS
from service.inference.dicom import decode_dicom_rgb, decode_photograph, is_dicom, read_dicom_tags
from service.inference.imaging import ImageRejected, decode_rgb
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import ScorerSpec
from support.images import encode, fundus_like
from support.shared_data import ODIR, missing_reason
from tests.helpers.dicom_files import CT_IMAGE, EXPLICIT_VR_LE, JPEG_BASELINE, odir_pair, op_dicom, rgb_of

LIMITS: dict[str, Any] = {"max_pixels": 40_000_000, "max_bytes": 20 * 1024 * 1024}


def _rejected(data: bytes, **limits: int) -> ImageRejected:
    with pytest.raises(ImageRejected) as info:
        decode_photograph(data, **{**LIMITS, **limits})
    return info.value


def test_uncompressed_dicom_gives_exactly_the_photographs_pixels() -> None:
    rgb = fundus_like(3, size=120)
    data = op_dicom(rgb, syntax=EXPLICIT_VR_LE)
    assert is_dicom(data) and not is_dicom(encode(rgb))
    np.testing.assert_array_equal(decode_photograph(data, **LIMITS), rgb)


def test_planar_and_monochrome_uncompressed_layouts() -> None:
    rgb = fundus_like(4, size=64)
    planar = op_dicom(rgb, pixel_data=np.ascontiguousarray(rgb.transpose(2, 0, 1)).tobytes(), PlanarConfiguration=1)
    np.testing.assert_array_equal(decode_photograph(planar, **LIMITS), rgb)
    grey = rgb[:, :, 0]
    mono = op_dicom(rgb, pixel_data=grey.tobytes(), SamplesPerPixel=1, PhotometricInterpretation="MONOCHROME2")
    np.testing.assert_array_equal(decode_photograph(mono, **LIMITS), np.repeat(grey[:, :, None], 3, axis=2))


def test_jpeg_baseline_dicom_decodes_like_the_same_jpeg() -> None:
    rgb = fundus_like(5, size=128)
    data = op_dicom(rgb, syntax=JPEG_BASELINE, jpeg_quality=90)
    jpeg = encode(rgb, "JPEG", quality=90)
    np.testing.assert_array_equal(decode_photograph(data, **LIMITS), decode_rgb(jpeg, **LIMITS))


def test_laterality_and_study_come_from_the_header() -> None:
    rgb = fundus_like(1, size=64)
    assert read_dicom_tags(op_dicom(rgb, laterality="L", study_uid="1.2.3")).laterality is Eye.LEFT
    tags = read_dicom_tags(op_dicom(rgb, laterality=None, Laterality="R", study_uid="1.2.3.4"))
    assert tags.laterality is Eye.RIGHT and tags.study_uid == "1.2.3.4"
    assert read_dicom_tags(op_dicom(rgb, laterality="B")).laterality is None


@pytest.mark.parametrize("syntax", [EXPLICIT_VR_LE, JPEG_BASELINE])
def test_real_odir_photograph_as_dicom_scores_like_the_jpeg(syntax: str, tiny_artifact: Path) -> None:
    pair = odir_pair()
    if pair is None:
        pytest.skip(missing_reason(ODIR))

    scorer = load_scorer(ScorerSpec(model_dir=tiny_artifact, backend="torch", device="cpu"))
    right = pair[0]
    rgb = rgb_of(right)
    as_dicom = op_dicom(rgb, syntax=syntax, jpeg_quality=95)
    reference = encode(rgb, "PNG") if syntax == EXPLICIT_VR_LE else encode(rgb, "JPEG", quality=95)
    a, b = prepare_image(as_dicom, scorer.pipeline), prepare_image(reference, scorer.pipeline)
    np.testing.assert_array_equal(a.pixels, b.pixels)
    assert a.quality == b.quality
    [sa], [sb] = scorer.score_batch([a]), scorer.score_batch([b])
    assert sa.probability == sb.probability and sa.outcome is sb.outcome


# --- hostile files: each refused from the header, before its pixels are decoded ------------------------------

def test_declared_huge_frame_is_refused_before_decoding() -> None:
    small = fundus_like(2, size=32)
    exc = _rejected(op_dicom(small, Rows=65535, Columns=65535))
    assert exc.problem_type == "image-too-large" and IMAGE_PROBLEM_STATUS[exc.problem_type] == 413
    assert "65535x65535" in exc.detail


def test_truncated_uncompressed_pixel_data_is_400() -> None:
    rgb = fundus_like(2, size=64)
    exc = _rejected(op_dicom(rgb, pixel_data=rgb.tobytes()[: 64 * 64 * 3 // 2]))
    assert exc.problem_type == "undecodable-image" and "truncated" in exc.detail


def test_truncated_file_is_400() -> None:
    data = op_dicom(fundus_like(2, size=64))
    exc = _rejected(data[: len(data) - 5000])
    assert exc.problem_type == "undecodable-image"


def test_truncated_jpeg_frame_is_400() -> None:
    from pydicom.encaps import encapsulate

    rgb = fundus_like(2, size=96)
    jpeg = encode(rgb, "JPEG", quality=90)
    cut = jpeg[: len(jpeg) // 2]
    exc = _rejected(op_dicom(rgb, syntax=JPEG_BASELINE, pixel_data=encapsulate([cut + b"\0" * (len(cut) % 2)])))
    assert exc.problem_type == "undecodable-image"


def test_multi_frame_is_415() -> None:
    rgb = fundus_like(2, size=32)
    exc = _rejected(op_dicom(rgb, pixel_data=rgb.tobytes() * 2, NumberOfFrames=2))
    assert exc.problem_type == "multi-frame-image" and IMAGE_PROBLEM_STATUS[exc.problem_type] == 415


def test_no_pixel_data_is_415() -> None:
    exc = _rejected(op_dicom(fundus_like(2, size=32), with_pixels=False))
    assert exc.problem_type == "unsupported-media-type" and "no pixel data" in exc.detail


def test_other_sop_class_is_415() -> None:
    exc = _rejected(op_dicom(fundus_like(2, size=32), SOPClassUID=CT_IMAGE))
    assert exc.problem_type == "unsupported-media-type" and CT_IMAGE in exc.detail


def test_unsupported_transfer_syntax_is_415() -> None:
    from pydicom.encaps import encapsulate

    jpeg2000 = "1.2.840.10008.1.2.4.90"
    exc = _rejected(op_dicom(fundus_like(2, size=32), syntax=jpeg2000, pixel_data=encapsulate([b"\0" * 64])))
    assert exc.problem_type == "unsupported-media-type" and jpeg2000 in exc.detail


def test_byte_limit_applies_to_dicom() -> None:
    data = op_dicom(fundus_like(2, size=64))
    with pytest.raises(ImageRejected) as info:
        decode_dicom_rgb(data, max_pixels=LIMITS["max_pixels"], max_bytes=len(data) - 1)
    assert info.value.problem_type == "payload-too-large"


def test_garbage_after_the_dicom_magic_is_refused() -> None:
    exc = _rejected(b"\0" * 128 + b"DICM" + b"\xff" * 300)
    assert exc.problem_type in ("undecodable-image", "unsupported-media-type")  # unreadable, or no SOP class


@given(tail=st.binary(max_size=600), cut=st.integers(min_value=0, max_value=4000))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_corrupt_dicom_bytes_are_only_ever_refused(tail: bytes, cut: int) -> None:
    """Garbage after the DICOM magic, and real files cut anywhere or with garbage spliced in, give an
    ImageRejected (a 4xx), never another exception (a 500)."""
    real = op_dicom(fundus_like(1, size=32), syntax=JPEG_BASELINE if cut % 2 else EXPLICIT_VR_LE)
    for data in (b"\0" * 128 + b"DICM" + tail, real[: 132 + cut], real[: 132 + cut] + tail + real[132 + cut:]):
        with contextlib.suppress(ImageRejected):
            decode_photograph(data, **LIMITS)
