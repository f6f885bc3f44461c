"""The shared inference path: backends agree, batching does not change answers, outcome precedence.

The referral decision of ``Scorer.score_batch`` on constructed draws is in test_referral_decision.py.

Measured on the tiny test artifact (64 px, width 4, rho_init -2.5 so the draws differ visibly).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.artifact import Calibration, load_artifact
from models.image.quality import QualityReport
from models.image.quality_rules import Finding
from models.nn.sampling import seeded
from models.nn.vgg import mc_logits
from models.outcome.decision import OUTCOME_TEXT, ScreeningOutcome, screening_outcome
from models.platform.cpu import detect_cpu
from service.http.schemas import ImageResult, ModelIdentity
from service.inference.loading import load_scorer
from service.inference.prepare import PreparedImage, prepare_image
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from service.screening.payload import score_payload
from support.images import encode, fundus_like

FP32_TOL = 1e-4  # probability and MI, torch vs onnxruntime vs the reference K-pass loop
BF16_TOL_P, BF16_TOL_MI = 0.02, 0.005  # bf16 autocast vs fp32 on this model (measured: see docs)


@pytest.fixture(scope="module")
def scorer(tiny_artifact: Path) -> Scorer:
    return load_scorer(ScorerSpec(model_dir=tiny_artifact, backend="torch", device="cpu"))


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
    with seeded(model, art.config.serving.draw_seed), torch.no_grad():
        ref = torch.sigmoid(mc_logits(model, x, art.config.serving.mc_samples)[..., 0].double())  # [K, B]
    p_ref = ref.mean(0).numpy()
    got = _pm(scorer.score_batch(images))
    np.testing.assert_allclose(got[:, 0], p_ref, atol=FP32_TOL)


def test_head_draws_artifact_serves_its_k_times_m_posterior_samples(tmp_path: Path, images: list) -> None:
    """An artifact with head draws: both backends score the K·M samples of materialise_draws, and say so."""
    from models.nn.draws import materialise_draws
    from models.nn.uncertainty import binary_uncertainty_from_logits
    from support.artifacts import build_tiny_artifact

    path = build_tiny_artifact(tmp_path / "heads", head_draws=8)
    art = load_artifact(path)
    x = torch.from_numpy(np.stack([im.pixels for im in images]))
    with torch.no_grad():
        seed = art.config.serving.draw_seed
        eight = materialise_draws(art.build_model(), mc_samples=16, seed=seed, head_draws=8)
        ref = binary_uncertainty_from_logits(eight(x))
    plain = binary_uncertainty_from_logits(materialise_draws(art.build_model(), mc_samples=16, seed=seed)(x))
    for backend in ("torch", "onnxruntime"):
        scorer = load_scorer(ScorerSpec(model_dir=path, backend=backend, device="cpu"))
        got = _pm(scorer.score_batch(images))
        np.testing.assert_allclose(got[:, 0], ref.probability.numpy(), atol=FP32_TOL)
        np.testing.assert_allclose(got[:, 1], ref.mutual_information.numpy(), rtol=1e-3, atol=1e-7)
        assert scorer.model_identity.head_draws == 8 and scorer.model_identity.mc_samples == 16
    assert not np.allclose(ref.mutual_information.numpy(), plain.mutual_information.numpy(), rtol=1e-3)


def test_onnxruntime_agrees_with_torch(tiny_artifact: Path, scorer: Scorer, images: list) -> None:
    pytest.importorskip("onnxruntime")
    onnx_scorer = load_scorer(ScorerSpec(model_dir=tiny_artifact, backend="onnxruntime", device="cpu"))
    a, b = _pm(scorer.score_batch(images)), _pm(onnx_scorer.score_batch(images))
    np.testing.assert_allclose(a, b, atol=FP32_TOL)
    assert onnx_scorer.model_identity == scorer.model_identity


def test_bf16_stays_within_the_stated_tolerance(tiny_artifact: Path, scorer: Scorer, images: list) -> None:
    # the numerics of bf16, not its speed: allowed here even on a CPU without native bf16
    bf16 = load_scorer(ScorerSpec(model_dir=tiny_artifact, backend="torch", device="cpu", precision="bf16"),
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


CAL = Calibration(referral_threshold_mi=1e-6, decision_threshold=0.5, target_referral_rate=0.2, dataset="constructed")


@pytest.mark.parametrize(
    ("gradable", "mi", "p", "expected"),
    [
        # ungradable wins over everything, even a confident 99 % or a very uncertain image
        (False, 0.0, 0.99, "retake_ungradable"),
        (False, 0.3, 0.01, "retake_ungradable"),
        # gradable and uncertain: a human grader reviews it, whatever the probability says
        (True, 2e-6, 0.99, "grader_review_uncertain"),
        (True, 2e-6, 0.01, "grader_review_uncertain"),
        # MI exactly at the threshold is not above it: the probability decides
        (True, 1e-6, 0.99, "refer_referable_dr"),
        (True, 1e-6, 0.4999, "no_referable_dr"),
        # confident: the probability threshold decides; p == threshold is referable
        (True, 5e-7, 0.5, "refer_referable_dr"),
        (True, 0.0, 0.4999, "no_referable_dr"),
        (True, 9.99e-7, 0.01, "no_referable_dr"),
    ],
)
def test_screening_outcome_precedence(gradable: bool, mi: float, p: float, expected: str) -> None:
    got = screening_outcome(gradable=gradable, mutual_information=mi, probability=p,
                            referral_threshold_mi=CAL.referral_threshold_mi,
                            decision_threshold=CAL.decision_threshold)
    assert got == ScreeningOutcome(expected) and got.value == expected


def test_outcome_text_names_the_action_and_only_one_outcome_says_no_referable() -> None:
    assert OUTCOME_TEXT[ScreeningOutcome.REFER_REFERABLE_DR].startswith("Refer to an eye-care professional")
    assert OUTCOME_TEXT[ScreeningOutcome.GRADER_REVIEW_UNCERTAIN].startswith("Human grader review")
    assert OUTCOME_TEXT[ScreeningOutcome.RETAKE_UNGRADABLE].startswith("Retake the photograph")
    assert [o for o, text in OUTCOME_TEXT.items() if "No referable" in text] == [ScreeningOutcome.NO_REFERABLE_DR]


def test_payload_fields(scorer: Scorer, images: list) -> None:
    """An ungradable image is scored by the network like any other, but its outcome is a retake."""
    bad = QualityReport(gradable=False, score=0.2, issues=["blurred"],
                        findings=[Finding("blurred", "sharpness", 1.21, 1.45, ">=")])
    good, poor = scorer.score_batch([images[0], PreparedImage(images[0].pixels, bad, 1.0)])
    assert poor.probability == pytest.approx(good.probability)  # the same pixels, the same network answer
    assert poor.refer_to_expert is True and "image_quality" in poor.referral_reasons
    assert 0.0 <= poor.mutual_information <= poor.predictive_entropy <= np.log(2) + 1e-12
    assert poor.predictive_entropy == pytest.approx(poor.expected_entropy + poor.mutual_information)
    body = score_payload(poor, scorer)
    # the image's part of the documented response; the API adds the per-request fields
    assert set(body) == set(ImageResult.model_fields) - {"study_id", "timing_ms"}
    assert body["outcome"] == "retake_ungradable"
    assert body["outcome_reason"] == "Retake the photograph: the image cannot be graded — blurred or out of focus."
    assert body["words"]["retake_reason"] == "blurred or out of focus" and body["words"]["probability"].startswith(
        "not graded")
    assert body["model"]["sha256"] == scorer.model_identity.sha256 and body["model"]["mc_samples"] == 16
    # the typed identity serialises to the documented JSON object, keys in the documented order
    assert list(body["model"]) == list(ModelIdentity.model_fields)
    assert body["uncertainty"]["unit"] == "nat"
    assert body["quality"] == {"gradable": False, "score": 0.2, "issues": ["blurred"], "details": [
        {"issue": "blurred", "measure": "sharpness", "value": 1.21, "threshold": 1.45, "relation": ">=",
         "message": "blurred: sharpness 1.21, needs >= 1.45"}]}  # why, in the answer
    assert "not a diagnosis" in body["disclaimer"] and "synthetic" in body["disclaimer"]
