"""``radscreen-batch`` (also ``radscreen batch`` and ``python -m service.batch``): score a folder or manifest.

Example (a day's screening images, resumable; rerun the same command after an interruption)::

    radscreen-batch score --input /data/screening/2026-11-21 --output referrals.csv \\
        --summary referrals.summary.json --plot referrals.png

    radscreen-batch score --input trainLabels.csv --image-root train/ --id-column image \\
        --output eyepacs.parquet --batch-size 32 --workers 4

Exit status: 0 done, 2 unusable input or arguments (message on stderr), 1 unexpected failure.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from service.batch.inputs import InputError
from service.batch.output import OutputError
from service.batch.parts import PartStoreError
from service.batch.summary import format_summary

logger = logging.getLogger("service.batch")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``score`` is the one subcommand)."""
    parser = argparse.ArgumentParser(prog="radscreen-batch",
                                     description="Batch referral scoring of fundus images.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("score", help="score a folder or CSV manifest into CSV/JSONL/Parquet results",
                       description="Score every image once; rerunning the same command resumes.")
    p.add_argument("--input", required=True, type=Path, help="folder of images (recursive) or CSV manifest")
    p.add_argument("--output", required=True, type=Path, help="results file: .csv, .jsonl or .parquet")
    p.add_argument("--model-dir", type=Path, default=None,
                   help="model artifact folder (default: RADSCREEN_MODEL_DIR, else the embedded model)")
    p.add_argument("--backend", choices=("auto", "torch", "onnxruntime"), default="auto",
                   help="auto (default): ONNX Runtime for fp32 on CPU, torch for bf16/fp16 and GPUs")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                   help="auto (default): bf16 only where the artifact's measured drift allows it and the "
                   "CPU/GPU runs it natively, else fp32; explicit bf16 on a CPU without it is refused")
    p.add_argument("--native-bf16", choices=("detect", "yes", "no"), default="detect",
                   help="override the CPU's native-bf16 detection where it is wrong (default: detect)")
    p.add_argument("--batch-size", type=int, default=16, help="images per batched forward (default 16)")
    p.add_argument("--workers", type=int, default=2, help="parallel readers/decoders (default 2)")
    p.add_argument("--pool", choices=("thread", "process"), default="thread",
                   help="decode in threads (default; PIL releases the GIL) or processes")
    p.add_argument("--engine", choices=("local", "ray"), default="local")
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: RAY_ADDRESS or local)")
    p.add_argument("--ray-actors", type=int, default=1, help="model actors for --engine ray (default 1)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--restart", action="store_true", help="discard this output's earlier results")
    mode.add_argument("--resume", action="store_true", help="continue an earlier run (the default; accepted)")
    p.add_argument("--summary", type=Path, default=None, help="write the summary JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write probability/MI histograms (PNG) here")
    p.add_argument("--id-column", default=None, help="manifest column with unique ids (default: the path)")
    p.add_argument("--path-column", default=None, help="manifest column of image paths (default: image|path)")
    p.add_argument("--image-root", type=Path, default=None,
                   help="folder that manifest paths are relative to (default: the manifest's folder)")
    p.add_argument("--chunk-size", type=int, default=256, help="rows per committed part file (default 256)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def _model_dir(arg: Path | None) -> Path | None:
    """``--model-dir``, else ``RADSCREEN_MODEL_DIR`` (read here, at run time, never at import)."""
    if arg is not None:
        return arg
    import os

    env = os.environ.get("RADSCREEN_MODEL_DIR")
    return Path(env) if env else None


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the job, print the summary; returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from models.artifact import ArtifactError
    from service.batch.job import BatchJobConfig, run_job
    from service.inference.platform import PrecisionUnavailableError

    for name in ("batch_size", "workers", "chunk_size", "ray_actors"):
        if getattr(args, name) < 1:
            print(f"radscreen-batch: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    cfg = BatchJobConfig(
        input=args.input, output=args.output, model_dir=_model_dir(args.model_dir), backend=args.backend,
        device=args.device, precision=args.precision, native_bf16=args.native_bf16,
        batch_size=args.batch_size, workers=args.workers,
        pool=args.pool, engine=args.engine, restart=args.restart, summary=args.summary, plot=args.plot,
        id_column=args.id_column, path_column=args.path_column, image_root=args.image_root,
        chunk_size=args.chunk_size, progress=not args.no_progress, ray_address=args.ray_address,
        ray_actors=args.ray_actors,
    )
    try:
        result = run_job(cfg)
    except (InputError, OutputError, PartStoreError, ArtifactError, PrecisionUnavailableError) as exc:
        print(f"radscreen-batch: {exc}", file=sys.stderr)
        return 2
    print(format_summary(result.summary))
    print(f"wrote {result.rows} rows to {result.output}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
