"""Decoding an image file to the 8-bit RGB array every preprocessing contract starts from.

One decode for training, the service and the batch job, so that a model sees at serving time the
pixels of the same file it saw in training:

1. a JPEG (or MPO, a phone camera's JPEG) far larger than needed is decoded at a reduced DCT scale
   (Pillow's ``draft``) of at least ``decode_side(size)`` = ``2 * max(size, DECODE_SIDE)`` px: large
   enough for the quality gate's compression check and the FOV fit, and much faster than a full decode;
2. the EXIF orientation is applied;
3. any mode becomes uint8 RGB (``to_rgb8``): 16- and 32-bit integers are scaled by their container
   range, floats from [0, 1], alpha is composited on black (the fundus background).

This is the pure part: no limits on bytes or pixels, no refusal of hostile files. The service wraps the
same steps in its upload checks (``service.inference.imaging.decode_rgb``).

Example::

    rgb = decode_image(Path("eye.jpg"), 256)   # uint8 [H, W, 3], H and W >= 1024 for a large JPEG
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

# JPEGs are decoded at a reduced DCT scale of at least 2 x max(model side, this): large enough for the
# quality gate's compression check (JPEG block grid) and the FOV fit
DECODE_SIDE = 512
DRAFT_FORMATS = ("JPEG", "MPO")


def decode_side(size: int) -> int:
    """The least side a JPEG is decoded at for a model with input side ``size`` (see module doc)."""
    return 2 * max(size, DECODE_SIDE)


def draft_for(img: Image.Image, size: int) -> None:
    """Let a JPEG decode at the smallest DCT scale keeping both sides >= ``decode_side(size)``; before ``load``."""
    if img.format in DRAFT_FORMATS:
        side = decode_side(size)
        img.draft("RGB", (side, side))


def to_rgb8(img: Image.Image) -> np.ndarray:
    """Any decoded Pillow mode -> uint8 [H, W, 3]; high bit depths are scaled, alpha goes on black.

    Integer arithmetic where the result is an integer anyway (16-bit scaling, alpha compositing): the
    same values as rounding the exact quotient (no ties exist for /255 and /257), at a fraction of the
    memory of float copies (RGBA: ~21 instead of ~48 bytes per pixel at the peak).
    """
    mode = img.mode
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        arr = np.asarray(img)  # [H, W]: uint16, int32 or float32
        if mode != "F" and (mode.startswith("I;16") or int(arr.max(initial=0)) <= 65535):
            v = np.clip(arr, 0, 65535).astype(np.uint32)  # [H, W]
            v += 128
            v //= 257  # round(v * 255 / 65535) = round(v / 257)
            gray8 = v.astype(np.uint8)
        else:
            wide = arr.astype(np.float64)
            if mode == "F":
                top = 1.0 if wide.size and float(np.nanmax(wide)) <= 1.0 else float(np.nanmax(wide) or 1.0)
            else:
                top = float(wide.max())
            np.nan_to_num(wide, copy=False)  # in place: one float copy
            wide /= top
            np.clip(wide, 0.0, 1.0, out=wide)
            wide *= 255.0
            gray8 = np.round(wide, out=wide).astype(np.uint8)
        return np.repeat(gray8[:, :, None], 3, axis=2)
    has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode == "P" and "transparency" in img.info)
    if has_alpha:
        rgba = np.asarray(img.convert("RGBA"))  # uint8 [H, W, 4]
        rgb = rgba[:, :, :3].astype(np.uint16)  # [H, W, 3]; 255 * 255 fits in 16 bits
        rgb *= rgba[:, :, 3:4]  # composite on black: c * a / 255, rounded
        rgb += 127
        rgb //= 255
        return rgb.astype(np.uint8)
    return np.asarray(img.convert("RGB"), dtype=np.uint8)


def oriented_rgb8(img: Image.Image) -> np.ndarray:
    """A loaded image -> uint8 [H, W, 3] as displayed: EXIF orientation applied, then ``to_rgb8``."""
    return to_rgb8(ImageOps.exif_transpose(img) or img)


def decode_image(source: bytes | Path | str, size: int) -> np.ndarray:
    """Decode image bytes or a file for a model of input side ``size``: uint8 [H, W, 3] (see module doc).

    Raises what Pillow raises for data it cannot read (``OSError``, ``ValueError``, ...).
    """
    with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as img:
        draft_for(img, size)
        img.load()
        return oriented_rgb8(img)
