"""The ``radscreen-train`` commands of a GPU lease: ``pack`` the training set into shards that travel,
``split-artifact`` a finished artifact into parts that come back, and ``reassemble`` them here (docs/deploy.md,
"GPU lease").

Examples::

    radscreen-train pack --data /data/odir-5k --layout odir --out .lease/shards --input-size 512
    radscreen-train split-artifact --artifact runs/lease/artifact --out $OUT
    radscreen-train reassemble --parts /work/.device/<call>/files --out models/lease-512
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from models.image.preprocessing import FOV_LOCAL_MEAN
from training.config import TrainConfig
from training.options import add_flags, values_of

MIB = 2**20
PACK_DEFAULTS = TrainConfig(data="", out="")
PACK_OPTIONS = ("data", "layout", "input_size", "preprocessing", "gradable_only", "include_other_disease", "split",
                "split_seed", "exclude_copies")


def add_lease_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                       formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("pack", help="pack a training set, preprocessed at the training size, into shards",
                       description="Decode and preprocess every image once at the training size and write the "
                                   "uint8 pixels (lossless), labels, patient ids and source into shards of at most "
                                   "--shard-mib each, with index.json; train on them with --layout shards.",
                       formatter_class=formatter)
    p.add_argument("--out", required=True, help="an empty or new folder for the shards")
    # fit's own options (training.config.TrainConfig), so that a run on the shards sees what fit would have
    add_flags(p, TrainConfig, defaults=PACK_DEFAULTS, names=PACK_OPTIONS, grouped=False)
    p.add_argument("--codec", choices=("png", "webp", "webp-crop"), default="png",
                   help="png, webp: the preprocessed pixels, lossless (webp about a quarter smaller, several times "
                        "slower to write); webp-crop: the FOV crop with its frame mask, lossy WebP (--quality), "
                        "the local-mean step made on reading (fov-local-mean/1 only; about a seventh of png at 512 "
                        "px; a run may read them at a smaller --input-size)")
    p.add_argument("--quality", type=int, default=90, help="webp-crop: WebP quality")
    p.add_argument("--sides", default="train,val,test",
                   help="which sides of the patient split to pack (comma-separated of train, val, test); when "
                        "some rows are left out (here or by --exclude-copy), the split is made on the whole "
                        "manifest with --split and --split-seed and recorded in the shards, so a run on them "
                        "keeps it")
    p.add_argument("--shard-mib", type=float, default=16.0, help="largest shard in MiB")
    p.add_argument("--cache-dir", default=None,
                   help="the preprocessed-image cache to use or fill (content-keyed; default: a temporary one)")
    p.add_argument("--workers", type=int, default=2, help="processes decoding, threads encoding")
    s = sub.add_parser("split-artifact", help="write an artifact as parts of at most 16 MiB with a manifest",
                       description="Cut an artifact directory into parts of at most --part-mib with a manifest of "
                                   "their sha256 (training.parts), for a machine that returns small files.",
                       formatter_class=formatter)
    s.add_argument("--artifact", required=True, help="artifact directory")
    s.add_argument("--out", required=True, help="folder for the parts and their manifest")
    s.add_argument("--name", default="artifact", help="file name stem of the parts")
    s.add_argument("--part-mib", type=float, default=16.0, help="largest part in MiB")
    r = sub.add_parser("reassemble", help="check an artifact's parts against their sha256 and unpack it",
                       description="Check every part and the whole against the parts manifest, unpack, check the "
                                   "artifact loads with the recorded sha256, and only then put it at --out.",
                       formatter_class=formatter)
    r.add_argument("--parts", required=True, help="the *.parts.json manifest, or the folder holding it")
    r.add_argument("--out", required=True, help="artifact directory to create (must not exist)")


def pack(args: argparse.Namespace) -> int:
    from training.data.cache import code_digest, preprocessed_array
    from training.data.crops import fov_crops
    from training.data.manifest import Manifest
    from training.data.prepare import read_rows
    from training.data.shards import CROP_CODECS, SIDES, pack_shards
    from training.data.splits import source_sides

    values = values_of(args, TrainConfig, defaults=PACK_DEFAULTS, names=PACK_OPTIONS)
    excluded = set(values.pop("exclude_copies"))  # left out after the split is made, so it does not change
    config = TrainConfig(out=args.out, **values)
    if config.layout == "shards":
        raise ValueError("--layout shards: the data are packed already; pack reads images")
    wanted = {s.strip() for s in args.sides.split(",") if s.strip()}
    if not wanted or wanted - set(SIDES):
        raise ValueError(f"--sides: choose among {', '.join(SIDES)}, got {args.sides!r}")
    if args.codec in CROP_CODECS and config.preprocessing != FOV_LOCAL_MEAN:
        raise ValueError(f"--codec {args.codec} stores the first step of {FOV_LOCAL_MEAN} only")
    every = read_rows(config)
    side = source_sides(every, config.split, seed=config.effective_split_seed)
    keep = [i for i, row in enumerate(every)
            if SIDES[side[i]] in wanted and getattr(row, "copy", None) not in excluded]
    rows = Manifest([every[i] for i in keep], source=every.source, skipped=every.skipped)
    info = Path(args.data) / "dataset.json"
    settings = {"layout": args.layout, "name": Path(args.data).name, "gradable_only": config.gradable_only,
                "include_other_disease": config.include_other_disease, "sides": sorted(wanted),
                "exclude_copies": sorted(excluded),
                "dataset": json.loads(info.read_text()) if info.is_file() else None}
    # shards of some rows only keep the whole manifest's split (recorded); shards of every row let a run split
    partial = len(keep) < len(every)
    split = {"fractions": list(config.split), "seed": config.effective_split_seed} if partial else None
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(args.cache_dir or tmp)
        if args.codec in CROP_CODECS:
            pixels = fov_crops(rows, size=args.input_size, cache_dir=cache, workers=args.workers, progress=True)
        else:
            pixels = preprocessed_array(rows, transform=config.image_transform(), cache_dir=cache,
                                        workers=args.workers, progress=True)
        index = pack_shards(rows, pixels, Path(args.out), preprocessing=config.preprocessing, code=code_digest(),
                            source=Path(args.data).name, codec=args.codec, max_bytes=int(args.shard_mib * MIB),
                            workers=args.workers, settings=settings, quality=args.quality,
                            sides=side[keep] if partial else None, split=split)
    largest = max((s["bytes"] for s in index["shards"]), default=0)
    sources = ", ".join(f"{k}: {v}" for k, v in index["sources"].items())
    print(f"packed {index['images']} images at {index['size']} px ({sources}) "
          f"into {len(index['shards'])} shards: {index['total_bytes'] / MIB:.1f} MiB "
          f"(raw uint8 {index['raw_bytes'] / MIB:.1f} MiB), largest {largest / MIB:.1f} MiB -> {args.out}")
    return 0


def split(args: argparse.Namespace) -> int:
    from training.parts import split_artifact

    manifest = split_artifact(Path(args.artifact), Path(args.out), name=args.name,
                              part_bytes=int(args.part_mib * MIB))
    parts = json.loads(manifest.read_text())["parts"]
    print(f"wrote {len(parts)} parts of at most {max(p['bytes'] for p in parts) / MIB:.1f} MiB and {manifest}")
    return 0


def reassemble(args: argparse.Namespace) -> int:
    from training.parts import reassemble as join

    sha = join(Path(args.parts), Path(args.out))
    print(f"reassembled {args.out}: every part and the whole match their sha256; artifact sha256 {sha}")
    return 0


HANDLERS = {"pack": pack, "split-artifact": split, "reassemble": reassemble}
