"""Training augmentation (paper appendix D.1) as one random affine warp per image, on the training device.

Beyond D.1: ``color_jitter`` (other cameras, exposures and resolutions) and ``frame_cuts`` (the framings
programmes publish: camera frames, tight crops, notches, as the service's crop to the field of view leaves them).

The D.1 chain — random horizontal and vertical flips, rotation uniform in ±180°, pad by 0-5 % and crop
back, scale-crop to 90-110 % (zero padding where needed), resize — is a composition of affine maps,
so it is applied as a single ``F.affine_grid`` + ``F.grid_sample`` per batch: one bilinear resampling
instead of five, no torchvision, and it runs wherever the batch lives (CPU or GPU). Normalisation
with the training-set channel statistics is a separate step (``normalise``).

All randomness comes from the ``torch.Generator`` passed in, so a seeded generator reproduces a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from training.data.resample import resolution_loss


@dataclass(frozen=True)
class AugmentConfig:
    """Ranges of the D.1 augmentation; the defaults are the paper's."""

    flips: bool = True
    max_rotation_deg: float = 180.0
    max_pad: float = 0.05  # pad each side by U(0, max_pad) of the size, then crop back at a random offset
    scale_range: tuple[float, float] = (0.9, 1.1)  # crop side / image side; >1 pads with zeros


@dataclass(frozen=True)
class AffineParams:
    """Per-image warp parameters, each ``[B]`` (``shift`` is ``[B, 2]``, in normalised [-1, 1] units).

    An output pixel at normalised position ``p`` samples the input at ``F R(-angle) (scale * p + shift)``:
    ``flip_x``/``flip_y`` are ±1, ``angle`` is in radians (positive turns the picture clockwise as
    displayed, i.e. with y pointing down), ``scale`` < 1 zooms in.
    """

    flip_x: Tensor
    flip_y: Tensor
    angle: Tensor
    scale: Tensor
    shift: Tensor

    @classmethod
    def identity(cls, batch: int, device: torch.device | str = "cpu") -> AffineParams:
        ones = torch.ones(batch, device=device)
        return cls(
            ones, ones.clone(), torch.zeros(batch, device=device), ones.clone(), torch.zeros(batch, 2, device=device)
        )


def sample_params(
    batch: int,
    *,
    generator: torch.Generator,
    config: AugmentConfig = AugmentConfig(),
    device: torch.device | str | None = None,
) -> AffineParams:
    """Draw D.1 warp parameters for ``batch`` images from ``generator`` (on the generator's device)."""
    gdev = generator.device

    def uniform(lo: float | Tensor, hi: float | Tensor, *shape: int) -> Tensor:
        return lo + (hi - lo) * torch.rand(batch, *shape, generator=generator, device=gdev)

    def sign() -> Tensor:
        return torch.where(torch.rand(batch, generator=generator, device=gdev) < 0.5, -1.0, 1.0)

    ones = torch.ones(batch, device=gdev)
    flip_x, flip_y = (sign(), sign()) if config.flips else (ones, ones.clone())
    max_angle = math.radians(config.max_rotation_deg)
    angle = uniform(-max_angle, max_angle)
    lo, hi = config.scale_range
    if not 0 < lo <= hi:
        raise ValueError(f"scale_range must satisfy 0 < low <= high, got {config.scale_range}")
    scale = uniform(lo, hi)
    # Pad-and-crop: a shift of up to the pad on each axis (as a fraction of the side; x2 in [-1, 1] units).
    pad = uniform(0.0, config.max_pad)
    pad_shift = uniform(-1.0, 1.0, 2) * pad[:, None] * 2.0
    # Scale-crop: the crop window can sit anywhere its size allows, in the image or in the zero padding.
    slack = (1.0 - scale).abs()[:, None]
    crop_shift = uniform(-1.0, 1.0, 2) * slack
    params = AffineParams(flip_x, flip_y, angle, scale, crop_shift - pad_shift)
    if device is not None:
        params = AffineParams(
            *(t.to(device) for t in (params.flip_x, params.flip_y, params.angle, params.scale, params.shift))
        )
    return params


def affine_theta(params: AffineParams, *, aspect: float = 1.0) -> Tensor:
    """``F.affine_grid`` matrices ``[B, 2, 3]``; ``aspect`` = H / W keeps rotations rigid on non-square images."""
    cos, sin = torch.cos(params.angle), torch.sin(params.angle)
    # L = A^-1 F R^T A with A = diag(1, aspect): F is diagonal, so it commutes with A.
    l00 = params.flip_x * cos
    l01 = params.flip_x * sin * aspect
    l10 = -params.flip_y * sin / aspect
    l11 = params.flip_y * cos
    lin = torch.stack([torch.stack([l00, l01], -1), torch.stack([l10, l11], -1)], -2)  # [B, 2, 2]
    trans = lin @ params.shift.unsqueeze(-1)  # [B, 2, 1]
    return torch.cat([lin * params.scale[:, None, None], trans], dim=-1)


def apply_affine(x: Tensor, params: AffineParams, *, out_size: int | None = None, fill: float = 0.0) -> Tensor:
    """Warp ``x`` ``[B, C, H, W]`` with ``params``; output ``[B, C, S, S]`` (S = ``out_size``) or ``H x W``.

    Pixels from outside the input take the value ``fill`` (0: black; 0.5: the neutral grey that surrounds
    the field of view in ``fov-local-mean/1`` images, so a warp adds no border the service never shows).
    """
    if x.ndim != 4:
        raise ValueError(f"expected a batch [B, C, H, W], got shape {tuple(x.shape)}")
    b, c, h, w = x.shape
    theta = affine_theta(params, aspect=h / w).to(device=x.device, dtype=x.dtype)
    size = (b, c, out_size, out_size) if out_size is not None else (b, c, h, w)
    grid = F.affine_grid(theta, list(size), align_corners=False)  # [B, S, S, 2]
    warped = F.grid_sample(x - fill, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return warped + fill


def augment_batch(
    x: Tensor, *, generator: torch.Generator, config: AugmentConfig = AugmentConfig(), out_size: int | None = None,
    fill: float = 0.0,
) -> Tensor:
    """One random D.1 warp per image of ``x`` ``[B, 3, H, W]`` -> ``[B, 3, H, W]`` (or ``out_size``)."""
    params = sample_params(x.shape[0], generator=generator, config=config, device=x.device)
    return apply_affine(x, params, out_size=out_size, fill=fill)


@dataclass(frozen=True)
class JitterConfig:
    """Photometric ranges: what other cameras, exposures and resolutions do to a preprocessed image.

    Applied to images in [0, 1] around ``centre`` (0.5 for ``fov-local-mean/1``, whose neutral value is
    grey; the surround stays neutral): a global contrast factor (log-uniform in ``contrast``), a
    per-channel gain (colour balance of the lesions and vessels against the background, which the local
    mean keeps), an additive per-channel shift (a residual colour cast), and with probability
    ``blur_prob`` a down- and up-sampling by a factor in ``blur_scale`` (a camera or upload of lower
    resolution than the model's input).
    """

    contrast: tuple[float, float] = (0.7, 1.4)
    channel_gain: float = 0.15  # each channel's factor ~ U(1 - g, 1 + g)
    shift: float = 0.03  # each channel's offset ~ U(-s, s)
    blur_prob: float = 0.4
    blur_scale: tuple[float, float] = (0.4, 0.9)


def _uniform_like(x: Tensor, generator: torch.Generator) -> Callable[..., Tensor]:
    """``uniform(lo, hi, *shape)``: draws from ``generator`` (on its device), returned on ``x``'s device and dtype."""

    def uniform(lo: float, hi: float, *shape: int) -> Tensor:
        drawn = torch.rand(*shape, generator=generator, device=generator.device)
        return (lo + (hi - lo) * drawn).to(x.device, x.dtype)

    return uniform


def color_jitter(x: Tensor, *, generator: torch.Generator, config: JitterConfig = JitterConfig(),
                 centre: float = 0.5, host_generator: torch.Generator | None = None) -> Tensor:
    """Random photometric changes per image of ``x`` ``[B, C, H, W]`` in [0, 1] (see ``JitterConfig``).

    The resolution loss resizes each chosen image to its own size, which the host must know: with a CPU
    ``host_generator`` (a CUDA run) those draws come from it and no step waits for the GPU; without one
    they come from ``generator`` (on the CPU, the same stream as ever).
    """
    b, c, h, w = x.shape

    def uniform(lo: float, hi: float, *shape: int, gen: torch.Generator = generator) -> Tensor:
        """On ``x``'s device, except the draws of a host generator: they stay on the host, to be read there."""
        device = x.device if gen is generator else gen.device
        return (lo + (hi - lo) * torch.rand(*shape, generator=gen, device=gen.device)).to(device, x.dtype)

    lo, hi = config.contrast
    contrast = torch.exp(uniform(math.log(lo), math.log(hi), b, 1, 1, 1))
    gain = uniform(1 - config.channel_gain, 1 + config.channel_gain, b, c, 1, 1)
    shift = uniform(-config.shift, config.shift, b, c, 1, 1)
    out = (x - centre) * contrast * gain + centre + shift
    if host_generator is not None:  # drawn and read on the host
        chosen = [i for i, yes in enumerate((uniform(0.0, 1.0, b, gen=host_generator) < config.blur_prob).tolist())
                  if yes]
    else:
        chosen = torch.nonzero(uniform(0.0, 1.0, b) < config.blur_prob).flatten().tolist()
    scale = uniform(*config.blur_scale, b, gen=host_generator or generator).tolist()  # after the blur draw
    if chosen:  # resolution loss: per image, its own factor; the whole batch in a few operations (resample.py)
        sides = [(max(8, round(h * float(scale[i]))), max(8, round(w * float(scale[i])))) for i in chosen]
        idx = torch.tensor(chosen, dtype=torch.long).to(x.device, non_blocking=True)
        out = out.index_copy(0, idx, resolution_loss(out.index_select(0, idx), sides))
    return out.clamp_(0.0, 1.0)


@dataclass(frozen=True)
class FramingConfig:
    """What the framings screening programmes publish leave of the disc once the service has cropped to it.

    The service crops every photograph to its fitted FOV circle (``models.image.preprocessing``), so a framing shows
    up in the network's input as parts of the disc that are missing (neutral ``fill``): a camera frame cuts
    two opposite sides at ``camera_cut`` of the radius (top and bottom, or left and right in portrait), a
    tight square crop cuts all four at ``tight_cut``, and a notch at the rim is a dark square of half-side
    ``notch_half`` radii. Each image gets a camera cut with ``camera_prob``, else a tight cut with
    ``tight_prob``, and independently a notch with ``notch_prob``. The ranges cover the framing family the
    quality gate is held to (support/framings.py; tests/training/test_augment.py checks it).
    """

    camera_prob: float = 0.3
    camera_cut: tuple[float, float] = (0.75, 0.95)
    tight_prob: float = 0.25
    tight_cut: tuple[float, float] = (0.7, 0.9)
    notch_prob: float = 0.1
    notch_half: tuple[float, float] = (0.04, 0.08)


def frame_cuts(x: Tensor, *, generator: torch.Generator, config: FramingConfig = FramingConfig(),
               fill: float = 0.5) -> Tensor:
    """Random framing per image of ``x`` ``[B, C, S, S]``, a preprocessed disc filling the square (FramingConfig)."""
    b, _, h, w = x.shape
    draw = _uniform_like(x, generator)

    def uniform(lo: float, hi: float) -> Tensor:
        return draw(lo, hi, b)

    kind, portrait, notch = uniform(0, 1), uniform(0, 1) < 0.2, uniform(0, 1) < config.notch_prob
    camera_cut, tight_cut = uniform(*config.camera_cut), uniform(*config.tight_cut)
    angle, half = uniform(0, 2 * math.pi), uniform(*config.notch_half)
    inf = torch.full_like(camera_cut, float("inf"))
    camera = kind < config.camera_prob
    tight = ~camera & (kind < config.camera_prob + config.tight_prob)
    cut_y = torch.where(tight | (camera & ~portrait), torch.where(camera, camera_cut, tight_cut), inf)
    cut_x = torch.where(tight | (camera & portrait), torch.where(camera, camera_cut, tight_cut), inf)
    ys = (torch.arange(h, device=x.device, dtype=x.dtype) + 0.5) / h * 2 - 1  # pixel centres in [-1, 1]
    xs = (torch.arange(w, device=x.device, dtype=x.dtype) + 0.5) / w * 2 - 1
    yy, xx = ys.view(1, h, 1), xs.view(1, 1, w)
    keep = (yy.abs() <= cut_y.view(b, 1, 1)) & (xx.abs() <= cut_x.view(b, 1, 1))  # [B, H, W]
    cx, cy = (0.97 * torch.cos(angle)).view(b, 1, 1), (0.97 * torch.sin(angle)).view(b, 1, 1)
    hole = notch.view(b, 1, 1) & ((xx - cx).abs() <= half.view(b, 1, 1)) & ((yy - cy).abs() <= half.view(b, 1, 1))
    out = torch.where(keep.unsqueeze(1), x, torch.full_like(x, fill))
    return torch.where(hole.unsqueeze(1), torch.zeros_like(x), out)


def normalise(x: Tensor, mean: Sequence[float] | Tensor, std: Sequence[float] | Tensor) -> Tensor:
    """Per-channel ``(x - mean) / std`` for ``x`` ``[B, C, H, W]`` with training-set statistics ``[C]``."""
    # checked on the host, before std reaches the device: a check there would wait for the GPU every step
    if any(float(v) <= 0 for v in (std.detach().cpu().tolist() if isinstance(std, Tensor) else std)):
        raise ValueError("std must be positive in every channel")
    m = torch.as_tensor(mean, dtype=x.dtype, device=x.device).reshape(1, -1, 1, 1)
    s = torch.as_tensor(std, dtype=x.dtype, device=x.device).reshape(1, -1, 1, 1)
    if m.shape[1] != x.shape[1] or s.shape[1] != x.shape[1]:
        raise ValueError(f"mean/std have {m.shape[1]}/{s.shape[1]} channels, the batch has {x.shape[1]}")
    return (x - m) / s
