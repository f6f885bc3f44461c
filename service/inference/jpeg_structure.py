"""JPEG structure read before decoding, and the sign a decoder leaves on a truncated JPEG.

Decoding a progressive JPEG costs about (number of scans) x (number of 8x8 blocks): every scan walks
every block of its components, even a scan of a few bytes that says "nothing changes here" (an
end-of-band run). A 256 KB file of 2,400 such scans over a large frame is a minute of CPU. So the
scans are counted from the markers before anything is decoded, and both their number and
``scans x pixels`` are bounded. The count reads the stream as libjpeg does: bytes where a marker
should be are skipped up to the next marker (libjpeg warns "extraneous bytes before marker" and
goes on decoding), so a garbage byte before a scan cannot hide the scans after it.

A baseline JPEG cut short and given an end-of-image marker decodes without error: libjpeg fills the
missing blocks with zero coefficients, i.e. exact mid-grey (128 in every channel), from the cut to the
bottom-right corner. :func:`has_grey_tail` finds that fill.
"""

from __future__ import annotations

import re

import numpy as np

# libjpeg's standard progression has 10 scans for colour (6 for grey); optimisers such as mozjpeg's
# jpegtran write a few more. 64 leaves room for any real encoder.
MAX_JPEG_SCANS = 64
# Work bound: scans x pixels at most this many times the pixel budget (a budget-sized photograph may
# carry 16 scans, a smaller one proportionally more, up to MAX_JPEG_SCANS).
SCAN_WORK_FACTOR = 16
GREY_FILL = 128  # what libjpeg's zero coefficients decode to
GREY_BLOCK = 8  # a missing tail is at least one 8x8 block (one MCU) at full scale

# inside entropy-coded data 0xFF is followed by 0x00 (stuffing) or a restart marker (D0-D7): any other
# byte after 0xFF starts a marker
_MARKER_IN_SCAN = re.compile(rb"\xff[^\x00\xd0-\xd7]")
# between segments libjpeg's next_marker skips anything up to 0xFF, any 0xFF fill, and an 0xFF00 pair
_NEXT_MARKER = re.compile(rb"\xff+[^\x00\xff]")
_SOS, _EOI = 0xDA, 0xD9
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})


def count_scans(data: bytes, *, stop_after: int = MAX_JPEG_SCANS + 1) -> int:
    """Walk the marker segments of the first JPEG in ``data`` (an MPO's primary frame), counting scans.

    Stops early after ``stop_after`` scans (enough to refuse). Linear in the size: segment lengths
    are skipped, entropy-coded data is searched for its next marker by one regular expression, and so
    are stray bytes between segments (libjpeg skips them with a warning and decodes on).
    """
    pos, scans, size = 2, 0, len(data)
    while pos + 1 < size:
        if data[pos] != 0xFF or data[pos + 1] in (0x00, 0xFF):  # garbage or fill where a marker belongs
            found = _NEXT_MARKER.search(data, pos)
            if found is None:
                break
            pos = found.end() - 2
        marker = data[pos + 1]
        if marker == _EOI:
            return scans
        if marker in _STANDALONE:
            pos += 2
            continue
        if pos + 4 > size:
            break
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
        if marker != _SOS:
            continue
        scans += 1
        if scans >= stop_after:
            break
        found = _MARKER_IN_SCAN.search(data, pos)
        if found is None:
            break
        pos = found.start()
    return scans


def scan_problem(scans: int, width: int, height: int, *, max_pixels: int) -> str:
    """Why decoding ``scans`` scans of a ``width x height`` frame is refused ("" when within both bounds)."""
    if scans > MAX_JPEG_SCANS:
        return (f"The JPEG has more than {MAX_JPEG_SCANS} scans; at most {MAX_JPEG_SCANS} are decoded "
                "(a progressive photograph has about 10).")
    work = scans * width * height
    if work > SCAN_WORK_FACTOR * max_pixels:
        return (f"The JPEG has {scans} scans over {width}x{height} px = {work} scan-pixels of decoding; "
                f"the limit is {SCAN_WORK_FACTOR} x RADSCREEN_MAX_PIXELS = {SCAN_WORK_FACTOR * max_pixels}.")
    return ""


def has_grey_tail(bottom_right: np.ndarray) -> bool:
    """Whether the bottom-right block (uint8 [h, w] or [h, w, c], before any rotation) is libjpeg's exact grey fill."""
    return bottom_right.size > 0 and bool((bottom_right == GREY_FILL).all())
