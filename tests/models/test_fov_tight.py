"""The FOV fit on the framings that leave little of the disc's edge: tight crops and cuts near the frame.

A tight square crop keeps the disc's edge only in its corners (under 1 % of the frame black at 75 % of the
diameter), and a copy resized from a larger one fades a straight cut over a few lines. Real photographs in these
framings: tests/service/test_quality_framings.py and docs/results-quality-gate.md, section 4.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.image.fov import FIT_SIDE, _small_copy, fit_fov_circle, fov_level, straight_cut_depth, surround_level

R = 150.0  # disc radius (px)


def vignetted_disc(side: int, r: float = R, rim: float = 0.25) -> np.ndarray:
    """A square crop of ``side`` px from a disc of radius ``r`` centred in it, uint8 [side, side, 3].

    Inside the disc, brightness falls from 1 at the centre to ``rim`` at the edge (a camera's vignetting) over a
    fine stripe texture; outside it is black.
    """
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float64)
    c = (side - 1) / 2
    d = np.hypot(xx - c, yy - c) / r  # [side, side] in radii
    light = np.clip(1.0 - (1.0 - rim) * d**2, 0.0, 1.0)
    texture = 0.9 + 0.1 * ((xx // 3) % 2)
    img = np.stack([200 * light * texture, 90 * light * texture, 25 * light], axis=-1)
    return np.where((d <= 1.0)[..., None], img, 0).round().astype(np.uint8)


@pytest.mark.parametrize("share", [0.75, 0.8, 0.88])
def test_a_tight_crop_of_a_dim_periphery_is_fitted_at_the_disc_edge(share: float) -> None:
    side = round(2 * R * share)
    img = vignetted_disc(side)
    level, _ = _small_copy(img, FIT_SIDE)
    black = float((level < 1 / 255).mean())
    assert black < 0.1  # the corners only: 0.7 % of the frame at 75 % of the diameter, 8.5 % at 88 %
    # the surround is the black corners, not the dim rim (the 1st percentile alone would be the rim at 75 %)
    assert surround_level(level) < 0.02
    assert fov_level(level) < 0.25 * float(np.median(level))
    circle = fit_fov_circle(img)
    assert circle is not None
    assert abs(circle.radius - R) < 0.03 * R, circle
    assert circle.inlier_share >= 0.9 and circle.arc_quadrants == 4, circle


def test_a_straight_cut_faded_over_a_few_lines_next_to_the_border_is_the_frame() -> None:
    """A camera's cut, resized: its last lines fade to black, and no surround is left beyond it to judge."""
    side = round(2 * R * 0.78)
    img = vignetted_disc(side, rim=0.6).astype(np.float64)
    cut = side - 6  # the cut 6 px above the bottom border, fading over 4 lines, black below
    for k, gain in enumerate((0.55, 0.35, 0.18, 0.07)):
        img[cut + k] *= gain
    img[cut + 4 :] = 0
    img = img.round().astype(np.uint8)
    circle = fit_fov_circle(img)
    assert circle is not None
    assert circle.box[3] in range(cut - 1, cut + 4), circle.box  # the cut is taken as the frame's edge
    assert abs(circle.radius - R) < 0.03 * R and circle.inlier_share >= 0.9, circle


@pytest.mark.parametrize("radius", [100.0, 150.0, 190.0])
def test_the_top_of_a_whole_circle_is_not_taken_for_a_cut(radius: float) -> None:
    """Many column ends lie within a few lines of a circle's top, but along a short chord only."""
    side = round(2 * radius * 1.06)
    img = vignetted_disc(side, r=radius, rim=0.6)
    circle = fit_fov_circle(img)
    assert circle is not None
    assert circle.box == (0, 0, side - 1, side - 1), circle.box
    assert abs(circle.radius - radius) < 0.03 * radius and circle.arc_quadrants == 4


def test_the_surround_level_of_a_camera_frame_is_its_first_percentile() -> None:
    """A fifth of the frame or more is surround: the level is the 1st percentile, as before tight crops."""
    rng = np.random.default_rng(0)
    frame = np.zeros((300, 400), np.float32)
    frame += rng.normal(6 / 255, 2 / 255, frame.shape).astype(np.float32)  # a noisy dark surround
    yy, xx = np.mgrid[0:300, 0:400]
    frame[np.hypot(xx - 200, yy - 150) < 170] = 0.6
    assert surround_level(frame) == pytest.approx(float(np.percentile(frame, 1)))
    threshold = fov_level(frame)
    assert math.isfinite(threshold)
    assert surround_level(frame) + 4 / 255 <= threshold < 0.25 * 0.6  # a fifth of the way to the disc's level


def test_a_cut_a_few_lines_from_the_border_is_the_frame_whatever_a_jpeg_left_beyond_it() -> None:
    """A JPEG's 8 x 8 blocks straddle a thin band of black at the border and ring over it: still the frame."""
    side = round(2 * R * 0.8)
    img = vignetted_disc(side, rim=0.6)
    rng = np.random.default_rng(1)
    img[:5] = rng.integers(5, 25, (5, side, 3))  # ringing over the 5 lines of black above a camera's cut
    circle = fit_fov_circle(img)
    assert circle is not None
    assert circle.box[1] in range(4, 8), circle.box
    assert abs(circle.radius - R) < 0.03 * R and circle.inlier_share >= 0.9, circle


def padded_disc_cut(depth: float, *, both: bool) -> np.ndarray:
    """A whole disc padded to a square, with ``depth`` of its diameter blacked out from the top (and bottom)."""
    side = round(2 * R) + 40
    img = vignetted_disc(side, rim=0.6)
    c = (side - 1) / 2
    cut = round(c - R + depth * 2 * R)
    img[:cut] = 0
    if both:
        img[side - cut :] = 0
    return img


@pytest.mark.parametrize("depth", [0.08, 0.16])
def test_a_frame_cut_with_padding_beyond_it_is_the_frame(depth: float) -> None:
    """A camera frame padded to a square: its cuts at the top and bottom are the frame, not the disc's edge."""
    img = padded_disc_cut(depth, both=True)
    circle = fit_fov_circle(img)
    assert circle is not None and abs(circle.radius - R) < 0.03 * R, circle
    c = (img.shape[0] - 1) / 2
    assert circle.box[1] == pytest.approx(c - R + depth * 2 * R, abs=3), circle  # the cut is recorded as the frame
    assert circle.inlier_share >= 0.9, circle


def test_a_lid_as_dark_as_the_surround_is_not_taken_for_the_frame() -> None:
    """A third of the diameter blacked out from one side: a lid's edge, not a frame's cut (at most 0.16 on the
    natural photographs). The cut is not recorded, so its straight edge counts against the circle."""
    img = padded_disc_cut(0.33, both=False)
    assert straight_cut_depth(img) == pytest.approx(0.33, abs=0.02)  # the depth the bound refuses, as measured
    assert straight_cut_depth(padded_disc_cut(0.16, both=False)) == pytest.approx(0.16, abs=0.02)
    circle = fit_fov_circle(img)
    assert circle is None or circle.box[1] == 0, circle
    with_cut = padded_disc_cut(0.16, both=False)  # the deepest natural cut, on one side only, is still the frame
    circle = fit_fov_circle(with_cut)
    assert circle is not None and circle.box[1] > 0 and abs(circle.radius - R) < 0.03 * R, circle
