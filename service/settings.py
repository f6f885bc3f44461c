"""Service configuration, read from ``RADSCREEN_*`` environment variables (or a ``.env`` file).

The settings object is built once by the app factory (``create_app(settings)``) and handed to
request handlers through a FastAPI dependency (``service.deps.SettingsDep``); nothing reads the
environment at import time.

Example::

    RADSCREEN_BACKEND=onnxruntime RADSCREEN_MC_SAMPLES=16 RADSCREEN_API_KEY=s3cret radscreen serve
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

Backend = Literal["auto", "torch", "onnxruntime"]
Device = Literal["auto", "cpu", "cuda"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]
LogLevel = Literal["debug", "info", "warning", "error"]


def default_model_dir() -> Path:
    """The embedded default artifact shipped inside ``models/`` (imported lazily: no import-time work)."""
    from models.artifact import DEFAULT_ARTIFACT_DIR

    return Path(DEFAULT_ARTIFACT_DIR)


class Settings(BaseSettings):
    """Every knob of the inference service; each field maps to ``RADSCREEN_<FIELD>``."""

    model_config = SettingsConfigDict(
        env_prefix="RADSCREEN_", env_file=".env", extra="ignore", protected_namespaces=()
    )

    model_dir: Path = Field(
        default_factory=default_model_dir,
        description="Artifact directory (weights.safetensors, config.json, calibration.json, manifest.json).",
    )
    backend: Backend = Field(
        default="auto",
        description="Inference backend for the fixed posterior draws. 'auto' = ONNX Runtime's per-draw graph "
        "for fp32 on CPU (the fastest measured CPU path), torch for bf16/fp16 and on GPU.",
    )
    device: Device = Field(default="auto", description="'auto' = cuda when available, else cpu.")
    precision: Precision = Field(
        default="auto",
        description="Autocast precision of the torch backend. 'auto' = bf16 only when the artifact's measured "
        "bf16 drift flips no decision AND the CPU/GPU runs bf16 natively, else fp32 (service/inference/platform.py). "
        "An explicit bf16/fp16 on a CPU without native support fails at start.",
    )
    native_bf16: Literal["detect", "yes", "no"] = Field(
        default="detect",
        description="Override the CPU's native-bf16 detection (/proc/cpuinfo avx512_bf16/amx_bf16/bf16) "
        "where it is wrong; 'detect' trusts the CPU.",
    )
    strategy: Literal["auto", "grouped", "loop"] = Field(
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
        le=256,
        description="Fixed posterior draws K per image; default: the artifact's (16).",
    )
    max_batch_size: int = Field(
        default=8, ge=1, le=512, description="Micro-batcher: images per forward pass."
    )
    max_wait_ms: float = Field(
        default=5.0, ge=0, le=10_000, description="Micro-batcher: longest wait to fill a batch."
    )
    queue_size: int = Field(
        default=64, ge=1, description="Images allowed to wait; beyond it requests get 503."
    )
    max_upload_bytes: int = Field(
        default=20 * 1024 * 1024, ge=1024, description="Largest image file accepted."
    )
    max_pixels: int = Field(
        default=40_000_000, ge=1, description="Largest width*height accepted (checked pre-decode)."
    )
    max_batch_items: int = Field(
        default=16, ge=1, le=256, description="Most images in one /v1/predict/batch call."
    )
    upload_idle_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, description="Longest silence between two chunks of a request body (else 408)."
    )
    upload_timeout_s: float = Field(
        default=300.0, gt=0, le=86_400, description="Longest time to receive a whole request body (else 408)."
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
