"""Pydantic models of the HTTP responses (docs/architecture.md §6), with OpenAPI examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# The OpenAPI example is a real response of the embedded default model, written by
# scripts/gen_doc_examples.py (and kept in sync with it by tests/service/test_doc_examples.py).
EXAMPLE_FILE = Path(__file__).with_name("openapi_example.json")


def _load_example() -> dict[str, Any]:
    """The generated example response; empty if the file is missing (a broken install, not fatal)."""
    try:
        return dict(json.loads(EXAMPLE_FILE.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


EXAMPLE_PREDICTION: dict[str, Any] = _load_example()
EXAMPLE_PROBLEM: dict[str, Any] = {
    "type": "https://radscreen.dev/problems/undecodable-image",
    "title": "Image cannot be decoded",
    "status": 400,
    "detail": "The PNG data is truncated or corrupt and cannot be decoded.",
    "instance": "urn:radscreen:request:5f0c2a9e8b7d4c6a9e1f2b3c4d5e6f70",
    "request_id": "5f0c2a9e8b7d4c6a9e1f2b3c4d5e6f70",
}

ReferralReason = Literal["uncertain", "image_quality"]
Outcome = Literal["retake_ungradable", "grader_review_uncertain", "refer_referable_dr", "no_referable_dr"]
QualityIssue = Literal[
    "no_field_of_view", "too_dark", "overexposed", "obstructed", "blurred", "not_fundus", "compression_artifacts"
]


class ModelIdentity(BaseModel):
    model_config = ConfigDict(protected_namespaces=())
    name: str
    version: str
    sha256: str = Field(description="sha256 of the artifact's manifest.json: the model's identity.")
    mc_samples: int = Field(description="Fixed posterior draws K averaged per image (forward passes).")
    head_draws: int = Field(
        default=1,
        description=(
            "Draws of the final linear layer per network draw: the probability and uncertainty average "
            "mc_samples x head_draws complete posterior samples (the extra head draws steady the MI estimate)."
        ),
    )
    test_time_flip: bool = Field(
        default=False,
        description=(
            "The model's serving option, named in its card: true = each image is also scored mirrored "
            "left-right and the probability and mutual information are taken over both orientations' draws "
            "(2 x mc_samples x head_draws predictions)."
        ),
    )
    passes: int = Field(
        default=0,
        description="Forward passes of the network per image: mc_samples x the views (2 with test_time_flip). "
                    "The design's budget is 16; the model card says how this model spends it.")
    pass_budget: int = Field(
        default=16, description="The most forward passes per image this artifact may serve (16 unless its card "
                                "states a larger, explicit budget).")
    training_data: str = Field(description="'synthetic' or 'real: <description>'.")
    intended_use: str


class Diagnosis(BaseModel):
    referable_dr_probability: float = Field(
        ge=0,
        le=1,
        description=(
            "Mean over the K draws of P(grade >= 2). Not a finding when quality.gradable is false "
            "(outcome retake_ungradable): returned for audit only, never to be shown as a result."
        ),
    )
    label: Literal["referable", "non_referable", "not_graded"] = Field(
        description=(
            "referable / non_referable: the probability at or above / below decision_threshold; not_graded when "
            "the image is ungradable (outcome retake_ungradable): no label either way."
        )
    )
    decision_threshold: float


class Uncertainty(BaseModel):
    mutual_information: float = Field(ge=0, description="Epistemic uncertainty, nats, in [0, ln 2].")
    predictive_entropy: float = Field(ge=0)
    expected_entropy: float = Field(ge=0)
    unit: Literal["nat"] = "nat"
    referral_threshold_mi: float = Field(
        description="The calibrated MI threshold (nats): a human grader reviews the image when "
        "mutual_information exceeds it. ln 2 (0.693), the largest possible value, means the model defers no "
        "image for uncertainty: on its validation eyes deferring by MI was no measured benefit (model card).")


class QualityFinding(BaseModel):
    """Why the gate refused a photograph: one measure that missed its threshold (docs/quality-gate.md)."""

    issue: QualityIssue
    measure: str = Field(description="The gate's measure, e.g. sharpness, mean_luma, fov_visible_arc.")
    value: float = Field(description="Its value on this photograph.")
    threshold: float
    relation: Literal[">=", "<="] = Field(
        description="What a gradable photograph satisfies: value <relation> threshold.")
    message: str = Field(description="The same in one line, e.g. 'blurred: sharpness 1.21, needs >= 1.45'.")


class Quality(BaseModel):
    gradable: bool
    score: float = Field(ge=0, le=1, description="Worst quality check; gradable <=> score >= 0.5.")
    issues: list[QualityIssue]
    details: list[QualityFinding] = Field(
        default_factory=list,
        description="For each issue, the measure(s) that missed the threshold, with value and threshold; "
        "empty when gradable.",
    )


class Timing(BaseModel):
    decode: float = Field(description="Decode, validation, quality gate and preprocessing, ms.")
    queue: float = Field(description="Wait in the micro-batch queue, ms.")
    inference: float = Field(description="The batched K-draw forward this image was part of, ms.")


class ResultWordsModel(BaseModel):
    """One photograph's result in words (models/outcome/wording.py), the same on every surface."""

    outcome: str = Field(description="What to do, with a retake's reason, e.g. 'Retake the photograph: … — too dark'.")
    probability: str = Field(description="e.g. '8.1 % — above the referral threshold of 5.6 %'; 'not graded' when "
                             "ungradable; an uncertain photograph's is an estimate, not a finding.")
    uncertainty: str = Field(description="'low: …' or 'high: …', the mutual information beside the grader-review "
                             "threshold.")
    retake_reason: str = Field(default="", description="Why a retake: the failed quality checks in words ('' "
                               "unless the outcome is retake_ungradable).")


class ImageResult(BaseModel):
    """The answer for one image, without the request id."""

    model_config = ConfigDict(protected_namespaces=())
    study_id: str | None = None
    model: ModelIdentity
    diagnosis: Diagnosis
    uncertainty: Uncertainty
    quality: Quality
    refer_to_expert: bool = Field(
        description=(
            "The model defers this image to a human (uncertain and/or ungradable). NOT the patient's "
            "referral decision: false does not mean 'no referral'; read `outcome`."
        )
    )
    referral_reasons: list[ReferralReason]
    outcome: Outcome = Field(
        description=(
            "The screening outcome a clinic acts on, with fixed precedence: retake_ungradable (image not "
            "gradable) > grader_review_uncertain (MI above the calibrated threshold) > refer_referable_dr / "
            "no_referable_dr (probability at/above or below the decision threshold)."
        )
    )
    outcome_reason: str = Field(
        description="The outcome in one plain-language line, with the probability beside the referral threshold "
        "and the uncertainty beside the grader-review threshold (models/outcome/wording.py).")
    words: ResultWordsModel | None = Field(
        default=None, description="The same in parts, as the page shows them (absent in answers from before it).")
    timing_ms: Timing
    disclaimer: str


class PredictionResponse(ImageResult):
    model_config = ConfigDict(
        protected_namespaces=(), json_schema_extra={"examples": [EXAMPLE_PREDICTION] if EXAMPLE_PREDICTION else []}
    )
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


EyeName = Literal["right", "left"]


class ExamEye(BaseModel):
    outcome: Outcome = Field(
        description="This eye's outcome from its photographs (models.outcome.decision.eye_outcome).")
    outcome_reason: str
    photographs: int = Field(ge=0, description="Photographs of this eye in the exam (0: the eye is missing).")


class ExamImage(BaseModel):
    index: int = Field(description="Position of the photograph's part in the request.")
    eye: EyeName
    filename: str | None = None
    format: Literal["dicom", "image"] = Field(description="'dicom' for a DICOM file, else 'image' (JPEG, PNG, ...).")
    result: ImageResult = Field(description="The same result POST /v1/predict gives for this photograph alone.")


class ExamResponse(BaseModel):
    """One patient visit: one outcome for the patient, each eye's outcome, each photograph's result."""

    model_config = ConfigDict(protected_namespaces=())
    request_id: str
    exam_id: str | None = Field(default=None, description="Opaque id echoed back (never logged).")
    patient_ref: str | None = Field(default=None, description="Opaque reference echoed back (never logged).")
    model: ModelIdentity
    outcome: Outcome = Field(
        description=(
            "The patient's outcome (models.outcome.decision.exam_decision): refer_referable_dr if any gradable "
            "photograph is referable and certain; else grader_review_uncertain if any photograph is uncertain; "
            "else retake_ungradable if an eye has no gradable photograph or is missing; else no_referable_dr."
        )
    )
    outcome_reason: str = Field(description="The patient's outcome in one plain-language line, naming the eyes.")
    eyes: dict[EyeName, ExamEye]
    missing_eyes: list[EyeName]
    images: list[ExamImage]
    disclaimer: str


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


class CpuInfo(BaseModel):
    """The CPU as detected at start (service/inference/platform.py); decides whether bf16 is native."""

    model_name: str
    isa: str = Field(description="torch's kernel dispatch level (AVX2, AVX512, ...).")
    flags: list[str] = Field(description="Precision-relevant /proc/cpuinfo flags present.")
    native_bf16: bool
    native_fp16: bool
    source: str = Field(description="'detected', or the RADSCREEN_NATIVE_BF16 override.")
    native_int8: bool = Field(default=False, description="Fast int8 dot products (AVX2, VNNI, AMX, NEON dot).")


class GuardBandInfo(BaseModel):
    """Where a reduced precision's answers are re-scored in fp32: within these distances of the thresholds."""

    probability: float = Field(description="Half-width around the decision threshold (p̄).")
    mutual_information: float = Field(description="Half-width around the MI referral threshold (nats).")
    share_rescored: float = Field(description="Share of the measured real photographs inside the band.")


class Runtime(BaseModel):
    backend: str = Field(description="The backend actually running (torch, onnxruntime).")
    backend_requested: str = Field(default="", description="RADSCREEN_BACKEND as configured (auto, ...).")
    backend_reason: str = Field(default="", description="Why this backend was chosen.")
    device: str
    precision: str = Field(description="The precision actually running (fp32, bf16, fp16, int8).")
    precision_requested: str = Field(default="", description="RADSCREEN_PRECISION as configured (auto, ...).")
    precision_reason: str = Field(default="", description="Why this precision was chosen.")
    strategy: str = Field(default="", description="How the K draws run: loop (per draw) or grouped.")
    threads: int | None = Field(default=None, description="Intra-op threads (null: the library default).")
    cpu: CpuInfo | None = None
    guard_band: GuardBandInfo | None = Field(
        default=None, description="Set when a reduced precision serves with fp32 re-scoring near the thresholds "
        "(the artifact's measured band); null when the precision serves as it is.")
    max_batch_size: int
    max_wait_ms: float


class ModelResponse(BaseModel):
    model_config = ConfigDict(protected_namespaces=())
    model: ModelIdentity
    training_summary: str = Field(
        default="", description="model.training_data in one line: its kind and each source with its eye count.")
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
