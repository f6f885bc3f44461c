"""Agreement of the serving modes on TRAINED weights: torch fp32 (reference) vs torch bf16 vs ONNX Runtime.

Scores the same synthetic fundus images through ``Scorer`` in each mode and prints, per mode, the largest
and mean absolute deviation from torch fp32 in the referable-DR probability and in the mutual
information, how many decisions (label or uncertainty referral) flip, and the time per image. One run,
side by side. Example (figures in docs/benchmarks.md, "Precision on trained weights")::

    .venv/bin/python benchmarks/precision_drift.py --model-dir models/default --images 48

bf16 runs only on a CPU with native bf16 (``service.inference.platform``): emulated it is ~70x slower; pass
``--emulated-bf16`` (with few ``--images``) to measure its drift anyway. The record that lets
``RADSCREEN_PRECISION=auto`` serve a reduced precision is measured on real photographs, by
``benchmarks/drift_real.py --record``; this script is the quick synthetic check and the CUDA/CPU parity table.

``--device cuda`` scores the modes on the GPU (torch fp32, bf16 where native, fp16; ONNX Runtime fp32 when
its CUDA provider loads) against the same reference, torch fp32 **on the CPU**: the CUDA/CPU parity table
of the GPU check. fp32 on CUDA is IEEE fp32 (``models.cuda``), so its row measures kernel differences, not
TF32. An "outcome flip" is an image whose screening outcome changed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.cpu import detect_cpu
from models.cuda import cuda_native_bf16
from models.decision import is_uncertain
from models.onnx_backend import ProviderFallbackError
from service.inference.loading import load_scorer
from service.inference.prepare import PreparedImage, prepare_image
from service.inference.scoring import ImageScore, Scorer
from service.inference.spec import ScorerSpec
from support.images import synthetic_jpegs


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
                ("onnxruntime fp32 cuda grouped", dict(backend="onnxruntime", precision="fp32", strategy="grouped"))]
    return [("torch bf16", dict(backend="torch", precision="bf16")),
            ("torch fp32 grouped", dict(backend="torch", precision="fp32", strategy="grouped")),
            ("onnxruntime fp32 loop", dict(backend="onnxruntime", precision="fp32", strategy="loop")),
            ("onnxruntime fp32 grouped", dict(backend="onnxruntime", precision="fp32", strategy="grouped"))]


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=None, help="artifact (default: the embedded model)")
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--image-size", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--emulated-bf16", action="store_true", help="run bf16 on a CPU without native bf16")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the compared modes run; the fp32 reference always runs on the CPU")
    args = parser.parse_args()
    if args.device == "cuda" and not cuda_available():
        parser.error("--device cuda: torch sees no CUDA device (a CPU build, or no GPU/driver)")

    cpu = detect_cpu(override="yes" if args.emulated_bf16 else "detect")
    print(f"CPU: {cpu.summary()}")
    reference = load_scorer(ScorerSpec(model_dir=args.model_dir, backend="torch", device="cpu", precision="fp32",
                                       strategy="loop"))
    prepared = [prepare_image(b, reference.pipeline) for b in synthetic_jpegs(args.images, args.image_size, args.seed)]
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
        if kwargs["precision"] == "bf16" and args.device == "cpu" and not cpu.native_bf16:
            print(f"{name:<28}skipped: this CPU has no native bf16 (pass --emulated-bf16 to measure it slowly)")
            continue
        if kwargs["precision"] == "bf16" and args.device == "cuda" and not cuda_native_bf16():
            print(f"{name:<28}skipped: this GPU has no native bf16")
            continue
        try:
            scorer = load_scorer(ScorerSpec(model_dir=args.model_dir, device=args.device, **kwargs), cpu=cpu)  # type: ignore[arg-type]
        except ProviderFallbackError as exc:
            print(f"{name:<28}skipped: {exc}")
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


if __name__ == "__main__":
    main()
