"""D.1 augmentation as one affine warp: identity, flips, rotations, zoom, randomness, normalisation."""

from __future__ import annotations

import math

import pytest
import torch

from training.data import AffineParams, AugmentConfig, apply_affine, augment_batch, normalise, sample_params


def _disc(size: int = 33, radius: float = 8.0, cx: float | None = None) -> torch.Tensor:
    yy, xx = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="ij")
    c = size / 2 if cx is None else cx
    disc = (((xx - c) ** 2 + (yy - size / 2) ** 2) < radius**2).float()
    return torch.stack([disc, 0.5 * disc, 0.25 * disc])[None]  # [1, 3, H, W]


def _centroid(img: torch.Tensor) -> tuple[float, float]:
    w = img[0, 0]
    yy, xx = torch.meshgrid(torch.arange(w.shape[0]) + 0.5, torch.arange(w.shape[1]) + 0.5, indexing="ij")
    return float((w * yy).sum() / w.sum()), float((w * xx).sum() / w.sum())


def _with(batch: int = 1, **fields: torch.Tensor) -> AffineParams:
    base = AffineParams.identity(batch)
    return AffineParams(**{**base.__dict__, **fields})


def test_identity_parameters_give_the_identity() -> None:
    x = torch.rand(2, 3, 20, 20)
    assert torch.allclose(apply_affine(x, AffineParams.identity(2)), x, atol=1e-5)


def test_flips_and_quarter_turns_are_exact_pixel_permutations() -> None:
    x = torch.rand(1, 3, 16, 16)
    assert torch.allclose(apply_affine(x, _with(flip_x=torch.tensor([-1.0]))), x.flip(3), atol=1e-5)
    assert torch.allclose(apply_affine(x, _with(flip_y=torch.tensor([-1.0]))), x.flip(2), atol=1e-5)
    turned = apply_affine(x, _with(angle=torch.tensor([math.pi / 2])))
    assert torch.allclose(turned, torch.rot90(x, k=-1, dims=(2, 3)), atol=1e-5)  # clockwise as displayed


def test_rotation_keeps_a_centred_disc_centred_and_moves_an_offset_one_around_the_centre() -> None:
    disc = _disc()
    angles = torch.tensor([0.3, -1.7, 2.9, math.pi])
    out = apply_affine(disc.expand(4, -1, -1, -1), _with(4, angle=angles))
    for i in range(4):
        cy, cx = _centroid(out[i : i + 1])
        assert abs(cy - 16.5) < 0.05 and abs(cx - 16.5) < 0.05
        assert abs(out[i, 0].sum() - disc[0, 0].sum()) / disc[0, 0].sum() < 0.02  # area kept
    assert torch.allclose(out[:, 1], 0.5 * out[:, 0], atol=1e-6)  # colour ratios kept
    offset = _disc(radius=4.0, cx=24.5)  # 8 px right of centre
    cy, cx = _centroid(apply_affine(offset, _with(angle=torch.tensor([math.pi]))))
    assert abs(cx - 8.5) < 0.1 and abs(cy - 16.5) < 0.1


def test_zoom_and_out_size() -> None:
    disc = _disc(radius=6.0)
    zoomed = apply_affine(disc, _with(scale=torch.tensor([0.5])))  # crop half the side: 2x bigger
    assert abs(zoomed[0, 0].sum() / disc[0, 0].sum() - 4.0) < 0.15
    resized = apply_affine(disc, AffineParams.identity(1), out_size=66)
    assert resized.shape == (1, 3, 66, 66)
    assert abs(resized[0, 0].mean() - disc[0, 0].mean()) < 0.01


def test_random_parameters_stay_in_the_d1_ranges() -> None:
    g = torch.Generator().manual_seed(0)
    p = sample_params(4000, generator=g)
    assert p.angle.abs().max() <= math.pi and p.angle.min() < -3.0 and p.angle.max() > 3.0
    assert p.scale.min() >= 0.9 and p.scale.max() <= 1.1
    assert set(p.flip_x.unique().tolist()) == {-1.0, 1.0} and abs(p.flip_y.mean()) < 0.1
    bound = (1 - p.scale).abs() + 0.1  # scale-crop slack + pad shift (5 % each side, x2 in [-1, 1] units)
    assert (p.shift.abs() <= bound[:, None] + 1e-6).all()
    fixed = sample_params(
        10, generator=g, config=AugmentConfig(flips=False, max_rotation_deg=0, max_pad=0, scale_range=(1.0, 1.0))
    )
    x = torch.rand(10, 3, 8, 8)
    assert torch.allclose(apply_affine(x, fixed), x, atol=1e-5)


def test_augment_batch_is_reproducible_from_the_generator_only() -> None:
    x = torch.rand(6, 3, 24, 24)
    a = augment_batch(x, generator=torch.Generator().manual_seed(7))
    torch.manual_seed(123)  # the global RNG must not matter
    b = augment_batch(x, generator=torch.Generator().manual_seed(7))
    c = augment_batch(x, generator=torch.Generator().manual_seed(8))
    assert a.shape == x.shape and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(a[0], a[1])  # one warp per image, not one per batch


def test_normalise_uses_the_given_statistics() -> None:
    x = torch.rand(5, 3, 8, 8)
    mean, std = (0.4, 0.2, 0.1), (0.3, 0.15, 0.05)
    out = normalise(x, mean, std)
    for c in range(3):
        assert torch.allclose(out[:, c], (x[:, c] - mean[c]) / std[c])
    with pytest.raises(ValueError, match="channels"):
        normalise(x, (0.5, 0.5), (0.2, 0.2))
    with pytest.raises(ValueError, match="positive"):
        normalise(x, mean, (0.3, 0.0, 0.1))


def test_warp_fill_keeps_the_neutral_surround() -> None:
    """fov-local-mean images are grey (0.5) outside the FOV: a warp with fill=0.5 adds no black border."""
    from training.data.augment import augment_batch

    x = torch.full((3, 3, 32, 32), 0.5)
    out = augment_batch(x, generator=torch.Generator().manual_seed(0), fill=0.5)
    assert torch.allclose(out, torch.full_like(out, 0.5), atol=1e-6)
    black = augment_batch(x, generator=torch.Generator().manual_seed(0))  # fill 0: corners turn black
    assert float(black.min()) < 0.1


def test_color_jitter_is_seeded_bounded_and_centred() -> None:
    from training.data.augment import JitterConfig, color_jitter

    gen = torch.Generator().manual_seed(3)
    x = torch.rand(64, 3, 24, 24, generator=gen)
    a = color_jitter(x.clone(), generator=torch.Generator().manual_seed(1))
    b = color_jitter(x.clone(), generator=torch.Generator().manual_seed(1))
    c = color_jitter(x.clone(), generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0
    # without blur and shift, a neutral (0.5) image stays neutral: contrast and gain act around the centre
    cfg = JitterConfig(shift=0.0, blur_prob=0.0)
    grey = color_jitter(torch.full((8, 3, 16, 16), 0.5), generator=torch.Generator().manual_seed(4), config=cfg)
    assert torch.allclose(grey, torch.full_like(grey, 0.5), atol=1e-6)
    # the contrast x gain factor per image and channel lies in the configured ranges
    step = torch.zeros(200, 3, 8, 8)
    step[..., :4] = 0.4
    step[..., 4:] = 0.6
    out = color_jitter(step, generator=torch.Generator().manual_seed(5), config=cfg)
    factor = (out[..., 0, 4] - out[..., 0, 0]) / 0.2  # [200, 3]
    lo, hi = cfg.contrast[0] * (1 - cfg.channel_gain), cfg.contrast[1] * (1 + cfg.channel_gain)
    assert float(factor.min()) >= lo - 1e-5 and float(factor.max()) <= hi + 1e-5
    assert float(factor.max() - factor.min()) > 0.5 * (hi - lo)  # the range is actually used
    # blur: with blur_prob 1 a fine checkerboard loses most of its contrast (a lower-resolution camera)
    board = (torch.arange(32)[:, None] + torch.arange(32)[None, :]) % 2
    fine = (0.3 + 0.4 * board.float()).expand(4, 3, 32, 32).clone()
    blurred = color_jitter(fine, generator=torch.Generator().manual_seed(6),
                           config=JitterConfig(contrast=(1.0, 1.0), channel_gain=0.0, shift=0.0, blur_prob=1.0))
    assert float(blurred.std()) < 0.5 * float(fine.std())


def test_frame_cuts_cover_the_framing_family_and_are_seeded() -> None:
    """Camera-frame and tight-crop cuts and notches, at the rates and in the ranges the quality gate is held to."""
    from support.framings import CAMERA_HEIGHT, NOTCH_HALF, TIGHT_SIDE
    from training.data.augment import FramingConfig, frame_cuts

    cfg = FramingConfig()
    # the family's cut positions (the frame's half-height or half-side in radii) lie inside the trained ranges
    assert cfg.camera_cut[0] <= CAMERA_HEIGHT[0] and CAMERA_HEIGHT[1] <= cfg.camera_cut[1]
    assert cfg.tight_cut[0] <= TIGHT_SIDE[0] and TIGHT_SIDE[1] <= cfg.tight_cut[1]
    assert cfg.notch_half[0] <= NOTCH_HALF[0] and NOTCH_HALF[1] <= cfg.notch_half[1]

    x = torch.full((2000, 3, 40, 40), 0.8)
    notched = frame_cuts(x.clone(), generator=torch.Generator().manual_seed(5), fill=0.5)
    assert torch.equal(notched, frame_cuts(x.clone(), generator=torch.Generator().manual_seed(5), fill=0.5))
    assert torch.equal(notched[:, :, 18:22, 18:22], x[:, :, 18:22, 18:22])  # the centre is never cut
    share = (notched == 0.0).any(dim=(1, 2, 3)).float().mean()  # a notch is dark, the cuts neutral
    assert abs(float(share) - cfg.notch_prob) <= 4 * (cfg.notch_prob * (1 - cfg.notch_prob) / x.shape[0]) ** 0.5
    out = frame_cuts(x.clone(), generator=torch.Generator().manual_seed(6), fill=0.5,
                     config=FramingConfig(notch_prob=0.0))
    cut = out == 0.5  # [B, 3, H, W]
    top, side = cut[:, 0, 0, 20], cut[:, 0, 20, 0]  # the middle of the top edge, of the left edge
    corner_only = cut[:, 0, 0, 0] & ~top & ~side
    camera = top ^ side  # cut on two opposite sides only
    tight = top & side
    n = x.shape[0]
    # rates within 4 sigma of the configured probabilities
    for share, p in ((camera.float().mean(), cfg.camera_prob), (tight.float().mean(), cfg.tight_prob)):
        assert abs(float(share) - p) <= 4 * (p * (1 - p) / n) ** 0.5, (float(share), p)
    assert not corner_only.any()  # no cut leaves the edges' middles and cuts only a corner
    # a camera cut removes whole rows (or columns) from the edge inwards, to within the configured range
    rows_cut = cut[top & ~side, 0, :, 20].float().sum(dim=1) / 2 / 20  # share of the half side cut away
    assert float(rows_cut.min()) >= 1 - cfg.camera_cut[1] - 0.05
    assert float(rows_cut.max()) <= 1 - cfg.camera_cut[0] + 0.05
    off = FramingConfig(camera_prob=0.0, tight_prob=0.0, notch_prob=0.0)
    assert torch.equal(frame_cuts(x[:8].clone(), generator=torch.Generator().manual_seed(1), config=off), x[:8])


@pytest.mark.parametrize(("h", "w"), [(32, 32), (64, 48), (256, 256), (7, 9)])
def test_the_batched_resolution_loss_is_f_interpolates_down_and_up(h: int, w: int) -> None:
    """One pair of batched products per batch resamples as F.interpolate does image by image (antialiased down to
    each image's own size, bilinear back up), to float rounding; and the pixels stay bounded by the input's."""
    import torch.nn.functional as F

    from training.data.resample import resolution_loss

    gen = torch.Generator().manual_seed(h * w)
    x = torch.rand(6, 3, h, w, generator=gen)
    factors = (0.4 + 0.5 * torch.rand(6, generator=gen)).tolist()
    sides = [(max(8, round(h * f)), max(8, round(w * f))) for f in factors]
    expected = torch.cat([
        F.interpolate(F.interpolate(x[i:i + 1], size=side, mode="bilinear", antialias=True, align_corners=False),
                      size=(h, w), mode="bilinear", align_corners=False) for i, side in enumerate(sides)])
    torch.testing.assert_close(resolution_loss(x, sides), expected, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="2 sizes for 6 images"):
        resolution_loss(x, sides[:2])
