"""Image decoding and validation of uploads: bytes in, an 8-bit RGB photograph out.

Everything here is plain Pillow + numpy (no FastAPI, no torch) and runs in a worker thread. The decode
itself is ``models.image.decode`` (the one training runs); this module wraps it in the checks an upload from
the network needs, and ``ImagePipeline`` joins the artifact's ``models.image.transform.ImageTransform`` to the
upload limits.

Rules, in the order they are applied:

1. Size in bytes: empty -> 400; more than ``max_bytes`` -> 413 (the HTTP layer already refuses a
   larger ``Content-Length`` or streamed body before it is read, this is the backstop).
2. Type by *content* (magic bytes), never by the declared content type: JPEG, PNG, TIFF, WebP, BMP,
   GIF (single frame) and MPO (phone-camera JPEG; its primary frame is used). PDF and anything not
   recognised as an image -> 415.
3. Geometry from the header, *before* decoding (``Image.open`` only reads the header), so that no
   later allocation can exceed the budget: more than ``max_pixels`` pixels -> 413; a padded FOV
   square (``max(w, h)**2``, what ``models.image.preprocessing.fov_square`` may build) above ``max_pixels``
   -> 413; Pillow's own decompression-bomb error also -> 413. Sides below ``MIN_SIDE`` px -> 400 (nothing to grade in a
   thumbnail); a long side more than ``MAX_ASPECT_RATIO`` times the short one -> 400
   ``extreme-aspect-ratio`` (not a fundus photograph). Metadata is bounded too: Pillow's PNG text
   limits (``MAX_TEXT_CHUNK`` 1 MiB per compressed chunk, ``MAX_TEXT_MEMORY`` 64 MiB in all) turn
   a zTXt/iCCP "zip bomb" into a ``ValueError`` -> 400; every other ICC/EXIF/XMP block is at most
   the upload itself (``max_bytes``). Decoding work is bounded from the header too: a TIFF's tile
   size (``service.inference.tiff_layout``; a huge declared tile -> 413 ``image-too-large``) and a
   JPEG's number of scans and scans x pixels (``service.inference.jpeg_structure``; -> 422
   ``image-too-complex``).
4. Multi-frame images (animated GIF/WebP/PNG, multi-page TIFF) -> 415 ``multi-frame-image``: the
   service grades one photograph per image, and silently picking a frame could grade the wrong one.
5. Decoding: truncated or corrupt data -> 400 ``undecodable-image``; a JPEG whose last block is
   libjpeg's exact grey fill (pixel data cut short, whatever its trailer says) likewise. With a
   deadline (the service's ``RADSCREEN_DECODE_TIMEOUT_S``), a decode past it or abandoned by its client
   stops within one read chunk -> 422 ``image-too-complex``. JPEGs are decoded at a reduced
   scale (``draft``, ``models.image.decode.decode_side``) when far larger than needed, which is exact up to
   resampling and much faster.
6. Normalisation to 8-bit RGB (``models.image.decode.to_rgb8``): EXIF orientation applied; 16-bit and 32-bit
   integer images scaled by their container range (65535), not clipped; float images scaled to [0, 1];
   alpha composited on black (the fundus background); palette, grayscale, CMYK, YCbCr, LAB converted.

The geometry and normalisation that follow are the artifact's contract (``models.image.preprocessing``), run by
``service.inference.prepare.prepare_image`` through ``ImagePipeline.transform``.
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFile, PngImagePlugin, UnidentifiedImageError

from models.image.decode import DRAFT_FORMATS, draft_for, oriented_rgb8
from models.image.preprocessing import LEGACY as LEGACY_PREPROCESSING
from models.image.transform import ImageTransform
from service.inference.decode_deadline import CHUNK, DeadlineReader, DecodeAborted, DecodeDeadline
from service.inference.jpeg_structure import GREY_BLOCK, count_scans, has_grey_tail, scan_problem
from service.inference.spec import DEFAULT_DECODE_TIMEOUT_S, DEFAULT_MAX_PIXELS, DEFAULT_MAX_UPLOAD_BYTES
from service.inference.tiff_layout import tile_problem

MIN_SIDE = 16
# Real fundus frames are 1:1 (most cameras, Optos) to about 16:9 (1.78, consumer-camera backs); 4:1
# leaves a wide margin for montages and odd crops while refusing strips whose padded square would be
# mostly black (and, with the padded-square budget, any "aspect-ratio bomb" such as 100000x10).
MAX_ASPECT_RATIO = 4.0
FRAME_COUNT_CAP = 64  # frames counted for the multi-frame message; walking them all is a CPU bomb
# PNG text/iCCP chunks are decompressed at open: at most 1 MiB each (Pillow's MAX_TEXT_CHUNK), and we
# lower Pillow's 64 MiB total for all text chunks of one image to this (the service reads none of them).
MAX_PNG_TEXT_MEMORY = 4 * 1024 * 1024
PngImagePlugin.MAX_TEXT_MEMORY = min(PngImagePlugin.MAX_TEXT_MEMORY, MAX_PNG_TEXT_MEMORY)
_METADATA_LIMIT_ERRORS = ("Decompressed data too large", "Too much memory used in text chunks")
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


REJECTION_SLUGS = frozenset({
    "undecodable-image",  # corrupt, truncated or empty data
    "unsupported-media-type",  # not an accepted image format
    "multi-frame-image",  # animation or multi-page
    "payload-too-large",  # more bytes than the upload limit
    "image-too-large",  # more pixels than the budget (declared or as a bomb)
    "image-too-small",  # a side below MIN_SIDE
    "extreme-aspect-ratio",  # beyond MAX_ASPECT_RATIO
    "image-too-complex",  # decoding work beyond its bounds (JPEG scans, the decode deadline)
})


class ImageRejected(Exception):  # noqa: N818 (contract name)
    """An image the core refuses: a problem slug (``REJECTION_SLUGS``) and a detail a person can act on.

    It carries no HTTP status: ``service.http.errors.IMAGE_PROBLEM_STATUS`` maps each slug to one, and the
    batch job writes the slug into its error rows.
    """

    def __init__(self, problem_type: str, detail: str) -> None:
        if problem_type not in REJECTION_SLUGS:
            raise ValueError(f"unknown rejection slug {problem_type!r}")
        super().__init__(detail)
        self.problem_type = problem_type  # slug, e.g. "undecodable-image"
        self.detail = detail


@dataclass(frozen=True)
class ImagePipeline:
    """The artifact's image transform (size, mean, std, preprocessing) plus the upload and decode limits."""

    size: int  # square input side in px
    mean: tuple[float, float, float]  # per-channel mean of [0, 1] RGB
    std: tuple[float, float, float]
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    preprocessing: str = LEGACY_PREPROCESSING  # models.image.preprocessing contract named by the artifact
    decode_timeout_s: float = DEFAULT_DECODE_TIMEOUT_S  # one image's decode, from when a worker starts it

    @classmethod
    def of(cls, transform: ImageTransform, *, max_pixels: int = DEFAULT_MAX_PIXELS,
           max_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
           decode_timeout_s: float = DEFAULT_DECODE_TIMEOUT_S) -> ImagePipeline:
        """The pipeline of an artifact's transform (``artifact.image_transform()``) under these limits."""
        return cls(size=transform.size, mean=transform.mean, std=transform.std, max_pixels=max_pixels,
                   max_bytes=max_bytes, preprocessing=transform.preprocessing, decode_timeout_s=decode_timeout_s)

    @property
    def transform(self) -> ImageTransform:
        """The artifact's ``models.image.transform.ImageTransform``: what training ran on the same file."""
        return ImageTransform(size=self.size, preprocessing=self.preprocessing, mean=self.mean, std=self.std)

    def normalise(self, rgb: np.ndarray) -> np.ndarray:
        """uint8 [H, W, 3] -> float32 [3, H, W], (x/255 - mean) / std."""
        return self.transform.normalise(rgb)


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


def _refuse_multi_frame(img: Image.Image) -> None:
    """415 for an animation or multi-page file, counting at most ``FRAME_COUNT_CAP`` frames.

    ``n_frames`` would walk every frame (a 20 MB TIFF can chain ~175 000 tiny IFDs: a minute and a
    half of CPU), so only ``is_animated`` (cheap) is asked first and the count is capped.
    """
    try:
        if not getattr(img, "is_animated", False):
            return
        frames = 1
        while frames <= FRAME_COUNT_CAP:
            img.seek(frames)
            frames += 1
    except EOFError:
        pass
    except (OSError, SyntaxError, ValueError, struct.error) as exc:  # a corrupt later frame/IFD
        raise ImageRejected(
            "undecodable-image", f"The {img.format} frame list is corrupt and cannot be read."
        ) from exc
    if frames == 1:
        return
    shown = f"more than {FRAME_COUNT_CAP}" if frames > FRAME_COUNT_CAP else str(frames)
    raise ImageRejected(
        "multi-frame-image",
        f"The {img.format} has {shown} frames (animation or multi-page); send one photograph.",
    )


def check_geometry(width: int, height: int, *, max_pixels: int, max_aspect_ratio: float = MAX_ASPECT_RATIO) -> None:
    """Refuse, from the declared size alone, any image whose decoding or padding could exceed the budget.

    The decoded image is ``w*h`` pixels and ``fov_square`` may pad it to ``max(w, h)**2``: both must
    stay within ``max_pixels`` (``RADSCREEN_MAX_PIXELS``), so every later array is bounded by it.
    """
    pixels, side = width * height, max(width, height)
    if pixels > max_pixels:
        raise ImageRejected(
            "image-too-large",
            f"The image is {width}x{height} = {pixels} pixels; the limit is {max_pixels} pixels "
            "(RADSCREEN_MAX_PIXELS).",
        )
    if side * side > max_pixels:
        raise ImageRejected(
            "image-too-large",
            f"The image is {width}x{height} px: centred on a square it would be {side}x{side} = "
            f"{side * side} pixels; the limit is {max_pixels} pixels (RADSCREEN_MAX_PIXELS), so the long "
            f"side may be at most {math.isqrt(max_pixels)} px.",
        )
    if min(width, height) < MIN_SIDE:
        raise ImageRejected(
            "image-too-small", f"The image is {width}x{height} px; both sides must be >= {MIN_SIDE} px."
        )
    ratio = side / min(width, height)
    if ratio > max_aspect_ratio:
        digits = 1  # as many decimals as it takes to show the ratio above the limit (4.01:1, not 4.0:1)
        while round(ratio, digits) <= max_aspect_ratio and digits < 6:
            digits += 1
        raise ImageRejected(
            "extreme-aspect-ratio",
            f"The image is {width}x{height} px, an aspect ratio of {ratio:.{digits}f}:1; fundus photographs are "
            f"1:1 to about 16:9 and at most {max_aspect_ratio:g}:1 is accepted.",
        )


def _metadata_too_large(exc: BaseException) -> bool:
    return isinstance(exc, ValueError) and str(exc).startswith(_METADATA_LIMIT_ERRORS)


def _metadata_rejection() -> ImageRejected:
    return ImageRejected(
        "undecodable-image",
        "The image carries an embedded metadata block (text or ICC profile) that expands beyond the "
        f"safety limits ({PngImagePlugin.MAX_TEXT_CHUNK // 1024} KiB per block, "
        f"{PngImagePlugin.MAX_TEXT_MEMORY // 1024} KiB in all); re-export the photograph without it.",
    )


def _check_layout(img: Image.Image, data: bytes, max_pixels: int) -> None:
    """Refuse from the header what would cost more than the frame size says: TIFF tiles, JPEG scans."""
    width, height = img.size
    if img.format == "TIFF":
        problem = tile_problem(getattr(img, "tag_v2", {}), width, height, max_pixels=max_pixels)
        if problem:
            raise ImageRejected("image-too-large", problem)
    elif img.format in ("JPEG", "MPO"):
        problem = scan_problem(count_scans(data), width, height, max_pixels=max_pixels)
        if problem:
            raise ImageRejected("image-too-complex", problem)


def open_image(
    data: bytes, *, max_pixels: int, max_bytes: int, max_aspect_ratio: float = MAX_ASPECT_RATIO,
    deadline: DecodeDeadline | None = None,
) -> Image.Image:
    """Identify the image and check size limits from its header; nothing is decoded yet.

    With a ``deadline``, the decoder later reads the bytes in ``CHUNK``-sized pieces through a
    :class:`DeadlineReader` that stops it when the deadline passes or the request is abandoned.
    """
    if not data:
        raise ImageRejected("undecodable-image", "The image is empty (0 bytes).")
    if len(data) > max_bytes:
        raise ImageRejected(
            "payload-too-large", f"The image is {len(data)} bytes; the limit is {max_bytes} bytes."
        )
    try:
        img = Image.open(io.BytesIO(data) if deadline is None else DeadlineReader(data, deadline))
    except Image.DecompressionBombError as exc:
        raise ImageRejected(
            "image-too-large",
            f"The image exceeds the limit of {max_pixels} pixels (RADSCREEN_MAX_PIXELS; decompression bomb): {exc}",
        ) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, struct.error) as exc:
        if _metadata_too_large(exc):
            raise _metadata_rejection() from exc
        if looks_like_image(data):
            raise ImageRejected(
                "undecodable-image", "The image header is corrupt or truncated and cannot be read."
            ) from exc
        raise ImageRejected(
            "unsupported-media-type",
            f"Unsupported content ({_sniff_name(data)}); send a JPEG, PNG, TIFF, WebP or BMP image.",
        ) from exc
    if img.format not in ALLOWED_FORMATS:
        raise ImageRejected(
            "unsupported-media-type",
            f"Image format {img.format} is not accepted; send a JPEG, PNG, TIFF, WebP or BMP image.",
        )
    width, height = img.size
    check_geometry(width, height, max_pixels=max_pixels, max_aspect_ratio=max_aspect_ratio)
    _check_layout(img, data, max_pixels)
    if img.format != "MPO":
        _refuse_multi_frame(img)
    if deadline is not None and isinstance(img, ImageFile.ImageFile):
        img.decodermaxblock = CHUNK
    return img


def _refuse_grey_tail(img: Image.Image, declared_width: int) -> None:
    """400 when a decoded JPEG ends in libjpeg's exact mid-grey fill: its pixel data stopped early."""
    block = max(1, GREY_BLOCK * img.size[0] // declared_width)  # one 8x8 block at the draft scale
    w, h = img.size
    if has_grey_tail(np.asarray(img.crop((w - block, h - block, w, h)))):
        raise ImageRejected(
            "undecodable-image",
            "The JPEG pixel data ends early (truncated file): its last blocks decode to the flat grey a "
            "decoder puts in place of missing data. Send the complete file.",
        )


def decode_rgb(
    data: bytes, *, max_pixels: int, max_bytes: int, size: int | None = None,
    deadline: DecodeDeadline | None = None,
) -> np.ndarray:
    """Validate and decode to oriented 8-bit RGB, uint8 [H, W, 3]: ``models.image.decode`` within the upload checks.

    ``size``: the input side of the model the image is for; JPEGs much larger than that are decoded at
    a reduced DCT scale (``models.image.decode.draft_for``, the rule training decodes by) to save time and
    memory. ``deadline``: stop decoding (``image-too-complex``) when it passes or the request is cancelled.
    """
    try:
        img = open_image(data, max_pixels=max_pixels, max_bytes=max_bytes, deadline=deadline)
    except DecodeAborted as exc:
        raise ImageRejected("image-too-complex", str(exc)) from exc
    declared_width = img.size[0]
    if img.format in DRAFT_FORMATS and b"\xff\xd9" not in data[-4096:]:
        # libjpeg pads a truncated scan with grey instead of failing: require the end-of-image marker
        raise ImageRejected(
            "undecodable-image", "The JPEG data is truncated (no end-of-image marker) and cannot be used."
        )
    try:
        if size is not None:
            draft_for(img, size)
        img.load()
        if img.format in DRAFT_FORMATS and img.mode in ("RGB", "L", "YCbCr"):
            _refuse_grey_tail(img, declared_width)  # before any rotation moves the last block
        return oriented_rgb8(img)
    except Image.DecompressionBombError as exc:
        raise ImageRejected("image-too-large", f"Decompression bomb refused: {exc}") from exc
    except DecodeAborted as exc:
        raise ImageRejected("image-too-complex", str(exc)) from exc
    except (OSError, SyntaxError, ValueError, EOFError, struct.error) as exc:
        if _metadata_too_large(exc):
            raise _metadata_rejection() from exc
        raise ImageRejected(
            "undecodable-image", f"The {img.format} data is truncated or corrupt and cannot be decoded."
        ) from exc
