"""CUDA against the CPU reference on the embedded model, or the artifact ``$RADSCREEN_PARITY_ARTIFACT`` names
(``gpu``: skipped without a CUDA device).

The reference is torch fp32 on the CPU. On CUDA, fp32 is IEEE fp32 (TF32 off, models.platform.cuda), so it differs
from the CPU only by summation order: probabilities agree to 1e-4 and no screening outcome flips. bf16 and
fp16 are reduced precisions: their probability error is bounded from the CPU bf16 measurement on trained
weights (max |Δp| 5.2e-3, docs/results-benchmarks.md) with a 4x margin, and their outcome flips are counted and
printed, not forbidden (bf16 flips MI referrals on a narrow posterior; the artifact's gate decides).
"""

from __future__ import annotations

import numpy as np
import pytest

from service.inference.loading import load_scorer
from service.inference.prepare import PreparedImage, prepare_image
from service.inference.scoring import ImageScore
from service.inference.spec import PrecisionSetting, ScorerSpec
from support.images import synthetic_jpegs
from tests.helpers.gpu import GPU, ort_cuda_or_skip, parity_artifact

pytestmark = GPU

BOUNDS = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 5e-3}  # max |Δp| against the CPU fp32 reference


@pytest.fixture(scope="module")
def reference() -> tuple[list[PreparedImage], list[ImageScore]]:
    scorer = load_scorer(ScorerSpec(model_dir=parity_artifact(), backend="torch", device="cpu", precision="fp32",
                                    strategy="loop"))
    prepared = [prepare_image(b, scorer.pipeline) for b in synthetic_jpegs(16, 512, seed=2026)]
    return prepared, scorer.score_batch(prepared)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_cuda_scores_agree_with_the_cpu_reference(precision: PrecisionSetting, reference: tuple[list[PreparedImage],
                                                                                   list[ImageScore]]) -> None:
    from models.platform.cuda import cuda_native_bf16, ieee_fp32_in_force

    if precision == "bf16" and not cuda_native_bf16():
        pytest.skip("this GPU has no native bf16")
    prepared, ref = reference
    scorer = load_scorer(ScorerSpec(model_dir=parity_artifact(), backend="torch", device="cuda", precision=precision,
                                    strategy="grouped"))
    assert (scorer.backend.device, scorer.backend.precision) == ("cuda", precision)
    assert ieee_fp32_in_force()
    got = scorer.score_batch(prepared)
    dp = np.abs([g.probability - r.probability for g, r in zip(got, ref, strict=True)])
    dmi = np.abs([g.mutual_information - r.mutual_information for g, r in zip(got, ref, strict=True)])
    flips = sum(g.outcome != r.outcome for g, r in zip(got, ref, strict=True))
    print(f"cuda {precision}: max|dp| {dp.max():.2e}, max|dMI| {dmi.max():.2e}, outcome flips {flips}/{len(ref)}")
    assert dp.max() < BOUNDS[precision]
    if precision == "fp32":
        assert flips == 0


def test_onnxruntime_on_cuda_runs_on_cuda_or_refuses(reference: tuple[list[PreparedImage], list[ImageScore]]
                                                     ) -> None:
    """The CUDA provider either activates and agrees with the CPU, or the scorer refuses to start: never a
    silent CPU run reported as cuda. A CPU-only or other-CUDA onnxruntime gives the refusal (skip)."""
    prepared, ref = reference
    scorer = ort_cuda_or_skip(lambda: load_scorer(ScorerSpec(
        model_dir=parity_artifact(), backend="onnxruntime", device="cuda", precision="fp32", strategy="grouped")))
    got = scorer.score_batch(prepared)
    dp = np.abs([g.probability - r.probability for g, r in zip(got, ref, strict=True)])
    assert dp.max() < BOUNDS["fp32"]
    assert all(g.outcome == r.outcome for g, r in zip(got, ref, strict=True))
