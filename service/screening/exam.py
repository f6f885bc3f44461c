"""One screening exam (a patient visit) as one typed value: :class:`ExamResult`.

Plain Python (no FastAPI, no model): each photograph of a visit comes in tagged with its eye and its per-image
outcome, goes through the one exam rule (:func:`models.outcome.decision.exam_decision`), and comes out as an
:class:`ExamResult` of per-eye :class:`EyeResult` s holding :class:`~models.outcome.decision.ScreeningOutcome` s. Every
surface renders that value and none re-derives it: the JSON answer of ``POST /v1/exams`` and the PACS exam record
(:meth:`ExamResult.to_fields`), FHIR (``service.interop.fhir_exam``), the DICOM SR (``service.pacs.sr``) and the batch
job's exam CSV (``service.batch.exams``). :meth:`ExamResult.from_fields` reads the JSON back into the same value::

    exam = exam_result([(Eye.RIGHT, ScreeningOutcome.NO_REFERABLE_DR),
                        (Eye.LEFT, ScreeningOutcome.REFER_REFERABLE_DR)])
    exam.outcome                      # ScreeningOutcome.REFER_REFERABLE_DR
    exam.eyes[Eye.LEFT].photographs   # 1
    exam.to_fields()["eyes"]["left"]  # {"outcome": "refer_referable_dr", "outcome_reason": "...", "photographs": 1}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from models.outcome.decision import OUTCOME_TEXT, Eye, ScreeningOutcome, exam_decision

MISSING_EYE_TEXT = "No photograph of this eye: the visit cannot be answered 'no referable DR' without it"


@dataclass(frozen=True)
class EyeResult:
    """One eye of a visit: its outcome (``retake_ungradable`` when it has no photograph) and its photographs."""

    eye: Eye
    outcome: ScreeningOutcome
    photographs: int

    @property
    def missing(self) -> bool:
        return self.photographs == 0

    @property
    def reason(self) -> str:
        """The eye's plain line: its outcome's, or that the visit lacks a photograph of it."""
        return MISSING_EYE_TEXT if self.missing else OUTCOME_TEXT[self.outcome]

    def to_fields(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "outcome_reason": self.reason, "photographs": self.photographs}


@dataclass(frozen=True)
class ExamResult:
    """A visit's outcome and reason and both eyes' results (always both: a missing eye is stated)."""

    outcome: ScreeningOutcome
    reason: str
    eyes: Mapping[Eye, EyeResult]

    @property
    def missing(self) -> tuple[Eye, ...]:
        return tuple(eye for eye in Eye if self.eyes[eye].missing)

    @property
    def photographs(self) -> int:
        return sum(result.photographs for result in self.eyes.values())

    def to_fields(self) -> dict[str, Any]:
        """The exam fields of the JSON answer: ``outcome``, ``outcome_reason``, ``eyes``, ``missing_eyes``."""
        return {
            "outcome": self.outcome.value,
            "outcome_reason": self.reason,
            "eyes": {eye.value: self.eyes[eye].to_fields() for eye in Eye},
            "missing_eyes": [eye.value for eye in self.missing],
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> ExamResult:
        """The value of :meth:`to_fields` (an answer read back); ``ValueError`` names a field it lacks."""
        try:
            eyes = {eye: EyeResult(eye, ScreeningOutcome(fields["eyes"][eye.value]["outcome"]),
                                   int(fields["eyes"][eye.value]["photographs"])) for eye in Eye}
            return cls(ScreeningOutcome(fields["outcome"]), str(fields["outcome_reason"]), eyes)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"exam fields lack {exc}; expected the /v1/exams JSON") from None


def exam_result(photographs: Iterable[tuple[Eye, ScreeningOutcome]]) -> ExamResult:
    """The exam rule over (eye, per-photograph outcome) pairs, in any order."""
    by_eye: dict[Eye, list[ScreeningOutcome]] = {eye: [] for eye in Eye}
    for eye, outcome in photographs:
        by_eye[Eye(eye)].append(ScreeningOutcome(outcome))
    decision = exam_decision(by_eye)
    eyes = {eye: EyeResult(eye, decision.eyes[eye], len(by_eye[eye])) for eye in Eye}
    return ExamResult(decision.outcome, decision.reason, eyes)
