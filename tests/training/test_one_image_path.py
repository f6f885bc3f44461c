"""One image path: a file read by the training loader is the tensor the service computes from its bytes.

Covered: synthetic renders (every camera frame format: square, 3:2 and 4:3 with the disc clipped) through
``read_synthetic``, real ODIR-5K photographs through ``read_odir`` and the preprocessing cache, JPEGs larger
than the decode side (decoded at a reduced DCT scale), the framing family (a camera frame, a tight crop
clipped on four sides), both preprocessing contracts, and the transform an artifact hands out
(``ArtifactConfig.image_transform``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from models.artifact import DEFAULT_ARTIFACT_DIR, load_artifact
from models.image.decode import decode_side
from models.image.preprocessing import FOV_LOCAL_MEAN, LEGACY, PREPROCESSINGS
from models.image.transform import ImageTransform
from service.inference.imaging import ImagePipeline, decode_rgb
from service.inference.prepare import prepare_image
from support.shared_data import ODIR, missing_reason
from training.data.dataset import ManifestDataset
from training.data.manifest import ManifestRow, read_odir, read_synthetic

needs_odir = pytest.mark.skipif(not (ODIR / "labels.csv").is_file(), reason=missing_reason(ODIR))
SIZE = 48
CONTRACT_IDS = ["legacy" if p == LEGACY else p for p in PREPROCESSINGS]


def served(path: Path, preprocessing: str, size: int = SIZE) -> np.ndarray:
    """The service's input for the file at ``path`` with mean 0 and std 1: float32 [3, size, size] = x / 255."""
    pipeline = ImagePipeline(size=size, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), preprocessing=preprocessing)
    return prepare_image(path.read_bytes(), pipeline).pixels


def transform_for(preprocessing: str) -> ImageTransform:
    """The transform a run of this size and contract reads its images through (``TrainConfig.image_transform``)."""
    return ImageTransform(size=SIZE, preprocessing=preprocessing)


def assert_loader_equals_service(dataset: ManifestDataset) -> None:
    for i, row in enumerate(dataset.rows):
        np.testing.assert_array_equal(dataset[i][0].numpy(), served(Path(row.path), dataset.transform.preprocessing),
                                      err_msg=str(row.path))


@pytest.mark.parametrize("preprocessing", PREPROCESSINGS, ids=CONTRACT_IDS)
def test_synthetic_renders_through_the_training_loader_equal_the_service(tiny_data: Path,
                                                                         preprocessing: str) -> None:
    rows = list(read_synthetic(tiny_data))
    frames = {Image.open(r.path).size for r in rows[:8]}
    assert len(frames) > 1  # square and non-square camera frames both taken
    assert_loader_equals_service(ManifestDataset(rows[:8], transform=transform_for(preprocessing)))


@needs_odir
@pytest.mark.parametrize("preprocessing", PREPROCESSINGS, ids=CONTRACT_IDS)
def test_odir_photographs_through_the_manifest_and_its_cache_equal_the_service(tmp_path: Path,
                                                                               preprocessing: str) -> None:
    rows = read_odir(ODIR / "labels.csv", verify_images=False)
    picks = [next(r for r in rows if r.category == c) for c in ("normal_fundus", "dr_keyword", "other_non_dr")]
    assert_loader_equals_service(ManifestDataset(picks, transform=transform_for(preprocessing)))
    cached = ManifestDataset(picks, transform=transform_for(preprocessing)).use_cache(tmp_path / "cache")
    assert_loader_equals_service(cached)


@pytest.fixture(scope="module")
def large_jpeg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4:3 frame 3200 px wide with a disc of noise: larger than the decode side at a DCT scale of 1/2."""
    h, w = 2400, 3200
    yy, xx = np.mgrid[:h, :w]
    disc = (yy - h / 2) ** 2 + (xx - w / 2) ** 2 < (0.48 * h) ** 2
    img = np.where(disc[..., None], np.random.default_rng(0).integers(60, 200, (h, w, 3)), 0).astype(np.uint8)
    path = tmp_path_factory.mktemp("large") / "7_left.jpg"
    Image.fromarray(img).save(path, quality=90)
    return path


@pytest.mark.parametrize("preprocessing", PREPROCESSINGS, ids=CONTRACT_IDS)
def test_a_large_jpeg_is_decoded_at_one_reduced_size_by_both(large_jpeg: Path, preprocessing: str) -> None:
    """Both decode it at a DCT scale of 1/2 (the smallest keeping both sides >= decode_side), not in full."""
    path = large_jpeg
    transform = ImageTransform(size=SIZE, preprocessing=preprocessing)
    rgb = transform.decode(path)
    assert rgb.shape == (1200, 1600, 3) and min(rgb.shape[:2]) >= decode_side(SIZE)
    data = path.read_bytes()
    np.testing.assert_array_equal(rgb, decode_rgb(data, max_pixels=10**8, max_bytes=len(data), size=SIZE))
    row = ManifestRow(path=path, grade=0, patient_id="7", eye="left", row_no=2)
    assert_loader_equals_service(ManifestDataset([row], transform=transform_for(preprocessing)))


def test_the_artifact_hands_out_the_transform_the_service_runs(tiny_data: Path) -> None:
    artifact = load_artifact(DEFAULT_ARTIFACT_DIR)
    cfg = artifact.config
    transform = artifact.image_transform()
    assert (transform.size, transform.preprocessing, transform.mean, transform.std) == (
        cfg.input.size, cfg.input.preprocessing, cfg.input.mean, cfg.input.std)
    assert transform.preprocessing == FOV_LOCAL_MEAN != LEGACY
    path = next(iter(read_synthetic(tiny_data))).path
    pipeline = ImagePipeline.of(transform)
    assert pipeline.transform == transform
    assert pipeline == ImagePipeline(size=cfg.input.size, mean=cfg.input.mean, std=cfg.input.std,
                                     preprocessing=cfg.input.preprocessing)
    expected = prepare_image(path.read_bytes(), pipeline).pixels  # float32 [3, 256, 256]
    np.testing.assert_array_equal(transform(path), expected)
    np.testing.assert_array_equal(transform(path.read_bytes()), expected)


def test_an_unknown_contract_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="Unknown preprocessing 'fov-local-mean/2'; expected one of"):
        ImageTransform(size=SIZE, preprocessing="fov-local-mean/2")


@needs_odir
def test_the_framing_family_reaches_training_as_the_service_prepares_it(tmp_path: Path) -> None:
    """A camera frame and a tight crop (clipped on four sides) of a real photograph: the loader's tensor is the
    service's, and the tight crop arrives as the disc with its four sides missing (neutral grey there), which is
    what ``training.data.augment.frame_cuts`` teaches the network on the other photographs."""
    from support.framing_family import decode
    from support.framings import TIGHT_SIDE, canonical, render

    disc = canonical(decode(ODIR / "images" / "1_right.jpg"))
    assert disc is not None
    rows = []
    for i, framing in enumerate(("camera", "tight")):
        path = tmp_path / f"{i}_{framing}.png"
        Image.fromarray(render(disc, framing, 400, "plain", np.random.default_rng(i))).save(path)
        rows.append(ManifestRow(path=path, grade=0, patient_id=str(i), eye="left", row_no=i + 2))
    dataset = ManifestDataset(rows, transform=ImageTransform(size=96, preprocessing=FOV_LOCAL_MEAN))
    for i, row in enumerate(rows):
        np.testing.assert_array_equal(dataset[i][0].numpy(), served(row.path, FOV_LOCAL_MEAN, 96),
                                      err_msg=str(row.path))
    tight = dataset[1][0].numpy()  # [3, 96, 96] in [0, 1]; 0.5 (128) is the neutral grey outside the picture
    edge = round(96 * (1 - TIGHT_SIDE[1]) / 2) - 1  # inside the widest cut on every side
    for strip in (tight[:, :edge, 40:56], tight[:, -edge:, 40:56], tight[:, 40:56, :edge], tight[:, 40:56, -edge:]):
        np.testing.assert_allclose(strip, 128 / 255, atol=1e-6)
    assert float(np.abs(tight[:, 40:56, 40:56] - 128 / 255).mean()) > 0.01  # the retina in the middle
