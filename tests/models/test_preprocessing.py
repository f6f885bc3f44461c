"""The shared preprocessing (models.image.preprocessing): FOV crop, local-mean normalisation, the artifact contract.

Real photograph: one IDRiD image from ``<repo>/../shared/data/idrid-lesion-54`` (CC BY 4.0).
"""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from models.artifact import DEFAULT_ARTIFACT_DIR, ArtifactConfig, ArtifactError
from models.image.fov import fit_fov_circle
from models.image.preprocessing import (
    FOV_LOCAL_MEAN,
    LEGACY,
    crop_to_fov,
    disc_mask,
    fov_square,
    preprocess_fundus,
    resize_square,
)
from service.inference.imaging import ImagePipeline
from service.inference.prepare import prepare_image
from support.images import IDRID
from support.shared_data import missing_reason
from training.data.dataset import load_image

SIZE = 256


def disc_image(w: int, h: int, cx: float, cy: float, r: float, background: int = 0) -> np.ndarray:
    """An orange disc with a vertical stripe pattern on a dark background, uint8 [h, w, 3]."""
    yy, xx = np.mgrid[0:h, 0:w]
    inside = (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r
    stripes = 40 * ((xx // max(2, round(r / 20))) % 2)
    img = np.stack([160 + stripes, 70 + stripes // 2, 20 + 0 * xx], axis=-1)
    return np.where(inside[..., None], img, background).astype(np.uint8)


def stats(square: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and SD inside 90 % of the centred disc."""
    v = square[disc_mask(square.shape[0], 0.9)].astype(np.float64)
    return v.mean(axis=0), v.std(axis=0)


def test_clipped_disc_is_centred_and_padded_only_where_clipped() -> None:
    # a 3:2 frame cutting the disc at top and bottom (as IDRiD and most cameras do)
    img = disc_image(600, 400, cx=300, cy=200, r=260)
    circle = fit_fov_circle(img)
    assert circle is not None
    assert abs(circle.cx - 300) < 3 and abs(circle.cy - 200) < 3 and abs(circle.radius - 260) < 4
    out, valid = crop_to_fov(img, circle, SIZE)
    assert out.shape == (SIZE, SIZE, 3)
    # rows outside the frame (the cut caps: 60 px of 520 at each end -> ~30 px of 256) are padding
    cap = round((260 - 200) * SIZE / 520)
    assert not valid[: cap - 2].any() and not valid[-(cap - 2) :].any()
    assert valid[cap + 2 : -(cap + 2)].all()
    assert (out[~valid] == 0).all()
    # the visible disc fills the width: left and right edges of the middle row are in the disc
    mid = out[SIZE // 2]
    assert mid[2].max() > 100 and mid[-3].max() > 100
    # portrait: the same disc cut at left and right gives the transposed result
    out_t, valid_t = crop_to_fov(
        np.ascontiguousarray(img.transpose(1, 0, 2)), fit_fov_circle(img.transpose(1, 0, 2)), SIZE
    )
    assert np.array_equal(valid_t, valid.T)
    assert np.abs(out_t.astype(int) - out.transpose(1, 0, 2)).mean() < 2.0  # same up to resampling round-off


def test_no_circle_uses_the_whole_frame_padded() -> None:
    img = np.full((50, 100, 3), 200, np.uint8)
    out, valid = crop_to_fov(img, None, 64)
    assert valid.sum() == 64 * 32 and (out[valid] == 200).all() and (out[~valid] == 0).all()


def test_extreme_aspect_ratio_is_bounded_by_the_output() -> None:
    """A 100000 x 10 px image costs output-sized arrays, never a 100000 x 100000 padded square."""
    img = np.full((10, 100_000, 3), 120, np.uint8)
    tracemalloc.start()
    out = preprocess_fundus(img, SIZE)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert out.shape == (SIZE, SIZE, 3)
    assert peak < 64 * 2**20, peak  # a padded square would be 30 GB; the input itself is 3 MB


def test_local_mean_normalisation_removes_brightness_and_colour_cast() -> None:
    img = disc_image(512, 512, 256, 256, 240)
    dim = (img.astype(np.float32) * np.array([0.5, 0.8, 1.0])).astype(np.uint8)  # darker, redder cast
    a, b = preprocess_fundus(img, SIZE), preprocess_fundus(dim, SIZE)
    (ma, sa), (mb, sb) = stats(a), stats(b)
    assert np.all(np.abs(ma - 128) < 6) and np.all(np.abs(mb - 128) < 6)
    assert (a[~disc_mask(SIZE)] == 128).all()  # outside the FOV: the neutral grey
    assert 0.4 < sb[0] / sa[0] < 0.6  # contrast scales with the signal (x0.5 in red); the mean does not


@pytest.mark.skipif(not IDRID.is_dir(), reason=missing_reason(IDRID))
def test_real_and_synthetic_images_get_comparable_statistics() -> None:
    synthetic = pytest.importorskip("training.synthetic.render")
    real = np.asarray(Image.open(IDRID / "IDRiD_07.jpg").convert("RGB"))  # 1024 x 855, disc cut top/bottom
    synth = synthetic.render_fundus(np.random.default_rng(3), 2, size=512, gradable=True)[0]
    results = {}
    for name, rgb in (("real", real), ("synthetic", synth)):
        circle = fit_fov_circle(rgb)
        assert circle is not None, name
        # FOV radius in output px: the crop maps the fitted circle onto the output's inscribed disc
        crop, valid = crop_to_fov(rgb, circle, SIZE)
        refit = fit_fov_circle(np.where(valid[..., None], crop, 0).astype(np.uint8))
        assert refit is not None and abs(refit.radius - SIZE / 2) < 0.03 * SIZE, (name, refit)
        results[name] = stats(preprocess_fundus(rgb, SIZE, circle))
    # before: the raw photographs differ (real 1024 px frame with r ~ 512 px, synthetic 512 px);
    # after: both means sit at the neutral 128 (+- 5) and the SDs agree within a factor 2.5 per channel
    (m_real, s_real), (m_syn, s_syn) = results["real"], results["synthetic"]
    assert np.all(np.abs(m_real - 128) < 5) and np.all(np.abs(m_syn - 128) < 5), (m_real, m_syn)
    ratio = s_syn / s_real
    assert np.all((ratio > 1 / 2.5) & (ratio < 2.5)), (s_real, s_syn)


def test_service_and_training_run_the_same_function(tmp_path: Path) -> None:
    img = disc_image(450, 300, 225, 150, 170, background=18)
    path = tmp_path / "eye.png"
    Image.fromarray(img).save(path)
    expected = preprocess_fundus(img, 64)
    assert np.array_equal(load_image(path, 64, FOV_LOCAL_MEAN), expected)
    pipeline = ImagePipeline(size=64, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), preprocessing=FOV_LOCAL_MEAN)
    prepared = prepare_image(path.read_bytes(), pipeline)
    assert np.allclose(prepared.pixels, pipeline.normalise(expected))


def test_legacy_contract_is_unchanged() -> None:
    """Artifacts written before the shared preprocessing (``legacy``) still get pad-to-square + resize."""
    pipeline = ImagePipeline(size=SIZE, mean=(0.4, 0.3, 0.2), std=(0.2, 0.2, 0.1), preprocessing=LEGACY)
    img = disc_image(450, 300, 225, 150, 170)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    prepared = prepare_image(buf.getvalue(), pipeline)
    assert np.array_equal(prepared.pixels, pipeline.normalise(resize_square(fov_square(img), SIZE)))


def test_artifact_field_missing_means_legacy_and_unknown_is_refused() -> None:
    data = json.loads((DEFAULT_ARTIFACT_DIR / "config.json").read_text())
    del data["input"]["preprocessing"]
    assert ArtifactConfig.from_dict(data).input.preprocessing == LEGACY
    data["input"]["preprocessing"] = FOV_LOCAL_MEAN
    assert ArtifactConfig.from_dict(data).to_dict()["input"]["preprocessing"] == FOV_LOCAL_MEAN
    data["input"]["preprocessing"] = "fov-local-mean/2"
    with pytest.raises(ArtifactError, match=r"input\.preprocessing.*fov-local-mean/1"):
        ArtifactConfig.from_dict(data)
