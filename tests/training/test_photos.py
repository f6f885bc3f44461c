"""Real photographs scored by training code see exactly the pixels the service would feed the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from models.preprocessing import FOV_LOCAL_MEAN, LEGACY
from service.inference.imaging import ImagePipeline
from service.inference.scoring import prepare_image
from support.images import IDRID
from support.shared_data import missing_reason
from training.data.dataset import ManifestDataset
from training.data.manifest import ManifestRow
from training.data.photos import PhotoDataset, list_photos, serving_square

needs_idrid = pytest.mark.skipif(not IDRID.is_dir(), reason=missing_reason(IDRID))


@needs_idrid
@pytest.mark.parametrize("size", [64, 128])
def test_serving_square_equals_the_service_pixels(size: int) -> None:
    for path in list_photos(IDRID)[:2]:
        ours = serving_square(path, size)  # uint8 [size, size, 3]
        pipeline = ImagePipeline(size=size, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), preprocessing=FOV_LOCAL_MEAN)
        theirs = prepare_image(path.read_bytes(), pipeline).pixels  # float32 [3, size, size] = x / 255
        assert ours.shape == (size, size, 3)
        np.testing.assert_array_equal(ours, np.rint(theirs.transpose(1, 2, 0) * 255.0).astype(np.uint8))


@needs_idrid
def test_photo_dataset_items_and_legacy_refused() -> None:
    paths = list_photos(IDRID)
    assert len(paths) == 54 and all(p.suffix == ".jpg" for p in paths)
    ds = PhotoDataset(paths[:1], size=32)
    image, label, index = ds[0]
    assert image.shape == (3, 32, 32) and float(label) == 0.0 and index == 0
    assert float(image.min()) >= 0.0 and float(image.max()) <= 1.0
    with pytest.raises(ValueError, match="fov-local-mean/1"):
        serving_square(paths[0], 32, LEGACY)


@pytest.mark.parametrize("side", [512, 2400])  # 2400 px: the JPEG is decoded at a reduced DCT scale (draft)
def test_training_loader_and_service_see_the_same_pixels_of_a_jpeg(tmp_path: Path, side: int) -> None:
    """One file through the training data set and through the service gives the identical tensor."""
    yy, xx = np.mgrid[:side, :side]
    disc = (yy - side / 2) ** 2 + (xx - side / 2) ** 2 < (0.45 * side) ** 2
    rng = np.random.default_rng(side)
    img = np.where(disc[..., None], rng.integers(60, 200, (side, side, 3)), 0).astype(np.uint8)
    path = tmp_path / f"{side}_left.jpg"
    Image.fromarray(img).save(path, quality=90)
    row = ManifestRow(path=path, grade=2, patient_id="p", eye="left", row_no=2)
    item = ManifestDataset([row], size=64, preprocessing=FOV_LOCAL_MEAN)[0][0].numpy()  # [3, 64, 64] in [0, 1]
    pipeline = ImagePipeline(size=64, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), preprocessing=FOV_LOCAL_MEAN)
    served = prepare_image(path.read_bytes(), pipeline).pixels  # float32 [3, 64, 64] = x / 255
    np.testing.assert_array_equal(item, served)
