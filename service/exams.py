"""One screening exam (a patient visit) as the API, the batch job, FHIR and the page report it.

Plain Python (no FastAPI): the photographs of a visit, each tagged with its eye and its per-image outcome,
go through the one exam rule (:func:`models.decision.exam_decision`) and come back as the JSON-ready exam
fields every surface shares::

    fields = exam_fields([(Eye.RIGHT, ScreeningOutcome.NO_REFERABLE_DR),
                          (Eye.LEFT, ScreeningOutcome.REFER_REFERABLE_DR)])
    fields["outcome"]            # "refer_referable_dr"
    fields["eyes"]["left"]       # {"outcome": "refer_referable_dr", "outcome_reason": "...", "photographs": 1}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from models.decision import OUTCOME_TEXT, ExamDecision, Eye, ScreeningOutcome, exam_decision

MISSING_EYE_TEXT = "No photograph of this eye: the visit cannot be answered 'no referable DR' without it"


def decide(photographs: Iterable[tuple[Eye, ScreeningOutcome]]) -> ExamDecision:
    """The exam decision of (eye, per-image outcome) pairs, in any order."""
    by_eye: dict[Eye, list[ScreeningOutcome]] = {eye: [] for eye in Eye}
    for eye, outcome in photographs:
        by_eye[Eye(eye)].append(ScreeningOutcome(outcome))
    return exam_decision(by_eye)


def eye_fields(decision: ExamDecision, counts: Mapping[Eye, int]) -> dict[str, dict[str, Any]]:
    """``{"right": {...}, "left": {...}}``: each eye's outcome, its plain line and its number of photographs."""
    return {
        eye.value: {
            "outcome": decision.eyes[eye].value,
            "outcome_reason": MISSING_EYE_TEXT if eye in decision.missing else OUTCOME_TEXT[decision.eyes[eye]],
            "photographs": int(counts.get(eye, 0)),
        }
        for eye in Eye
    }


def exam_fields(photographs: Sequence[tuple[Eye, ScreeningOutcome]]) -> dict[str, Any]:
    """The exam's outcome, reason, per-eye outcomes and missing eyes, JSON-ready."""
    decision = decide(photographs)
    counts = {eye: sum(1 for e, _ in photographs if Eye(e) is eye) for eye in Eye}
    return {
        "outcome": decision.outcome.value,
        "outcome_reason": decision.reason,
        "eyes": eye_fields(decision, counts),
        "missing_eyes": [eye.value for eye in decision.missing],
    }
