"""Synthetic generator vs real photographs: camera frames, FOV clipping, colour, lesions by grade.

The colour test compares with the 54 IDRiD photographs in ``../shared/data/idrid-lesion-54`` (CC BY 4.0,
Porwal et al. 2018) and skips, saying why, only when that folder is absent. The full side-by-side table
(vessels, sharpness, texture) is printed by ``benchmarks/fundus_stats.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from support.images import IDRID
from support.shared_data import missing_reason
from training.synthetic import FRAME_FORMATS, FRAME_SHARES, plan_image, render_fundus, render_image
from training.synthetic.fundus import fov_mask, frame_shape, sample_geometry

WIDTH = 240
# FOV radius as a share of the frame height, per format (documented in training/synthetic/fundus.py)
RADIUS_OVER_HEIGHT = {"3:2": (0.57, 0.63), "4:3": (0.53, 0.58), "square_notch": (0.44, 0.47)}


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(list(key)))


def _fit_circle(image: np.ndarray) -> tuple[float, float, float]:
    """Kasa circle (cx, cy, r) through the FOV's row/column ends that do not touch the frame."""
    mask = ndimage.uniform_filter(image.max(axis=2).astype(np.float32), 3) > 25  # [H, W]
    h, w = mask.shape
    pts = []
    for r in np.flatnonzero(mask.any(axis=1)):
        cols = np.flatnonzero(mask[r])
        pts += [(c, r) for c in (cols[0], cols[-1]) if 1 < c < w - 2]
    for c in np.flatnonzero(mask.any(axis=0)):
        rows = np.flatnonzero(mask[:, c])
        pts += [(c, r) for r in (rows[0], rows[-1]) if 1 < r < h - 2]
    xy = np.asarray(pts, np.float64) + 0.5  # pixel centres
    sol, *_ = np.linalg.lstsq(np.column_stack([xy, np.ones(len(xy))]), -(xy**2).sum(axis=1), rcond=None)
    cx, cy = -sol[0] / 2, -sol[1] / 2
    return float(cx), float(cy), float(math.sqrt(cx**2 + cy**2 - sol[2]))


def test_every_frame_format_is_deterministic_per_seed_and_index() -> None:
    seen = set()
    for index in range(12):
        a, info_a, plan = render_image(5, index, size=96)
        b, info_b, _ = render_image(5, index, size=96)
        assert np.array_equal(a, b) and info_a == info_b
        assert info_a["frame"] == plan.frame and a.shape[:2] == frame_shape(96, plan.frame)
        seen.add(plan.frame)
    assert len(seen) >= 3  # twelve images already show several formats
    for frame in FRAME_FORMATS:  # an explicit frame is honoured and just as reproducible
        x, info = render_fundus(_rng(9), 2, size=96, frame=frame)
        y, _ = render_fundus(_rng(9), 2, size=96, frame=frame)
        assert info["frame"] == frame and np.array_equal(x, y)
    with pytest.raises(ValueError, match="expected one of"):
        render_fundus(_rng(9), 2, size=96, frame="16:9")


def test_frame_formats_occur_with_the_documented_shares() -> None:
    assert math.isclose(sum(FRAME_SHARES), 1.0)
    frames = [plan_image(1, i).frame for i in range(4000)]
    for frame, share in zip(FRAME_FORMATS, FRAME_SHARES, strict=True):
        assert abs(frames.count(frame) / len(frames) - share) < 0.025, frame  # ~3.5 binomial SDs


@pytest.mark.parametrize("frame", ["3:2", "4:3"])
def test_wide_frames_clip_the_disc_at_top_and_bottom_only(frame: str) -> None:
    lo, hi = RADIUS_OVER_HEIGHT[frame]
    for k in range(5):
        image, info = render_fundus(_rng(20, k), k % 5, size=WIDTH, frame=frame)
        h, w = image.shape[:2]
        assert (h, w) == frame_shape(WIDTH, frame) and w / h == pytest.approx(1.5 if frame == "3:2" else 4 / 3, 0.01)
        cx, cy, r = info["fov"]
        assert lo <= r / h <= hi
        # the disc is cut by the top and bottom edges: FOV on the middle of both, for a chord of the
        # expected length; black margins left and right
        for row, dy in ((image[0], cy - 0.5), (image[-1], h - 0.5 - cy)):
            lit = np.flatnonzero(row.max(axis=1) > 25)
            assert lit.size and abs((lit[-1] + 1 - lit[0]) - 2 * math.sqrt(r**2 - dy**2)) < 0.05 * r
        assert image[:, :3].max() < 30 and image[:, -3:].max() < 30
        # the pixels show the documented circle
        fx, fy, fr = _fit_circle(image)
        assert abs(fr - r) < 0.03 * r and math.hypot(fx - cx, fy - cy) < 0.03 * r
        assert 1 - h / (2 * r) > (0.1 if frame == "3:2" else 0.05)  # share of the diameter cut away


def test_square_notch_frame_has_the_whole_disc_and_a_notch_in_its_rim() -> None:
    lo, hi = RADIUS_OVER_HEIGHT["square_notch"]
    for k in range(5):
        image, info = render_fundus(_rng(21, k), k % 5, size=WIDTH, frame="square_notch")
        assert image.shape[:2] == (WIDTH, WIDTH)
        r = info["fov"][2]
        assert lo <= r / WIDTH <= hi
        border = np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]])
        assert border.max() < 30  # the whole disc lies inside the frame
        fr = _fit_circle(image)[2]
        assert abs(fr - r) < 0.03 * r
    geom = sample_geometry(_rng(22), WIDTH, "left", frame="square_notch")
    assert geom.notch is not None
    angle, depth, half = geom.notch
    cover = fov_mask(geom)  # [H, W]

    def at(a: float, radius: float) -> float:
        return float(cover[int(geom.cy + radius * math.sin(a)), int(geom.cx + radius * math.cos(a))])

    inside = geom.radius - depth / 2
    assert at(angle, inside) == 0.0  # cut out of the rim
    assert at(angle + 3 * half / geom.radius, inside) == 1.0  # beside it the FOV goes on


def _colour_stats(image: np.ndarray) -> np.ndarray:
    """Per-channel mean and SD (0-255) of the FOV pixels (brightest channel > 25): ``[6]``."""
    px = image[image.max(axis=2) > 25].astype(np.float64)  # [N, 3]
    return np.concatenate([px.mean(axis=0), px.std(axis=0)])


def test_colour_statistics_inside_the_fov_are_within_the_documented_range_of_idrid() -> None:
    """Medians over images of the FOV's per-channel mean within 15 (R, G) / 10 (B) grey levels of IDRiD's,
    of the per-channel SD within 8; and the synthetic 10-90 % range of each overlaps IDRiD's."""
    paths = sorted(IDRID.glob("*.jpg"))
    if not paths:
        pytest.skip(missing_reason(IDRID))
    real = []
    for p in paths:
        with Image.open(p) as im:
            im.draft("RGB", (256, 256))  # decode at 1/4 scale: statistics of the whole FOV barely change
            real.append(_colour_stats(np.asarray(im.convert("RGB"))))
    gradable = [index for index in range(400) if plan_image(0, index).gradable][:40]  # 8 % are planned ungradable
    assert len(gradable) == 40, f"only {len(gradable)} of 400 planned images are gradable"
    synth = [_colour_stats(render_image(0, index, size=256)[0]) for index in gradable]
    r, s = np.asarray(real), np.asarray(synth)  # [n, 6]
    tolerance = np.array([15, 15, 10, 8, 8, 8])
    gap = np.abs(np.median(s, axis=0) - np.median(r, axis=0))
    assert (gap <= tolerance).all(), (np.median(r, axis=0).round(1), np.median(s, axis=0).round(1))
    r_lo, r_hi = np.percentile(r, [10, 90], axis=0)
    s_lo, s_hi = np.percentile(s, [10, 90], axis=0)
    assert ((s_lo <= r_hi) & (r_lo <= s_hi)).all()


def _red_lesion_share(image: np.ndarray) -> float:
    """Share of the inner FOV at least 50 % darker (green) than its 15-px grey closing: haemorrhages,
    microaneurysms and new vessels; vessels on these renders darken green by ~20-30 % only."""
    g = ndimage.gaussian_filter(image[..., 1].astype(np.float32), 0.7) + 1.0
    dark = 1.0 - g / ndimage.grey_closing(g, size=(15, 15))
    inner = ndimage.binary_erosion(image.max(axis=2) > 30, iterations=8)
    return float((dark[inner] > 0.5).mean())


def test_red_lesions_on_the_pixels_scale_with_the_grade() -> None:
    share = {
        grade: np.mean([_red_lesion_share(render_fundus(_rng(30, k, grade), grade, size=256)[0]) for k in range(10)])
        for grade in (0, 2, 3, 4)
    }
    assert share[0] < share[2] < share[3], share
    assert share[4] > 2 * share[0] and share[3] > 4 * share[0], share
