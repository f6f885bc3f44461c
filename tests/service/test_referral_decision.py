"""The referral decision of ``Scorer.score_batch``: constructed draws in, exactly this answer out.

Every expected value below is a constant worked out by hand from the rules in docs/architecture.md §6
(never recomputed with the code under test): the draws are chosen probabilities, so p̄, the entropies
and the MI are known in closed form (H(p) = -p ln p - (1-p) ln(1-p), MI = H(p̄) - mean_s H(p_s)),
and the label, the refer-to-expert flag, its reasons and the screening outcome follow from the table.

The network is replaced by :class:`ChosenDraws`, a real ``Backend`` (same protocol as the torch and
ONNX Runtime backends) whose K draws answer chosen probabilities: that is the only way to put a given
p̄ and MI in front of the decision code. The network itself is tested in test_scoring.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from models.artifact import Calibration
from models.image.quality import QualityReport
from service.inference.loading import load_scorer
from service.inference.prepare import PreparedImage
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from service.screening.payload import score_payload

H_09 = 0.3250830  # H(0.9) = H(0.1) nats
H_06 = 0.6730117  # H(0.6) = H(0.4)
H_055 = 0.6881388  # H(0.55)
MI_SPLIT = 0.3479287  # 10 draws at 0.9 and 6 at 0.1 (or 6 and 10): H(0.6) - H(0.9)
MI_MILD = 0.0151271  # 12 draws at 0.6 and 4 at 0.4: H(0.55) - H(0.6)
TOL = 1e-6  # the draws pass through float32 logits, as a real backend's do

GOOD = QualityReport(gradable=True, score=0.9, issues=[])
BAD = QualityReport(gradable=False, score=0.1, issues=["too_dark"])
CAL = Calibration(referral_threshold_mi=0.1, decision_threshold=0.5, target_referral_rate=0.2, dataset="constructed")


class ChosenDraws:
    """A ``Backend`` whose K draws give chosen probabilities ``[K, B]`` whatever the pixels are."""

    name = "chosen-draws"
    device = "cpu"
    precision = "fp32"
    strategy = "fixed"

    def __init__(self, probabilities: np.ndarray) -> None:
        self.probabilities = np.asarray(probabilities, dtype=np.float64)  # [K, B]

    def run(self, x: np.ndarray) -> np.ndarray:
        """float32 [B, C, H, W] -> float32 logits [K, B, 1] of the chosen probabilities."""
        assert x.shape[0] == self.probabilities.shape[1], "one column of draws per image"
        p = self.probabilities
        return np.log(p / (1.0 - p)).astype(np.float32)[..., None]  # [K, B, 1]


def draws(*groups: tuple[int, float]) -> list[float]:
    """``draws((10, 0.9), (6, 0.1))``: 16 draw probabilities for one image."""
    return [p for count, p in groups for _ in range(count)]


def scorer_for(columns: list[list[float]], tiny: Scorer, calibration: Calibration = CAL) -> Scorer:
    """A Scorer over :class:`ChosenDraws` (one column of draws per image), the tiny artifact's identity."""
    return Scorer(backend=ChosenDraws(np.array(columns).T), pipeline=tiny.pipeline,
                  model_identity=tiny.model_identity, calibration=calibration)


def image(quality: QualityReport) -> PreparedImage:
    return PreparedImage(np.zeros((3, 8, 8), np.float32), quality, 1.0)  # pixels unused by ChosenDraws


@pytest.fixture(scope="module")
def tiny(tiny_artifact: Path) -> Scorer:
    return load_scorer(ScorerSpec(model_dir=tiny_artifact, backend="torch", device="cpu"))


# (draws, quality) -> p̄, MI, label, refer_to_expert, reasons, outcome; MI threshold 0.1, decision threshold 0.5.
# An ungradable image is labelled not_graded whatever its probability.
CASES = {
    "confident, referable": (draws((16, 0.9)), GOOD, 0.9, 0.0, "referable", False, [], "refer_referable_dr"),
    "confident, not referable": (draws((16, 0.1)), GOOD, 0.1, 0.0, "non_referable", False, [], "no_referable_dr"),
    "uncertain, p̄ above the decision threshold": (
        draws((10, 0.9), (6, 0.1)), GOOD, 0.6, MI_SPLIT, "referable", True, ["uncertain"], "grader_review_uncertain"),
    "uncertain, p̄ below the decision threshold": (
        draws((6, 0.9), (10, 0.1)), GOOD, 0.4, MI_SPLIT, "non_referable", True, ["uncertain"],
        "grader_review_uncertain"),
    "disagreeing draws, MI below the threshold": (
        draws((12, 0.6), (4, 0.4)), GOOD, 0.55, MI_MILD, "referable", False, [], "refer_referable_dr"),
    "ungradable, confident high p̄": (
        draws((16, 0.9)), BAD, 0.9, 0.0, "not_graded", True, ["image_quality"], "retake_ungradable"),
    "ungradable, confident low p̄": (  # never "non_referable": nothing was graded
        draws((16, 0.1)), BAD, 0.1, 0.0, "not_graded", True, ["image_quality"], "retake_ungradable"),
    "ungradable and uncertain": (
        draws((10, 0.9), (6, 0.1)), BAD, 0.6, MI_SPLIT, "not_graded", True, ["uncertain", "image_quality"],
        "retake_ungradable"),
}


def test_each_constructed_case_gets_exactly_its_decision(tiny: Scorer) -> None:
    """All eight cases in ONE batch: each row answers for its own column of draws."""
    scorer = scorer_for([case[0] for case in CASES.values()], tiny)
    scores = scorer.score_batch([image(case[1]) for case in CASES.values()])
    for (name, (_, quality, p, mi, label, refer, reasons, outcome)), got in zip(CASES.items(), scores, strict=True):
        assert got.probability == pytest.approx(p, abs=TOL), name
        assert got.mutual_information == pytest.approx(mi, abs=TOL), name
        assert (got.label, got.refer_to_expert, got.referral_reasons, got.outcome.value) == (
            label, refer, reasons, outcome), name
        assert got.quality is quality, name


def test_entropies_are_the_closed_form_values(tiny: Scorer) -> None:
    split, mild = scorer_for([draws((10, 0.9), (6, 0.1)), draws((12, 0.6), (4, 0.4))], tiny).score_batch(
        [image(GOOD), image(GOOD)])
    assert split.predictive_entropy == pytest.approx(H_06, abs=TOL)  # H(p̄ = 0.6)
    assert split.expected_entropy == pytest.approx(H_09, abs=TOL)  # every draw has H = H(0.9)
    assert mild.predictive_entropy == pytest.approx(H_055, abs=TOL)
    assert mild.expected_entropy == pytest.approx(H_06, abs=TOL)
    both_extremes = scorer_for([draws((8, 1e-6), (8, 1 - 1e-6))], tiny).score_batch([image(GOOD)])[0]
    assert both_extremes.mutual_information == pytest.approx(math.log(2), abs=1e-4)  # the largest MI there is


def _one(columns: list[float], tiny: Scorer, *, mi: float, decision: float) -> tuple[str, bool, str]:
    cal = Calibration(referral_threshold_mi=mi, decision_threshold=decision, target_referral_rate=0.2,
                      dataset="constructed")
    [got] = scorer_for([columns], tiny, cal).score_batch([image(GOOD)])
    return got.label, got.refer_to_expert, got.outcome.value


def test_values_exactly_at_the_thresholds(tiny: Scorer) -> None:
    """p̄ equal to the decision threshold is referable; MI equal to the MI threshold is not uncertain.

    The thresholds are set to the very floats the decision compares (the scorer's own p̄ and MI for these
    draws, ~0.55 and ~0.0151 nat), and one float step to either side.
    """
    mild = draws((12, 0.6), (4, 0.4))
    [ref] = scorer_for([mild], tiny).score_batch([image(GOOD)])
    p, mi = ref.probability, ref.mutual_information
    assert p == pytest.approx(0.55, abs=TOL) and mi == pytest.approx(MI_MILD, abs=TOL)
    above, below = np.nextafter(p, 1.0), np.nextafter(p, 0.0)
    assert _one(mild, tiny, mi=0.1, decision=p) == ("referable", False, "refer_referable_dr")
    assert _one(mild, tiny, mi=0.1, decision=below) == ("referable", False, "refer_referable_dr")
    assert _one(mild, tiny, mi=0.1, decision=above) == ("non_referable", False, "no_referable_dr")
    assert _one(mild, tiny, mi=mi, decision=0.5) == ("referable", False, "refer_referable_dr")
    assert _one(mild, tiny, mi=np.nextafter(mi, 1.0), decision=0.5) == ("referable", False, "refer_referable_dr")
    assert _one(mild, tiny, mi=np.nextafter(mi, 0.0), decision=0.5) == ("referable", True, "grader_review_uncertain")
    # both boundaries at once: confident (MI at its threshold) and referable (p̄ at its threshold)
    assert _one(mild, tiny, mi=mi, decision=p) == ("referable", False, "refer_referable_dr")


def test_payload_of_a_constructed_uncertain_image(tiny: Scorer) -> None:
    scorer = scorer_for([draws((6, 0.9), (10, 0.1))], tiny)
    [score] = scorer.score_batch([image(GOOD)])
    body = score_payload(score, scorer)
    assert body["diagnosis"]["label"] == "non_referable" and body["diagnosis"]["decision_threshold"] == 0.5
    assert body["diagnosis"]["referable_dr_probability"] == pytest.approx(0.4, abs=TOL)
    assert body["uncertainty"]["mutual_information"] == pytest.approx(MI_SPLIT, abs=TOL)
    assert body["uncertainty"]["referral_threshold_mi"] == 0.1 and body["uncertainty"]["unit"] == "nat"
    assert body["refer_to_expert"] is True and body["referral_reasons"] == ["uncertain"]
    assert body["outcome"] == "grader_review_uncertain"
    assert body["outcome_reason"] == (
        "Human grader review: the model is uncertain about this image. Probability 40.0 % — the model's uncertain "
        "estimate, not a finding (a grader decides); uncertainty high: 0.348 nat, above the grader-review threshold "
        "of 0.1 nat.")
    assert body["words"]["uncertainty"].startswith("high: ") and "likely" not in body["outcome_reason"]
    assert body["quality"] == {"gradable": True, "score": 0.9, "issues": [], "details": []}
