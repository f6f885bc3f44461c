"""Batch job throughput vs the model alone, on the same machine and settings, in one run.

Measures, for one model and one set of generated fundus-like JPEGs:

* ``prepare`` — read + ``prepare_image`` (decode, quality gate, resize, normalise) alone, in a thread
  pool and in a process pool of ``--workers``;
* ``model alone`` — ``Scorer.score_batch`` on pre-decoded images in batches of ``--batch-size``;
* ``batch job`` — the whole ``run_job`` (discovery, pooled decode overlapped with the model, atomic part
  files, assembly of the results file, summary), once per pool kind.

Example (the figures in docs/results-benchmarks.md, "Batch")::

    .venv/bin/python benchmarks/batch_throughput.py --images 64 --width 4 --input-size 64
    .venv/bin/python benchmarks/batch_throughput.py --images 32 --width 16 --input-size 256
    .venv/bin/python benchmarks/batch_throughput.py --model-dir models/default --images 16

Without ``--model-dir`` an untrained radial VGG-16* of ``--width``/``--input-size`` is saved as a
temporary artifact (the numbers depend on the architecture, not on trained weights).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.batch.job import BatchJobConfig, run_job
from service.batch.local import PoolKind, load_prepared, make_executor
from service.inference.loading import load_scorer
from service.inference.prepare import PreparedImage
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec


def make_images(folder: Path, n: int, size: int, seed: int = 0) -> list[Path]:
    """``n`` fundus-like JPEGs (red textured disc, vessels-ish stripes) of ``size`` x ``size`` px."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    c = (size - 1) / 2
    r = np.hypot(yy - c, xx - c) / (0.46 * size)
    base = np.stack([0.75 - 0.2 * r, 0.35 - 0.1 * r, 0.15 - 0.05 * r], axis=-1)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        stripes = 0.06 * np.sin(xx / (3 + i % 7) + yy / (5 + i % 3))[..., None]
        img = np.clip(base + stripes + rng.normal(0, 0.04, (size, size, 1)), 0, 1) * (r <= 1)[..., None]
        path = folder / f"eye{i:04d}.jpg"
        Image.fromarray((img * 255).astype(np.uint8)).save(path, quality=90)
        paths.append(path)
    return paths


def tiny_artifact(directory: Path, width: int, input_size: int) -> Path:
    """An untrained radial VGG-16* artifact of the given width and input size."""
    import torch

    from models.artifact import ArtifactConfig, Calibration, ServingDraws, save_artifact
    from models.image.transform import ImageTransform
    from models.nn.vgg import VGGConfig, build_vgg16_star

    torch.manual_seed(0)
    arch = VGGConfig(width=width, input_size=input_size, layer="radial", rho_init=-4.0)
    config = ArtifactConfig(
        name=f"bench-w{width}-{input_size}px", version="0", architecture=arch,
        input=ImageTransform(size=input_size, mean=(0.45, 0.25, 0.15), std=(0.25, 0.15, 0.1)),
        serving=ServingDraws(mc_samples=16, draw_seed=0), posterior="radial", prior={"kind": "unit_gaussian"},
        training_data="synthetic", intended_use="Benchmarks only: untrained.",
    )
    calibration = Calibration(referral_threshold_mi=0.01, target_referral_rate=0.2, decision_threshold=0.5,
                              dataset="none: benchmark")
    save_artifact(directory, model=build_vgg16_star(arch), config=config, calibration=calibration,
                  model_card="# Benchmark model\n\nUntrained.\n", overwrite=True)
    return directory


def time_prepare(paths: list[Path], scorer: Scorer, pool: PoolKind, workers: int) -> tuple[float, list[Any]]:
    """Images/s of read + prepare_image alone in a pool (pool start-up excluded)."""
    with make_executor(pool, workers) as ex:
        list(ex.map(load_prepared, [str(paths[0])] * workers, [scorer.pipeline] * workers))  # warm workers
        start = time.perf_counter()
        results = list(ex.map(load_prepared, [str(p) for p in paths], [scorer.pipeline] * len(paths)))
        elapsed = time.perf_counter() - start
    return len(paths) / elapsed, results


def time_model(prepared: list[PreparedImage], scorer: Scorer, batch_size: int) -> float:
    """Images/s of Scorer.score_batch on pre-decoded images (one warm-up batch first)."""
    scorer.score_batch(prepared[:batch_size])
    start = time.perf_counter()
    for i in range(0, len(prepared), batch_size):
        scorer.score_batch(prepared[i:i + batch_size])
    return len(prepared) / (time.perf_counter() - start)


def time_job(folder: Path, out_dir: Path, scorer: Scorer, model_dir: Path, pool: PoolKind,
             args: argparse.Namespace) -> float:
    """Images/s of the whole batch job (scorer already loaded, as in a long job)."""
    cfg = BatchJobConfig(input=folder, output=out_dir / f"results-{pool}.csv",
                         spec=ScorerSpec(model_dir=model_dir, device="cpu"),
                         batch_size=args.batch_size, workers=args.workers, pool=pool,
                         restart=True, progress=False, summary=out_dir / f"summary-{pool}.json")
    start = time.perf_counter()
    result = run_job(cfg, scorer=scorer)
    elapsed = time.perf_counter() - start
    assert result.summary["counts"]["scored"] == args.images, result.summary["counts"]
    return args.images / elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--model-dir", type=Path, default=None)
    p.add_argument("--width", type=int, default=4)
    p.add_argument("--input-size", type=int, default=64)
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--image-size", type=int, default=768, help="side of the generated JPEGs (px)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="best of this many runs per stage")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="radscreen-batch-bench-") as tmp:
        root = Path(tmp)
        model_dir = args.model_dir or tiny_artifact(root / "artifact", args.width, args.input_size)
        scorer = load_scorer(ScorerSpec(model_dir=model_dir, device="cpu"))
        paths = make_images(root / "images", args.images, args.image_size)
        figures: dict[str, Any] = {
            "model": scorer.model_identity.name, "input_size": scorer.pipeline.size,
            "images": args.images, "image_size": args.image_size, "batch_size": args.batch_size,
            "workers": args.workers, "cpus": os.cpu_count(), "python": platform.python_version(),
        }
        prepared: list[Any] = []
        # Best of --repeats, stages interleaved: on a shared machine the best run is the least disturbed.
        for _ in range(args.repeats):
            for pool in ("thread", "process"):
                rate, prepared = time_prepare(paths, scorer, pool, args.workers)
                figures[f"prepare_{pool}_img_s"] = max(rate, figures.get(f"prepare_{pool}_img_s", 0.0))
            rate = time_model(prepared, scorer, args.batch_size)
            figures["model_alone_img_s"] = max(rate, figures.get("model_alone_img_s", 0.0))
            for pool in ("thread", "process"):
                rate = time_job(root / "images", root, scorer, model_dir, pool, args)  # type: ignore[arg-type]
                figures[f"job_{pool}_img_s"] = max(rate, figures.get(f"job_{pool}_img_s", 0.0))

    print(f"model {figures['model']} ({figures['input_size']} px), {args.images} JPEGs of "
          f"{args.image_size} px, batch {args.batch_size}, {args.workers} workers, {figures['cpus']} CPUs, "
          f"best of {args.repeats}")
    print("| stage | images/s |\n| --- | ---: |")
    for key, label in (("prepare_thread_img_s", "prepare only, thread pool"),
                       ("prepare_process_img_s", "prepare only, process pool"),
                       ("model_alone_img_s", "model alone (Scorer.score_batch, pre-decoded)"),
                       ("job_thread_img_s", "batch job, thread pool"),
                       ("job_process_img_s", "batch job, process pool")):
        print(f"| {label} | {figures[key]:.1f} |")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
