"""GET /v1/model: identity, a one-line training summary, calibration, preprocessing, runtime and the model card;
GET /v1/model/card: the model card alone (markdown), the page's "Model card" link."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from models.outcome.wording import training_summary
from service.http.deps import ApiKeyDep, ModelHostDep, SettingsDep
from service.http.schemas import ModelResponse, problem_responses

# how the machine shaped the run (service.inference.platform): chosen backend/precision/strategy, why, and the CPU
RUNTIME_KEYS = ("backend_requested", "backend_reason", "precision_requested", "precision_reason", "strategy",
                "threads", "cpu", "guard_band")

router = APIRouter(tags=["model"], dependencies=[ApiKeyDep])


@router.get(
    "/v1/model",
    response_model=ModelResponse,
    summary="The loaded model: identity, card, calibration",
    responses=problem_responses(401, 503),
)
async def model_info(host: ModelHostDep, settings: SettingsDep) -> ModelResponse:
    scorer = host.require_ready()
    cal, pipe = scorer.calibration, scorer.pipeline
    return ModelResponse.model_validate(
        {
            "model": scorer.model_identity.to_dict(),
            "training_summary": training_summary(scorer.model_identity.training_data),
            "calibration": {
                "referral_threshold_mi": cal.referral_threshold_mi,
                "decision_threshold": cal.decision_threshold,
                "target_referral_rate": cal.target_referral_rate,
                "dataset": cal.dataset,
                "validation": cal.validation,
            },
            "preprocessing": {
                "input_size": pipe.size,
                "mean": list(pipe.mean),
                "std": list(pipe.std),
                "max_upload_bytes": pipe.max_bytes,
                "max_pixels": pipe.max_pixels,
            },
            "runtime": {
                "backend": scorer.backend.name,
                "device": scorer.backend.device,
                **{k: scorer.runtime[k] for k in RUNTIME_KEYS if k in scorer.runtime},
                "precision": scorer.precision,
                "max_batch_size": settings.max_batch_size,
                "max_wait_ms": settings.max_wait_ms,
            },
            "model_card": scorer.model_card,
            "disclaimer": scorer.disclaimer,
        }
    )


@router.get(
    "/v1/model/card",
    response_class=PlainTextResponse,
    summary="The loaded model's card (MODEL_CARD.md, markdown)",
    responses=problem_responses(401, 503),
)
async def model_card(host: ModelHostDep) -> PlainTextResponse:
    return PlainTextResponse(host.require_ready().model_card, media_type="text/markdown; charset=utf-8")
