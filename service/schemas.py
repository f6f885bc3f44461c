"""Pydantic models of the HTTP responses (docs/architecture.md §6), with OpenAPI examples."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EXAMPLE_MODEL: dict[str, Any] = {
    "name": "radial-vgg16-star",
    "version": "1.0.0",
    "sha256": "9f2c4e1d0b7a63f5e8c1d2b3a4f5e6d7c8b9a0f1e2d3c4b5a6978877665544aa",
    "mc_samples": 16,
    "training_data": "synthetic",
    "intended_use": "Research demonstration of uncertainty-aware referral; not for clinical use.",
}
EXAMPLE_PREDICTION: dict[str, Any] = {
    "request_id": "5f0c2a9e8b7d4c6a9e1f2b3c4d5e6f70",
    "study_id": "study-0042",
    "model": EXAMPLE_MODEL,
    "diagnosis": {"referable_dr_probability": 0.83, "label": "referable", "decision_threshold": 0.5},
    "uncertainty": {
        "mutual_information": 0.11,
        "predictive_entropy": 0.46,
        "expected_entropy": 0.35,
        "unit": "nat",
        "referral_threshold": 0.09,
    },
    "quality": {"gradable": True, "score": 0.92, "issues": []},
    "refer_to_expert": True,
    "referral_reasons": ["uncertain"],
    "timing_ms": {"decode": 4.1, "queue": 0.8, "inference": 31.0},
    "disclaimer": "Decision support only, not a diagnosis. ...",
}
EXAMPLE_PROBLEM: dict[str, Any] = {
    "type": "https://radscreen.dev/problems/undecodable-image",
    "title": "Image cannot be decoded",
    "status": 400,
    "detail": "The PNG data is truncated or corrupt and cannot be decoded.",
    "instance": "urn:radscreen:request:5f0c2a9e8b7d4c6a9e1f2b3c4d5e6f70",
    "request_id": "5f0c2a9e8b7d4c6a9e1f2b3c4d5e6f70",
}

ReferralReason = Literal["uncertain", "image_quality"]
QualityIssue = Literal["no_field_of_view", "too_dark", "overexposed", "obstructed", "blurred", "not_fundus"]


class ModelIdentity(BaseModel):
    model_config = ConfigDict(protected_namespaces=())
    name: str
    version: str
    sha256: str = Field(description="sha256 of the artifact's manifest.json: the model's identity.")
    mc_samples: int = Field(description="Fixed posterior draws K averaged per image.")
    training_data: str = Field(description="'synthetic' or 'real: <description>'.")
    intended_use: str


class Diagnosis(BaseModel):
    referable_dr_probability: float = Field(ge=0, le=1, description="Mean over the K draws of P(grade >= 2).")
    label: Literal["referable", "non_referable"]
    decision_threshold: float


class Uncertainty(BaseModel):
    mutual_information: float = Field(ge=0, description="Epistemic uncertainty, nats, in [0, ln 2].")
    predictive_entropy: float = Field(ge=0)
    expected_entropy: float = Field(ge=0)
    unit: Literal["nat"] = "nat"
    referral_threshold: float = Field(description="Refer when mutual_information exceeds this.")


class Quality(BaseModel):
    gradable: bool
    score: float = Field(ge=0, le=1, description="Worst quality check; gradable <=> score >= 0.5.")
    issues: list[QualityIssue]


class Timing(BaseModel):
    decode: float = Field(description="Decode, validation, quality gate and preprocessing, ms.")
    queue: float = Field(description="Wait in the micro-batch queue, ms.")
    inference: float = Field(description="The batched K-draw forward this image was part of, ms.")


class ImageResult(BaseModel):
    """The answer for one image, without the request id."""

    model_config = ConfigDict(protected_namespaces=())
    study_id: str | None = None
    model: ModelIdentity
    diagnosis: Diagnosis
    uncertainty: Uncertainty
    quality: Quality
    refer_to_expert: bool = Field(description="The model defers this image to a human.")
    referral_reasons: list[ReferralReason]
    timing_ms: Timing
    disclaimer: str


class PredictionResponse(ImageResult):
    model_config = ConfigDict(protected_namespaces=(), json_schema_extra={"examples": [EXAMPLE_PREDICTION]})
    request_id: str


class Problem(BaseModel):
    """RFC 9457 problem details."""

    model_config = ConfigDict(json_schema_extra={"examples": [EXAMPLE_PROBLEM]})
    type: str
    title: str
    status: int
    detail: str
    instance: str
    request_id: str
    errors: list[dict[str, Any]] | None = None


class BatchItem(BaseModel):
    index: int = Field(description="Position of the image part in the request.")
    filename: str | None = None
    result: ImageResult | None = None
    problem: Problem | None = Field(
        default=None, description="Set instead of result when this image was refused."
    )


class BatchResponse(BaseModel):
    request_id: str
    count: int
    items: list[BatchItem]


class Calibration(BaseModel):
    referral_threshold_mi: float
    decision_threshold: float
    target_referral_rate: float
    dataset: str
    validation: dict[str, Any]


class Preprocessing(BaseModel):
    input_size: int
    mean: list[float]
    std: list[float]
    max_upload_bytes: int
    max_pixels: int


class Runtime(BaseModel):
    backend: str
    device: str
    precision: str
    max_batch_size: int
    max_wait_ms: float


class ModelResponse(BaseModel):
    model_config = ConfigDict(protected_namespaces=())
    model: ModelIdentity
    calibration: Calibration
    preprocessing: Preprocessing
    runtime: Runtime
    model_card: str = Field(description="MODEL_CARD.md of the artifact (markdown).")
    disclaimer: str


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready", "loading", "failed"]
    detail: str | None = None


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries documenting problem+json errors for the given statuses."""
    descriptions = {
        400: "Undecodable or too small image",
        401: "Missing or invalid X-API-Key",
        406: "FHIR output requested but unavailable",
        413: "Body, image bytes or pixel count above the limit",
        415: "Not an accepted image type, or a multi-frame image",
        422: "Invalid or missing fields",
        503: "Overloaded or model not ready (Retry-After)",
    }
    return {
        s: {
            "description": descriptions.get(s, "Error"),
            "model": Problem,
            "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for s in statuses
    }
