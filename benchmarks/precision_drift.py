"""Agreement of the serving modes on TRAINED weights: torch fp32 (reference) vs torch bf16 vs ONNX Runtime.

Scores the same synthetic fundus images through ``Scorer`` in each mode and prints, per mode, the largest
and mean absolute deviation from torch fp32 in the referable-DR probability and in the mutual
information, how many decisions (label or uncertainty referral) flip, and the time per image. One run,
side by side. Example (figures in docs/results-benchmarks.md, "Backends and precision")::

    .venv/bin/python benchmarks/precision_drift.py --model-dir models/default --images 48

bf16 runs only on a CPU with native bf16 (``service.inference.platform``): emulated it is ~70x slower; pass
``--emulated-bf16`` (with few ``--images``) to measure its drift anyway. The record that lets
``RADSCREEN_PRECISION=auto`` serve a reduced precision is measured on real photographs, by
``benchmarks/drift_real.py --record``; this script is the quick synthetic check and the CUDA/CPU parity table.

``--device cuda`` scores the modes on the GPU (torch fp32, bf16 where native, fp16; ONNX Runtime fp32 when
its CUDA provider loads) against the same reference, torch fp32 **on the CPU**: the CUDA/CPU parity table
of the GPU check. fp32 on CUDA is IEEE fp32 (``models.platform.cuda``), so its row measures kernel differences, not
TF32. An "outcome flip" is an image whose screening outcome changed. On CUDA the table ends with the served
answer, ``auto``: the precision ``RADSCREEN_PRECISION=auto`` picks there, behind its guard band when its
permit has one, as the service runs it.

``--photos DIR`` scores the first ``--images`` photographs in DIR (``*.jpg``, ``*.jpeg``, ``*.png``, sorted by name;
a GPU lease carries a sample of real ones) instead of synthetic images, through the served decode, quality gate and
preprocessing; a photograph the decoder refuses is named and left out. ``--report DIR`` appends one row per
mode to a lease report (``DIR/lease.jsonl`` and ``lease.md``) as soon as that mode is measured.

    python3 benchmarks/precision_drift.py --device cuda --model-dir /tmp/embedded --photos .lease/serving/photos \
        --report $OUT
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.outcome.decision import is_uncertain
from models.platform.cpu import detect_cpu
from models.platform.cuda import cuda_native_bf16
from models.serving.onnx_backend import ProviderFallbackError
from service.inference.imaging import ImageRejected
from service.inference.loading import load_scorer
from service.inference.prepare import PreparedImage, prepare_image
from service.inference.scoring import ImageScore, Scorer
from service.inference.spec import ScorerSpec
from support.images import synthetic_jpegs
from support.lease import append_row

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")


def score_all(scorer: Scorer, prepared: list[PreparedImage], batch: int) -> tuple[list[ImageScore], float]:
    scorer.warmup((min(batch, len(prepared)),))
    start = time.perf_counter()
    scores = [s for i in range(0, len(prepared), batch) for s in scorer.score_batch(prepared[i:i + batch])]
    return scores, (time.perf_counter() - start) / len(prepared)


def modes_for(device: str) -> list[tuple[str, dict[str, str]]]:
    """The compared serving modes on ``device`` (name, ScorerSpec keyword arguments)."""
    if device == "cuda":
        return [("torch fp32 cuda grouped", dict(backend="torch", precision="fp32", strategy="grouped")),
                ("torch bf16 cuda grouped", dict(backend="torch", precision="bf16", strategy="grouped")),
                ("torch fp16 cuda grouped", dict(backend="torch", precision="fp16", strategy="grouped")),
                ("onnxruntime fp32 cuda grouped", dict(backend="onnxruntime", precision="fp32", strategy="grouped")),
                ("served auto cuda", dict(backend="auto", precision="auto", strategy="auto"))]
    return [("torch bf16", dict(backend="torch", precision="bf16")),
            ("torch fp32 grouped", dict(backend="torch", precision="fp32", strategy="grouped")),
            ("onnxruntime fp32 loop", dict(backend="onnxruntime", precision="fp32", strategy="loop")),
            ("onnxruntime fp32 grouped", dict(backend="onnxruntime", precision="fp32", strategy="grouped"))]


def photographs(folder: Path, pipeline: object, limit: int) -> tuple[list[PreparedImage], list[str]]:
    """The first ``limit`` photographs of ``folder`` (by name) prepared as served, and the names of those the
    decoder refused."""
    prepared, refused = [], []
    for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in PHOTO_SUFFIXES)[:limit]:
        try:
            prepared.append(prepare_image(path.read_bytes(), pipeline))  # type: ignore[arg-type]
        except ImageRejected as exc:
            refused.append(f"{path.name} ({exc.problem_type})")
    return prepared, refused


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=None, help="artifact (default: the embedded model)")
    parser.add_argument("--images", type=int, default=48, help="synthetic images; with --photos, the first N")
    parser.add_argument("--image-size", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--emulated-bf16", action="store_true", help="run bf16 on a CPU without native bf16")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the compared modes run; the fp32 reference always runs on the CPU")
    parser.add_argument("--photos", type=Path, default=None,
                        help="score the photographs in this folder instead of --images synthetic ones")
    parser.add_argument("--report", type=Path, default=None,
                        help="a lease report folder: append each mode's row to its lease.jsonl and lease.md")
    args = parser.parse_args()
    if args.device == "cuda" and not cuda_available():
        parser.error("--device cuda: torch sees no CUDA device (a CPU build, or no GPU/driver)")

    cpu = detect_cpu(override="yes" if args.emulated_bf16 else "detect")
    print(f"CPU: {cpu.summary()}")
    reference = load_scorer(ScorerSpec(model_dir=args.model_dir, backend="torch", device="cpu", precision="fp32",
                                       strategy="loop"))
    if args.photos is not None:
        prepared, refused = photographs(args.photos, reference.pipeline, args.images)
        source = f"{len(prepared)} photographs of {args.photos}" + (f" ({len(refused)} refused by the decoder: "
                                                                     f"{', '.join(refused)})" if refused else "")
        if not prepared:
            parser.error(f"--photos {args.photos}: no photograph there that the decoder accepts")
    else:
        prepared = [prepare_image(b, reference.pipeline)
                    for b in synthetic_jpegs(args.images, args.image_size, args.seed)]
        source = f"{len(prepared)} synthetic images of {args.image_size} px (seed {args.seed})"
    print(f"images: {source}")
    ref, ref_s = score_all(reference, prepared, args.batch)
    thr = reference.calibration.referral_threshold_mi
    print(f"model {reference.model_identity.name} {reference.model_identity.sha256[:12]}, "
          f"{len(prepared)} images, MI referral threshold {thr:.3g} nat")
    ref_mi = np.array([r.mutual_information for r in ref])
    print(f"fp32 MI over these images: median {np.median(ref_mi):.3g} nat, 5-95 % "
          f"[{np.percentile(ref_mi, 5):.3g}, {np.percentile(ref_mi, 95):.3g}] (compare with |dMI| below)")
    print(f"{'mode':<28}{'s/img':>8}{'max|dp|':>11}{'mean|dp|':>11}{'max|dMI|':>11}{'mean|dMI|':>11}"
          f"{'label flips':>13}{'referral flips':>16}{'outcome flips':>15}")
    print(f"{'torch fp32 cpu (ref)':<28}{ref_s:>8.3f}")
    for name, kwargs in modes_for(args.device):
        skip = None
        if kwargs["precision"] == "bf16" and args.device == "cpu" and not cpu.native_bf16:
            skip = "this CPU has no native bf16 (pass --emulated-bf16 to measure it slowly)"
        elif kwargs["precision"] == "bf16" and args.device == "cuda" and not cuda_native_bf16():
            skip = "this GPU has no native bf16"
        else:
            try:
                scorer = load_scorer(ScorerSpec(model_dir=args.model_dir, device=args.device, **kwargs), cpu=cpu)  # type: ignore[arg-type]
            except ProviderFallbackError as exc:
                skip = str(exc)
            except ValueError as exc:  # a CPU onnxruntime (a GPU lease's node): its build has no CUDA provider
                if "providers not available" not in str(exc):
                    raise
                skip = str(exc)
        if skip is not None:
            print(f"{name:<28}skipped: {skip}")
            if args.report is not None:
                append_row(args.report, "precision drift", "skipped", mode=name, reason=skip)
            continue
        got, secs = score_all(scorer, prepared, args.batch)
        dp = np.abs([g.probability - r.probability for g, r in zip(got, ref, strict=True)])
        dmi = np.abs([g.mutual_information - r.mutual_information for g, r in zip(got, ref, strict=True)])
        label_flips = sum(g.label != r.label for g, r in zip(got, ref, strict=True))
        referral_flips = sum(is_uncertain(g.mutual_information, thr) != is_uncertain(r.mutual_information, thr)
                             for g, r in zip(got, ref, strict=True))
        outcome_flips = sum(g.outcome != r.outcome for g, r in zip(got, ref, strict=True))
        print(f"{name:<28}{secs:>8.3f}{dp.max():>11.2e}{dp.mean():>11.2e}{dmi.max():>11.2e}{dmi.mean():>11.2e}"
              f"{label_flips:>13}{referral_flips:>16}{outcome_flips:>15}")
        if args.report is not None:
            ran = scorer.backend
            append_row(args.report, "precision drift", "ok", mode=name,
                       ran=f"{ran.name} {ran.precision} on {ran.device}", images=source,
                       reference="torch fp32 on the CPU", seconds_per_image=round(secs, 4),
                       max_abs_dp=float(dp.max()), mean_abs_dp=float(dp.mean()), max_abs_dmi=float(dmi.max()),
                       mean_abs_dmi=float(dmi.mean()), label_flips=int(label_flips),
                       referral_flips=int(referral_flips), outcome_flips=int(outcome_flips))


if __name__ == "__main__":
    main()
