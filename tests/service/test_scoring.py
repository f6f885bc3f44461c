"""The shared inference path: backends agree, batching does not change answers, referral logic.

Measured on the tiny test artifact (64 px, width 4, rho_init -2.5 so the draws differ visibly).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.artifact import load_artifact
from models.sampling import seeded
from models.vgg import mc_logits
from service.platform import detect_cpu
from service.scoring import PreparedImage, QualityReport, Scorer, prepare_image, score_payload
from tests.service.conftest import encode, fundus_like

FP32_TOL = 1e-4  # probability and MI, torch vs onnxruntime vs the reference K-pass loop
BF16_TOL_P, BF16_TOL_MI = 0.02, 0.005  # bf16 autocast vs fp32 on this model (measured: see docs)


@pytest.fixture(scope="module")
def scorer(tiny_artifact: Path) -> Scorer:
    return Scorer.from_artifact(tiny_artifact, backend="torch", device="cpu")


@pytest.fixture(scope="module")
def images(scorer: Scorer) -> list[PreparedImage]:
    return [prepare_image(encode(fundus_like(seed)), scorer.pipeline) for seed in range(6)]


def _pm(scores: list) -> np.ndarray:
    return np.array([[s.probability, s.mutual_information] for s in scores])


def test_matches_the_reference_k_pass_loop(tiny_artifact: Path, scorer: Scorer, images: list) -> None:
    """Scorer == mc_logits(model, x, K) under seeded(model, draw_seed): the serving form is exact."""
    art = load_artifact(tiny_artifact)
    model = art.build_model()
    x = torch.from_numpy(np.stack([im.pixels for im in images]))
    with seeded(model, art.config.draw_seed), torch.no_grad():
        ref = torch.sigmoid(mc_logits(model, x, art.config.mc_samples)[..., 0].double())  # [K, B]
    p_ref = ref.mean(0).numpy()
    got = _pm(scorer.score_batch(images))
    np.testing.assert_allclose(got[:, 0], p_ref, atol=FP32_TOL)


def test_onnxruntime_agrees_with_torch(tiny_artifact: Path, scorer: Scorer, images: list) -> None:
    pytest.importorskip("onnxruntime")
    onnx_scorer = Scorer.from_artifact(tiny_artifact, backend="onnxruntime", device="cpu")
    a, b = _pm(scorer.score_batch(images)), _pm(onnx_scorer.score_batch(images))
    np.testing.assert_allclose(a, b, atol=FP32_TOL)
    assert onnx_scorer.model_identity == scorer.model_identity


def test_bf16_stays_within_the_stated_tolerance(tiny_artifact: Path, scorer: Scorer, images: list) -> None:
    # the numerics of bf16, not its speed: allowed here even on a CPU without native bf16
    bf16 = Scorer.from_artifact(tiny_artifact, backend="torch", device="cpu", precision="bf16",
                                cpu=detect_cpu(override="yes"))
    a, b = _pm(scorer.score_batch(images)), _pm(bf16.score_batch(images))
    assert np.abs(a[:, 0] - b[:, 0]).max() <= BF16_TOL_P
    assert np.abs(a[:, 1] - b[:, 1]).max() <= BF16_TOL_MI
    assert not np.array_equal(a, b)  # it really ran in reduced precision


def test_batching_does_not_change_answers(scorer: Scorer, images: list) -> None:
    together = _pm(scorer.score_batch(images))
    alone = np.concatenate([_pm(scorer.score_batch([im])) for im in images])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    assert len({round(p, 6) for p in together[:, 0]}) == len(images)  # distinct images, distinct answers


def test_referral_logic_and_payload(scorer: Scorer, images: list) -> None:
    cal = scorer.calibration
    bad = QualityReport(gradable=False, score=0.2, issues=["blurred"])
    ungradable = PreparedImage(images[0].pixels, bad, 1.0)
    good, poor = scorer.score_batch([images[0], ungradable])
    assert good.probability == pytest.approx(poor.probability)  # the net sees the same pixels
    assert "image_quality" in poor.referral_reasons and poor.refer_to_expert
    assert ("uncertain" in good.referral_reasons) == (good.mutual_information > cal.referral_threshold_mi)
    assert 0.0 <= good.mutual_information <= good.predictive_entropy <= np.log(2) + 1e-12
    assert good.predictive_entropy == pytest.approx(good.expected_entropy + good.mutual_information)
    body = score_payload(poor, scorer)
    assert set(body) == {
        "model",
        "diagnosis",
        "uncertainty",
        "quality",
        "refer_to_expert",
        "referral_reasons",
        "disclaimer",
    }
    assert body["model"]["sha256"] == scorer.model_identity["sha256"] and body["model"]["mc_samples"] == 16
    assert body["uncertainty"]["unit"] == "nat"
    assert body["diagnosis"]["label"] == ("referable" if poor.probability >= 0.5 else "non_referable")
    assert body["quality"] == {"gradable": False, "score": 0.2, "issues": ["blurred"]}
    assert "not a diagnosis" in body["disclaimer"] and "synthetic" in body["disclaimer"]
