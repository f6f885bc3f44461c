"""The ``/v1/predict`` JSON answer of one scored image (``service.schemas.ImageResult`` is its schema).

API layer: the inference core (``service.inference``) returns typed scores and never shapes JSON; the HTTP
routes, the batch rows and the doc generators all build the body here, so every surface shows the same
fields. Fields added per request (``request_id``, ``study_id``, ``timing_ms``) are added by the caller.

Example::

    [score] = scorer.score_batch([prepare_image(data, scorer.pipeline)])
    body = score_payload(score, scorer)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from models.decision import OUTCOME_TEXT

if TYPE_CHECKING:
    from service.inference.scoring import ImageScore, Scorer


def score_payload(score: ImageScore, scorer: Scorer) -> dict[str, Any]:
    """The /v1/predict response body for one image (docs/architecture.md §6), minus request_id, study_id, timing_ms."""
    cal = scorer.calibration
    return {
        "model": scorer.model_identity.to_dict(),
        "diagnosis": {
            "referable_dr_probability": score.probability,
            "label": score.label,
            "decision_threshold": cal.decision_threshold,
        },
        "uncertainty": {
            "mutual_information": score.mutual_information,
            "predictive_entropy": score.predictive_entropy,
            "expected_entropy": score.expected_entropy,
            "unit": "nat",
            "referral_threshold": cal.referral_threshold_mi,
        },
        "quality": {
            "gradable": score.quality.gradable,
            "score": score.quality.score,
            "issues": list(score.quality.issues),
        },
        "refer_to_expert": score.refer_to_expert,
        "referral_reasons": list(score.referral_reasons),
        "outcome": score.outcome.value,
        "outcome_reason": OUTCOME_TEXT[score.outcome],
        "disclaimer": scorer.disclaimer,
    }
