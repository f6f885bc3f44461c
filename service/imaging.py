"""Image decoding, validation and preprocessing: bytes in, an 8-bit RGB fundus square out.

Everything here is plain Pillow + numpy (no FastAPI, no torch) and runs in a worker thread.

Rules, in the order they are applied:

1. Size in bytes: empty -> 400; more than ``max_bytes`` -> 413 (the HTTP layer already refuses a
   larger ``Content-Length`` or streamed body before it is read, this is the backstop).
2. Type by *content* (magic bytes), never by the declared content type: JPEG, PNG, TIFF, WebP, BMP,
   GIF (single frame) and MPO (phone-camera JPEG; its primary frame is used). PDF and anything not
   recognised as an image -> 415.
3. Pixel count from the header, *before* decoding (``Image.open`` only reads the header): more than
   ``max_pixels`` -> 413; Pillow's own decompression-bomb error also -> 413. Sides below
   ``MIN_SIDE`` px -> 400 (nothing to grade in a thumbnail).
4. Multi-frame images (animated GIF/WebP/PNG, multi-page TIFF) -> 415 ``multi-frame-image``: the
   service grades one photograph per image, and silently picking a frame could grade the wrong one.
5. Decoding: truncated or corrupt data -> 400 ``undecodable-image``. JPEGs are decoded at a reduced
   scale (``draft``) when far larger than needed, which is exact up to resampling and much faster.
6. Normalisation to 8-bit RGB: EXIF orientation applied; 16-bit and 32-bit integer images scaled by
   their container range (65535), not clipped; float images scaled to [0, 1]; alpha composited on
   black (the fundus background); palette, grayscale, CMYK, YCbCr, LAB converted.
7. Geometry, for artifacts with the *legacy* preprocessing contract (the embedded default model;
   ``fov_square``): square images are kept as they are (that model's preprocessing is "resize to
   size x size", and its training renders were square); wide/tall camera frames have their dark
   margins trimmed along the long axis (down to a square at most) and are padded with black to a
   centred square, so the field of view (FOV) is never cut or distorted. Then a bilinear resize to
   the artifact's input size. Artifacts with ``fov-local-mean/1`` use
   ``models.preprocessing.preprocess_fundus`` instead (crop to the fitted FOV circle), see
   ``service.scoring.prepare_image``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from models.preprocessing import LEGACY as LEGACY_PREPROCESSING

MIN_SIDE = 16
FOV_THRESHOLD = 12  # of 255: fundus cameras record a near-black background outside the FOV
ALLOWED_FORMATS = frozenset({"JPEG", "PNG", "TIFF", "WEBP", "BMP", "GIF", "MPO"})

# Magic numbers of the image formats we accept: used to tell "an image we cannot decode" (400)
# from "not an image at all" (415) when Pillow cannot identify the bytes.
_IMAGE_SIGNATURES: tuple[bytes, ...] = (
    b"\xff\xd8\xff",  # JPEG / MPO
    b"\x89PNG\r\n\x1a\n",
    b"II*\x00",  # TIFF little-endian
    b"MM\x00*",  # TIFF big-endian
    b"GIF87a",
    b"GIF89a",
    b"BM",
)


class ImageRejected(Exception):  # noqa: N818 (contract name)
    """An upload the service refuses, with the HTTP status and problem type it maps to."""

    def __init__(self, problem_type: str, detail: str, status: int) -> None:
        super().__init__(detail)
        self.problem_type = problem_type  # slug, e.g. "undecodable-image"
        self.detail = detail
        self.status = status


@dataclass(frozen=True)
class ImagePipeline:
    """Preprocessing contract taken from the artifact (size, mean, std, preprocessing) plus the upload limits."""

    size: int  # square input side in px
    mean: tuple[float, float, float]  # per-channel mean of [0, 1] RGB
    std: tuple[float, float, float]
    max_pixels: int = 40_000_000
    max_bytes: int = 20 * 1024 * 1024
    preprocessing: str = LEGACY_PREPROCESSING  # models.preprocessing contract named by the artifact

    def normalise(self, rgb: np.ndarray) -> np.ndarray:
        """uint8 [H, W, 3] -> float32 [3, H, W], (x/255 - mean) / std."""
        x = rgb.astype(np.float32) / np.float32(255.0)  # [H, W, 3]
        y = (x - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        return np.ascontiguousarray(y.transpose(2, 0, 1), dtype=np.float32)  # [3, H, W]


def looks_like_image(data: bytes) -> bool:
    """True when the bytes start with the signature of an accepted image format."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return True
    return any(data.startswith(sig) for sig in _IMAGE_SIGNATURES)


def _sniff_name(data: bytes) -> str:
    if data.startswith(b"%PDF"):
        return "a PDF document"
    if data.startswith(b"PK\x03\x04"):
        return "a ZIP archive"
    if data.lstrip()[:1] in (b"{", b"["):
        return "JSON text"
    if data.lstrip()[:1] == b"<":
        return "HTML/XML text"
    return "not a recognised image format"


def open_image(data: bytes, *, max_pixels: int, max_bytes: int) -> Image.Image:
    """Identify the image and check size limits from its header; nothing is decoded yet."""
    if not data:
        raise ImageRejected("undecodable-image", "The image is empty (0 bytes).", 400)
    if len(data) > max_bytes:
        raise ImageRejected(
            "payload-too-large", f"The image is {len(data)} bytes; the limit is {max_bytes} bytes.", 413
        )
    try:
        img = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise ImageRejected(
            "image-too-large", f"The image exceeds the limit of {max_pixels} pixels (decompression bomb): {exc}", 413
        ) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        if looks_like_image(data):
            raise ImageRejected(
                "undecodable-image", "The image header is corrupt or truncated and cannot be read.", 400
            ) from exc
        raise ImageRejected(
            "unsupported-media-type",
            f"Unsupported content ({_sniff_name(data)}); send a JPEG, PNG, TIFF, WebP or BMP image.",
            415,
        ) from exc
    if img.format not in ALLOWED_FORMATS:
        raise ImageRejected(
            "unsupported-media-type",
            f"Image format {img.format} is not accepted; send a JPEG, PNG, TIFF, WebP or BMP image.",
            415,
        )
    width, height = img.size
    if width * height > max_pixels:
        raise ImageRejected(
            "image-too-large",
            f"The image is {width}x{height} = {width * height} pixels; the limit is {max_pixels} pixels.",
            413,
        )
    if min(width, height) < MIN_SIDE:
        raise ImageRejected(
            "image-too-small", f"The image is {width}x{height} px; both sides must be >= {MIN_SIDE} px.", 400
        )
    frames = int(getattr(img, "n_frames", 1))
    if frames > 1 and img.format != "MPO":
        raise ImageRejected(
            "multi-frame-image",
            f"The {img.format} has {frames} frames (animation or multi-page); send one photograph.",
            415,
        )
    return img


def _to_rgb8(img: Image.Image) -> np.ndarray:
    """Any decoded Pillow mode -> uint8 [H, W, 3]; high bit depths are scaled, alpha goes on black."""
    mode = img.mode
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        arr = np.asarray(img, dtype=np.float64)  # [H, W]
        if mode == "F":
            top = 1.0 if arr.size and float(np.nanmax(arr)) <= 1.0 else float(np.nanmax(arr) or 1.0)
        else:
            top = 65535.0 if mode.startswith("I;16") or float(arr.max(initial=0)) <= 65535 else float(arr.max())
        gray = np.clip(np.nan_to_num(arr) / top, 0.0, 1.0) * 255.0
        gray8 = np.round(gray).astype(np.uint8)
        return np.repeat(gray8[:, :, None], 3, axis=2)
    has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode == "P" and "transparency" in img.info)
    if has_alpha:
        rgba = np.asarray(img.convert("RGBA"), dtype=np.float32)  # [H, W, 4]
        rgb = rgba[:, :, :3] * (rgba[:, :, 3:4] / 255.0)  # composite on black
        return np.round(rgb).astype(np.uint8)
    return np.asarray(img.convert("RGB"), dtype=np.uint8)


def decode_rgb(data: bytes, *, max_pixels: int, max_bytes: int, target: int | None = None) -> np.ndarray:
    """Validate and decode to oriented 8-bit RGB, uint8 [H, W, 3].

    ``target``: the side the caller will resize to; JPEGs much larger than that are decoded at a
    reduced DCT scale (still >= 2*target px) to save time and memory.
    """
    img = open_image(data, max_pixels=max_pixels, max_bytes=max_bytes)
    if img.format in ("JPEG", "MPO") and b"\xff\xd9" not in data[-4096:]:
        # libjpeg pads a truncated scan with grey instead of failing: require the end-of-image marker
        raise ImageRejected(
            "undecodable-image", "The JPEG data is truncated (no end-of-image marker) and cannot be used.", 400
        )
    try:
        if img.format in ("JPEG", "MPO") and target is not None:
            img.draft("RGB", (2 * target, 2 * target))
        img.load()
        img = ImageOps.exif_transpose(img) or img
        return _to_rgb8(img)
    except Image.DecompressionBombError as exc:
        raise ImageRejected("image-too-large", f"Decompression bomb refused: {exc}", 413) from exc
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageRejected(
            "undecodable-image", f"The {img.format} data is truncated or corrupt and cannot be decoded.", 400
        ) from exc


def fov_square(rgb: np.ndarray) -> np.ndarray:
    """Make a square with the field of view centred and whole. uint8 [H, W, 3] -> [S, S, 3].

    Square images are returned as they are (the training renders are square with the FOV centred,
    so serving sees exactly what training saw). For a wide or tall camera frame, the dark margins
    along the long axis are trimmed, down to a square around the FOV at most, and what remains is
    padded with black to a centred square: the FOV is never cut and never shrunk by empty margins.
    """
    h, w = rgb.shape[:2]
    if h == w:
        return rgb
    long_axis = 1 if w > h else 0
    short, long = min(h, w), max(h, w)
    bright = rgb.max(axis=2) > FOV_THRESHOLD  # [H, W]
    # a line across the long axis belongs to the FOV when a few of its pixels are bright (JPEG noise)
    profile = bright.sum(axis=1 - long_axis) >= max(2, short // 200)  # [long]
    idx = np.flatnonzero(profile)
    if idx.size:
        extent = min(long, max(short, int(idx[-1] - idx[0] + 1)))
        start = round((idx[0] + idx[-1]) / 2 - extent / 2)
        start = min(max(start, 0), long - extent)
    else:
        extent, start = long, 0
    rgb = rgb[:, start : start + extent] if long_axis == 1 else rgb[start : start + extent]
    h, w = rgb.shape[:2]
    side = max(h, w)
    out = np.zeros((side, side, 3), dtype=np.uint8)
    top, left = (side - h) // 2, (side - w) // 2
    out[top : top + h, left : left + w] = rgb
    return out


def resize_square(square: np.ndarray, size: int) -> np.ndarray:
    """uint8 [S, S, 3] -> uint8 [size, size, 3], bilinear (antialiased when shrinking), as in training."""
    if square.shape[0] == size:
        return square
    return np.asarray(Image.fromarray(square).resize((size, size), Image.Resampling.BILINEAR))
