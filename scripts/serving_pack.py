"""Build what a GPU lease's serving step carries (support/lease_serving.py), sized to what one command receives.

    .venv/bin/python scripts/serving_pack.py --out .lease/serving --wheels .whl-serving

Writes ``OUT/model`` (the artifact, its fp32 weights as lossless byte planes: ``support.weight_planes``),
``OUT/photos`` (real photographs: the 54 IDRiD lesion photographs and a seeded sample of ODIR-5K
*validation* patients, split seed 0 and sample seed 2026 as the precision record's, one of each in turn,
re-encoded as JPEG at
quality 90 with the longer side at most ``--max-side`` px, as many as fit) and ``OUT/wheels`` (the ``*.whl`` of
``--wheels``, copied). The photographs take what is left of the 64 MiB a command receives once the tree
without the embedded weights (which must not be in the working tree when the command is sent), the model and
the wheels are counted, less ``--margin-mib``; the script prints the total and refuses (exit 2) when even
the model and wheels do not fit. ``--photos-from DIR`` takes the photographs of DIR instead (the test suite's).
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from support.lease import SEND_LIMIT, folder_bytes, sent_bytes  # noqa: E402
from support.weight_planes import pack  # noqa: E402

MIB = 2**20


def reencoded(path: Path, max_side: int) -> bytes:
    """``path`` as a quality-90 JPEG whose longer side is at most ``max_side`` px (RGB)."""
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("RGB")
        im.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def default_photos() -> list[Path]:
    """The 54 IDRiD lesion photographs and the ODIR-5K validation sample (the precision record's order), one of
    each in turn, then the rest of the sample: whatever number fits holds both kinds."""
    from benchmarks.drift_real import odir_split, sample
    from support.shared_data import IDRID, ODIR, missing_reason

    if not (ODIR / "labels.csv").exists():
        raise SystemExit(missing_reason(ODIR))
    idrid, odir = sorted(IDRID.glob("*.jpg")), sample(odir_split(0).val, 300, 2026)
    mixed = [p for pair in zip(idrid, odir, strict=False) for p in pair]  # as many of each, while both last
    return mixed + odir[len(idrid):]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="the folder to write (carried as it is)")
    ap.add_argument("--model-dir", type=Path, default=ROOT / "models" / "default", help="the artifact to carry")
    ap.add_argument("--wheels", type=Path, default=None, help="a folder of *.whl for the node (the web stack)")
    ap.add_argument("--photos-from", type=Path, default=None, help="photographs to carry instead of the default")
    ap.add_argument("--max-side", type=int, default=768, help="longer side of a carried photograph, px")
    ap.add_argument("--margin-mib", type=float, default=0.5, help="left unused under the 64 MiB")
    args = ap.parse_args(argv)
    if args.out.exists():
        ap.error(f"--out {args.out} exists; remove it first")
    sizes = pack(args.model_dir, args.out / "model")
    if args.wheels is not None:
        (args.out / "wheels").mkdir()
        for wheel in sorted(args.wheels.glob("*.whl")):
            shutil.copy2(wheel, args.out / "wheels" / wheel.name)
    tree = sent_bytes(ROOT, None)["tree_bytes"]
    room = SEND_LIMIT - int(args.margin_mib * MIB) - tree - folder_bytes(args.out)
    if room <= 0:
        print(f"error: the tree ({tree / MIB:.1f} MiB), the model ({sizes['packed_bytes'] / MIB:.1f} MiB) and the "
              f"wheels leave no room under {SEND_LIMIT / MIB:.0f} MiB", file=sys.stderr)
        return 2
    photos = args.out / "photos"
    photos.mkdir()
    sources = (sorted(p for p in args.photos_from.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
               if args.photos_from else default_photos())
    used = 0
    for i, path in enumerate(sources):
        data = reencoded(path, args.max_side)
        if used + len(data) > room:
            break
        (photos / f"{i:03d}-{path.stem}.jpg").write_bytes(data)
        used += len(data)
    carried = folder_bytes(args.out)
    print(f"{args.out}: model {sizes['packed_bytes'] / MIB:.1f} MiB (weights {sizes['weights_bytes'] / MIB:.1f} "
          f"MiB unpacked), {len(list(photos.iterdir()))} of {len(sources)} photographs {used / MIB:.1f} MiB, "
          f"total {carried / MIB:.1f} MiB; with the tree ({tree / MIB:.1f} MiB, without the embedded weights) "
          f"{(carried + tree) / MIB:.1f} of {SEND_LIMIT / MIB:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
