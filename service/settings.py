"""Configuration, read from ``RADSCREEN_*`` environment variables (or a ``.env`` file).

``ScorerSettings`` holds what decides how images are scored (artifact, backend, device, precision,
strategy, K draws, threads, input limits) and turns it into the one
:class:`~service.inference.spec.ScorerSpec` (``scorer_spec()``). ``Settings`` adds the HTTP service's
knobs. The service builds ``Settings`` once in the app factory (``create_app(settings)``) and hands it to
request handlers through a FastAPI dependency (``service.deps.SettingsDep``); the batch job builds
``ScorerSettings`` with its command-line flags over the same variables (service/batch/cli.py), so
``RADSCREEN_BACKEND=torch`` means the same to both. Nothing reads the environment at import time.

Example::

    RADSCREEN_BACKEND=onnxruntime RADSCREEN_MC_SAMPLES=16 RADSCREEN_API_KEY=s3cret radscreen serve
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.inference.spec import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_PIXELS,
    MAX_MC_SAMPLES,
    BackendSetting,
    DeviceSetting,
    NativeBf16Setting,
    PrecisionSetting,
    ScorerSpec,
    StrategySetting,
)

LogLevel = Literal["debug", "info", "warning", "error"]


def default_model_dir() -> Path:
    """The embedded default artifact shipped inside ``models/`` (imported lazily: no import-time work)."""
    from models.artifact import DEFAULT_ARTIFACT_DIR

    return Path(DEFAULT_ARTIFACT_DIR)


class ScorerSettings(BaseSettings):
    """How images are scored, shared by the service and the batch job; each field maps to ``RADSCREEN_<FIELD>``."""

    model_config = SettingsConfigDict(
        env_prefix="RADSCREEN_", env_file=".env", extra="ignore", protected_namespaces=()
    )

    model_dir: Path = Field(
        default_factory=default_model_dir,
        description="Artifact directory (weights.safetensors, config.json, calibration.json, manifest.json).",
    )
    backend: BackendSetting = Field(
        default="auto",
        description="Inference backend for the fixed posterior draws. 'auto' = ONNX Runtime's per-draw graph "
        "for fp32 on CPU (the fastest measured CPU path), torch for bf16/fp16 and on GPU.",
    )
    device: DeviceSetting = Field(default="auto", description="'auto' = cuda when available, else cpu.")
    precision: PrecisionSetting = Field(
        default="auto",
        description="Arithmetic of the K draws: fp32, bf16/fp16 (torch autocast) or int8 (ONNX Runtime, CPU). "
        "'auto' = the fastest of int8, bf16 that this CPU runs natively AND whose drift measured on real "
        "photographs the artifact permits (with fp32 re-scoring near the thresholds where its record says so), "
        "else fp32 (service/inference/platform.py). An explicit precision the CPU only emulates fails at start.",
    )
    native_bf16: NativeBf16Setting = Field(
        default="detect",
        description="Override the CPU's native-bf16 detection (/proc/cpuinfo avx512_bf16/amx_bf16/bf16) "
        "where it is wrong; 'detect' trusts the CPU.",
    )
    strategy: StrategySetting = Field(
        default="auto",
        description="How the backend runs the K draws: one grouped network or a per-draw loop. "
        "'auto' = loop on CPU, grouped on CUDA (measured in benchmarks/bench_core.py).",
    )
    threads: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Intra-op threads of torch / ONNX Runtime; default: the library's (all cores).",
    )
    mc_samples: int | None = Field(
        default=None,
        ge=1,
        le=MAX_MC_SAMPLES,
        description="Fixed posterior draws K per image; default: the artifact's (16).",
    )
    max_upload_bytes: int = Field(
        default=DEFAULT_MAX_BYTES, ge=1024, description="Largest image file accepted."
    )
    max_pixels: int = Field(
        default=DEFAULT_MAX_PIXELS, ge=1, description="Largest width*height accepted (checked pre-decode)."
    )

    def scorer_spec(self) -> ScorerSpec:
        """The :class:`ScorerSpec` these settings describe.

        ``model_dir`` stays ``None`` unless it was set (``RADSCREEN_MODEL_DIR``, ``.env`` or a keyword): the
        spec then means "the embedded default artifact", which each process (a Ray worker included) finds
        in its own installation.
        """
        return ScorerSpec(
            model_dir=self.model_dir if "model_dir" in self.model_fields_set else None,
            backend=self.backend,
            device=self.device,
            precision=self.precision,
            native_bf16=self.native_bf16,
            strategy=self.strategy,
            mc_samples=self.mc_samples,
            threads=self.threads,
            max_pixels=self.max_pixels,
            max_bytes=self.max_upload_bytes,
        )


class Settings(ScorerSettings):
    """Every knob of the inference service: the scoring settings plus the HTTP service's own."""

    max_batch_size: int = Field(
        default=8, ge=1, le=512, description="Micro-batcher: images per forward pass."
    )
    max_wait_ms: float = Field(
        default=5.0, ge=0, le=10_000, description="Micro-batcher: longest wait to fill a batch."
    )
    queue_size: int = Field(
        default=64, ge=1, description="Images allowed to wait; beyond it requests get 503."
    )
    max_queue_wait_s: float = Field(
        default=10.0, gt=0, le=3600,
        description="Admission: a request whose expected wait (images ahead x measured seconds per image) is "
        "longer is refused with 503 + Retry-After before decoding.",
    )
    max_batch_items: int = Field(
        default=16, ge=1, le=256, description="Most images in one /v1/predict/batch call."
    )
    max_exam_images: int = Field(
        default=8, ge=2, le=64, description="Most photographs (both eyes together) in one /v1/exams call."
    )
    upload_idle_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, description="Longest silence between two chunks of a request body (else 408)."
    )
    upload_timeout_s: float = Field(
        default=300.0, gt=0, le=86_400, description="Longest time to receive a whole request body (else 408)."
    )
    header_timeout_s: float = Field(
        default=10.0, gt=0, le=3600,
        description="Longest time to receive a request's headers (else 408 and the connection is closed).",
    )
    decode_timeout_s: float = Field(
        default=10.0, gt=0, le=600,
        description="Longest time one image may take to decode once a worker starts it (else 422 image-too-complex).",
    )
    decode_workers: int = Field(
        default=2, ge=1, le=64, description="Threads decoding and preprocessing images."
    )
    api_key: SecretStr | None = Field(
        default=None, description="When set, X-API-Key must match (health/metrics open)."
    )
    cors_origins: list[str] = Field(
        default_factory=list, description='JSON list, e.g. ["https://dash.example"].'
    )
    log_level: LogLevel = Field(default="info", description="Python logging level of the service loggers.")

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_log_level(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("api_key", mode="after")
    @classmethod
    def _empty_key_is_none(cls, value: SecretStr | None) -> SecretStr | None:
        return None if value is not None and not value.get_secret_value() else value
