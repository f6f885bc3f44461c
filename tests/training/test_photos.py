"""Real photographs scored by training code see exactly the pixels the service would feed the model."""

from __future__ import annotations

import numpy as np
import pytest

from models.image.preprocessing import FOV_LOCAL_MEAN, LEGACY
from service.inference.imaging import ImagePipeline
from service.inference.prepare import prepare_image
from support.images import IDRID
from support.shared_data import missing_reason
from training.data.photos import PhotoDataset, list_photos, serving_square

needs_idrid = pytest.mark.skipif(not IDRID.is_dir(), reason=missing_reason(IDRID))


@needs_idrid
@pytest.mark.parametrize(("size", "preprocessing"), [(64, FOV_LOCAL_MEAN), (128, FOV_LOCAL_MEAN), (64, LEGACY)])
def test_serving_square_equals_the_service_pixels(size: int, preprocessing: str) -> None:
    for path in list_photos(IDRID)[:2]:
        ours = serving_square(path, size, preprocessing)  # uint8 [size, size, 3]
        pipeline = ImagePipeline(size=size, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), preprocessing=preprocessing)
        theirs = prepare_image(path.read_bytes(), pipeline).pixels  # float32 [3, size, size] = x / 255
        assert ours.shape == (size, size, 3)
        np.testing.assert_array_equal(ours, np.rint(theirs.transpose(1, 2, 0) * 255.0).astype(np.uint8))


@needs_idrid
def test_photo_dataset_items() -> None:
    paths = list_photos(IDRID)
    assert len(paths) == 54 and all(p.suffix == ".jpg" for p in paths)
    ds = PhotoDataset(paths[:1], size=32)
    image, label, index = ds[0]
    assert image.shape == (3, 32, 32) and float(label) == 0.0 and index == 0
    assert float(image.min()) >= 0.0 and float(image.max()) <= 1.0
