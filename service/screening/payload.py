"""The ``/v1/predict`` JSON answer of one scored image (``service.http.schemas.ImageResult`` is its schema).

API layer: the inference core (``service.inference``) returns typed scores and never shapes JSON; the HTTP
routes, the batch rows and the doc generators all build the body here, so every surface shows the same
fields. ``outcome_reason`` and ``words`` are ``models.outcome.wording.result_words`` of the answer's numbers: the pages
show these words, and :func:`words_of` words a body sent back (FHIR) the same way. Fields added per request
(``request_id``, ``study_id``, ``timing_ms``) are added by the caller.

The public field names are a contract. The calibrated MI threshold has one name everywhere: the artifact's
``referral_threshold_mi`` is the answer's ``uncertainty.referral_threshold_mi`` (and ``/v1/model``'s, the
batch summary's and the Python code's). :func:`score_payload` writes it and :func:`checked_outcome` (a body
sent back to be rendered, e.g. as FHIR) reads it.

Example::

    [score] = scorer.score_batch([prepare_image(data, scorer.pipeline)])
    body = score_payload(score, scorer)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from models.outcome.decision import ScreeningOutcome, diagnosis_label, screening_outcome
from models.outcome.wording import ResultWords, result_words

if TYPE_CHECKING:  # the FHIR rendering imports this module without loading the inference core
    from service.inference.scoring import ImageScore, Scorer

MI_THRESHOLD_FIELD = "referral_threshold_mi"  # uncertainty.<this>: the artifact's field name, one name everywhere


def score_payload(score: ImageScore, scorer: Scorer) -> dict[str, Any]:
    """The /v1/predict response body for one image (docs/architecture.md §6), minus request_id, study_id, timing_ms."""
    cal = scorer.calibration
    words = result_words(outcome=score.outcome, probability=score.probability,
                         decision_threshold=cal.decision_threshold, mutual_information=score.mutual_information,
                         referral_threshold_mi=cal.referral_threshold_mi, quality_issues=list(score.quality.issues))
    return {
        "model": scorer.model_identity.to_dict(),
        "diagnosis": {
            "referable_dr_probability": score.probability,
            "label": score.label.value,
            "decision_threshold": cal.decision_threshold,
        },
        "uncertainty": {
            "mutual_information": score.mutual_information,
            "predictive_entropy": score.predictive_entropy,
            "expected_entropy": score.expected_entropy,
            "unit": "nat",
            MI_THRESHOLD_FIELD: cal.referral_threshold_mi,
        },
        "quality": {
            "gradable": score.quality.gradable,
            "score": score.quality.score,
            "issues": list(score.quality.issues),
            "details": score.quality.details,
        },
        "refer_to_expert": score.refer_to_expert,
        "referral_reasons": list(score.referral_reasons),
        "outcome": score.outcome.value,
        "outcome_reason": words.reason,
        "words": words.to_dict(),
        "disclaimer": scorer.disclaimer,
    }


def words_of(body: dict[str, Any], outcome: ScreeningOutcome) -> ResultWords:
    """The words of an answer (``models.outcome.wording``), from its own numbers and the outcome they give (a body from
    outside is worded from what :func:`checked_outcome` verified, never from its own text)."""
    diagnosis, unc, quality = (require_field(body, key) for key in ("diagnosis", "uncertainty", "quality"))
    return result_words(outcome=outcome, probability=float(diagnosis["referable_dr_probability"]),
                        decision_threshold=float(diagnosis["decision_threshold"]),
                        mutual_information=float(unc["mutual_information"]),
                        referral_threshold_mi=float(unc[MI_THRESHOLD_FIELD]),
                        quality_issues=[str(i) for i in quality.get("issues", [])])


def require_field(body: dict[str, Any], key: str) -> Any:
    """Fetch a required field of an answer, or say which one is missing."""
    if key not in body:
        raise ValueError(f"prediction response lacks '{key}'; expected the /v1/predict JSON (docs/architecture.md §6)")
    return body[key]


def checked_outcome(body: dict[str, Any]) -> ScreeningOutcome:
    """The screening outcome an answer states, once checked against the numbers it states it from.

    For a body that comes back from outside (``POST /v1/fhir``, ``POST /v1/exams`` renderings, an offline
    FHIR conversion): the outcome is re-derived from the body's own gradable flag, MI, probability and
    thresholds with :func:`models.outcome.decision.screening_outcome`; a body whose stated outcome disagrees
    (edited or corrupted JSON) raises ``ValueError`` rather than being rendered into a clinical document, and
    so does a graded image whose label is not its probability's (an ungradable image's label is never
    rendered: answers from before the ``not_graded`` label still render).
    An answer scored in this process needs no check: pass its ``ImageScore.outcome``.
    """
    diagnosis, unc, quality = (require_field(body, key) for key in ("diagnosis", "uncertainty", "quality"))
    derived = screening_outcome(
        gradable=bool(quality["gradable"]),
        mutual_information=float(unc["mutual_information"]),
        probability=float(diagnosis["referable_dr_probability"]),
        referral_threshold_mi=float(unc[MI_THRESHOLD_FIELD]),
        decision_threshold=float(diagnosis["decision_threshold"]),
    )
    stated = require_field(body, "outcome")
    if stated != derived.value:
        raise ValueError(
            f"outcome {stated!r} contradicts the response's own fields, which give {derived.value!r}"
        )
    if derived is not ScreeningOutcome.RETAKE_UNGRADABLE:
        label = diagnosis_label(derived, probability=float(diagnosis["referable_dr_probability"]),
                                decision_threshold=float(diagnosis["decision_threshold"]))
        if diagnosis.get("label") != label.value:
            raise ValueError(f"label {diagnosis.get('label')!r} contradicts the response's own fields, which give "
                             f"{label.value!r}")
    return derived
