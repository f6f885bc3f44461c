"""TIFF tile and strip sizes, bounded from the header like the frame size.

A TIFF is decoded tile by tile (or strip by strip) and the decoder allocates one whole tile, at the
size the header declares, whatever the frame size: a 64x64 image may declare one 46336x46336 deflate
tile (2 MB of compressed zeros) and cost 2 GiB to decode. Real writers use tiles of 16 to 1024 px a
side (a multiple of 16, at most the frame rounded up) and strips no wider than the frame, so a tile
side is allowed up to the frame side rounded up to 16 or ``MAX_TILE_SIDE``, whichever is larger, and
any tile or strip at most the pixel budget. Strips are as wide as the frame by definition; their
rows are clamped to the frame height by the decoder, so the frame check already bounds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_TILE_SIDE = 1024
TILE_WIDTH, TILE_LENGTH = 322, 323  # TIFF tags


def _round_up(value: int, step: int = 16) -> int:
    return -(-value // step) * step


def tile_problem(tags: Mapping[int, Any], width: int, height: int, *, max_pixels: int) -> str:
    """Why the declared tile size is refused ("" for a strip layout or a tile within the bounds)."""
    if TILE_WIDTH not in tags and TILE_LENGTH not in tags:
        return ""
    try:
        tile_w, tile_h = int(tags.get(TILE_WIDTH, width)), int(tags.get(TILE_LENGTH, height))
    except (TypeError, ValueError):
        return "The TIFF tile size is not a number."
    limit_w, limit_h = max(_round_up(width), MAX_TILE_SIDE), max(_round_up(height), MAX_TILE_SIDE)
    if tile_w < 1 or tile_h < 1 or tile_w > limit_w or tile_h > limit_h or tile_w * tile_h > max_pixels:
        return (f"The {width}x{height} TIFF declares {tile_w}x{tile_h} px tiles; a tile may be at most "
                f"{limit_w}x{limit_h} px for this frame and {max_pixels} pixels (RADSCREEN_MAX_PIXELS).")
    return ""
