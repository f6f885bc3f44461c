"""A visit's photographs scored into one :class:`~service.screening.exam.ExamResult`: the one exam assembly.

``POST /v1/exams`` and the PACS worker both call :func:`grade_exam` (the batch job scores its rows offline and
applies the same rule, :func:`service.screening.exam.exam_result`, to them). The steps, in this order, always:

1. the visit is admitted as a whole (``ModelHost.admit``, ``reserved`` for the PACS lane) before any photograph
   is read or decoded;
2. every photograph is prepared (read, decoded, quality gate: ``ModelHost.prepare_many``);
3. the caller's ``eyes_of`` names each photograph's eye from what the decoder returned, and applies the caller's
   identity rules (``service.screening.identity``): it raises to refuse the visit, before anything is scored;
4. the prepared photographs are scored in one batch submission;
5. the exam rule gives the typed result, which is counted once (``ServiceMetrics.observe_exam``).

A photograph the decoder refused is in the result as ``retake_ungradable`` with its refusal (the PACS path
answers it so); a caller that refuses the whole visit for one bad photograph (the HTTP route) raises in
``eyes_of``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from models.outcome.decision import OUTCOME_TEXT, Eye, ScreeningOutcome
from service.inference.imaging import ImageRejected
from service.inference.prepare import PreparedImage
from service.inference.scoring import Scorer
from service.model_host import ImageSource, ModelHost, Prediction
from service.screening.exam import ExamResult, exam_result
from service.screening.payload import score_payload

EyesOf = Callable[[Sequence[PreparedImage | ImageRejected]], Sequence[Eye]]


@dataclass(frozen=True)
class ScoredPhotograph:
    """One photograph of the visit: its place as sent, its eye, and its scores or the decoder's refusal."""

    index: int
    eye: Eye
    scored: Prediction | ImageRejected

    @property
    def outcome(self) -> ScreeningOutcome:
        if isinstance(self.scored, ImageRejected):
            return ScreeningOutcome.RETAKE_UNGRADABLE
        return self.scored.scored.score.outcome

    def answer(self, scorer: Scorer) -> dict[str, Any]:
        """The photograph's ``/v1/predict`` body (``service.screening.payload``), or a refused photograph's outcome, its
        reason and the refusal's problem type."""
        if isinstance(self.scored, ImageRejected):
            outcome = ScreeningOutcome.RETAKE_UNGRADABLE
            return {"outcome": outcome.value, "outcome_reason": f"{OUTCOME_TEXT[outcome]} ({self.scored.detail})",
                    "rejected": self.scored.problem_type}
        return score_payload(self.scored.scored.score, scorer)


@dataclass(frozen=True)
class GradedVisit:
    """The exam result, its photographs in the order sent, and the scorer that graded them."""

    result: ExamResult
    photographs: tuple[ScoredPhotograph, ...]
    scorer: Scorer


async def grade_exam(host: ModelHost, sources: Sequence[ImageSource], eyes_of: EyesOf, *,
                     reserved: bool = False) -> GradedVisit:
    """Admit, prepare, name the eyes (``eyes_of``, which may refuse the visit), score, apply the exam rule."""
    scorer = host.require_ready()
    with host.admit(len(sources), reserved=reserved):  # nothing of a photograph is read before this
        prepared = await host.prepare_many(sources)
        eyes = list(eyes_of(prepared))
        if len(eyes) != len(prepared):
            raise ValueError(f"eyes_of named {len(eyes)} eyes for {len(prepared)} photographs")
        scored = await host.score_prepared(prepared, reserved=reserved)
    photographs = tuple(ScoredPhotograph(index, eye, item)
                        for index, (eye, item) in enumerate(zip(eyes, scored, strict=True)))
    result = exam_result((photo.eye, photo.outcome) for photo in photographs)
    host.metrics.observe_exam(result.outcome, len(photographs))
    return GradedVisit(result, photographs, scorer)
