"""Peak memory of one decode + quality gate + preprocessing, per pixel, by image kind.

The parent encodes a ``--side`` x ``--side`` image of each kind to a file; a fresh child process per
kind reads the bytes (so no freed encoder memory sits in its RSS), warms up on a small image, resets
its ``VmHWM`` (``/proc/self/clear_refs`` = 5), runs ``service.inference.scoring.prepare_image`` once and prints
``(VmHWM - VmRSS before) / pixels``. The largest figure is the ``DECODE_BYTES_PER_PIXEL`` that
``benchmarks/memory_bound.py`` and docs/service.md ("Memory bound") use for the decoding term.

    .venv/bin/python benchmarks/decode_peak.py [--side 2000]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

KINDS = ("rgb-png", "rgb-jpeg", "rgb16-png", "rgba-png", "int32-tiff", "float32-tiff")


def encode(kind: str, side: int) -> bytes:
    """A fundus-like ``side`` x ``side`` image in the format and pixel type ``kind``."""
    from support.images import fundus_like

    rgb = fundus_like(3, size=side)  # uint8 [S, S, 3]
    buf = io.BytesIO()
    if kind == "rgb-png":
        Image.fromarray(rgb).save(buf, "PNG")
    elif kind == "rgb-jpeg":
        Image.fromarray(rgb).save(buf, "JPEG", quality=90)
    elif kind == "rgb16-png":
        Image.fromarray(rgb[..., 1].astype(np.uint16) * 257).save(buf, "PNG")  # 16-bit greyscale (I;16)
    elif kind == "rgba-png":
        Image.fromarray(np.dstack([rgb, np.full(rgb.shape[:2], 200, np.uint8)])).save(buf, "PNG")
    elif kind == "int32-tiff":
        Image.fromarray(rgb[..., 1].astype(np.int32) * 1000).save(buf, "TIFF")
    elif kind == "float32-tiff":
        Image.fromarray(rgb[..., 1].astype(np.float32) / 255).save(buf, "TIFF")
    else:
        raise ValueError(kind)
    return buf.getvalue()


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def measure(path: Path) -> float:
    """Peak bytes per pixel of ``prepare_image`` on the image file ``path`` (run in a fresh process)."""
    from service.inference.imaging import ImagePipeline
    from service.inference.prepare import prepare_image

    data = path.read_bytes()
    with Image.open(io.BytesIO(data)) as img:
        pixels = img.width * img.height
    pipeline = ImagePipeline(size=256, mean=(0.5,) * 3, std=(0.25,) * 3, max_pixels=pixels, max_bytes=len(data) + 1)
    prepare_image(encode("rgb-png", 64), pipeline)  # import-time and first-call allocations out of the way
    Path("/proc/self/clear_refs").write_text("5")
    before = _kib("VmRSS")
    prepare_image(data, pipeline)
    return (_kib("VmHWM") - before) * 1024 / pixels


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", type=int, default=2000, help="image side in px")
    p.add_argument("--file", type=Path, help="measure this image in this process (used by the parent)")
    args = p.parse_args(argv)
    if args.file:
        print(f"{measure(args.file):.1f}")
        return
    print(f"prepare_image peak above the RSS before it, {args.side} x {args.side} px:")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS:
            path = Path(tmp) / kind
            path.write_bytes(encode(kind, args.side))
            out = subprocess.run([sys.executable, __file__, "--file", str(path)],
                                 check=True, capture_output=True, text=True, cwd=ROOT)
            bpp = float(out.stdout.strip().splitlines()[-1])
            worst = max(worst, bpp)
            print(f"  {kind:<13} {bpp:5.1f} B/px")
    print(f"worst: {worst:.1f} B/px")


if __name__ == "__main__":
    main()
