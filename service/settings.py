"""Configuration, read from ``RADSCREEN_*`` environment variables (or a ``.env`` file).

``ScorerSettings`` holds what decides how images are scored (artifact, backend, device, precision,
strategy, K draws, threads, input limits): the fields of :class:`~service.inference.spec.ScorerSpec`,
with the defaults, bounds and descriptions written there, turned back into the spec by ``scorer_spec()``.
``Settings`` adds the HTTP service's knobs. The service builds ``Settings`` once in the app factory
(``create_app(settings)``) and hands it to request handlers through a FastAPI dependency
(``service.http.deps.SettingsDep``); the batch job builds
``ScorerSettings`` with its command-line flags over the same variables (service/batch/cli.py), so
``RADSCREEN_BACKEND=torch`` means the same to both. Nothing reads the environment at import time.

Example::

    RADSCREEN_BACKEND=onnxruntime RADSCREEN_MC_SAMPLES=16 RADSCREEN_API_KEY=s3cret radscreen serve
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.inference.spec import (
    BackendSetting,
    DeviceSetting,
    NativeBf16Setting,
    PrecisionSetting,
    ScorerSpec,
    StrategySetting,
    knobs,
)

LogLevel = Literal["debug", "info", "warning", "error"]


def default_model_dir() -> Path:
    """The embedded default artifact shipped inside ``models/`` (imported lazily: no import-time work)."""
    from models.artifact import DEFAULT_ARTIFACT_DIR

    return Path(DEFAULT_ARTIFACT_DIR)


def spec_setting(name: str, **overrides: Any) -> Any:
    """The pydantic field of ``ScorerSpec.<name>``: its default, bounds and description, as the spec states them."""
    [spec] = [k for k in knobs() if k.name == name]
    kwargs: dict[str, Any] = {} if "default_factory" in overrides else {"default": spec.default}
    kwargs.update({key: value for key, value in (("ge", spec.knob.ge), ("le", spec.knob.le)) if value is not None})
    return Field(**kwargs, description=spec.knob.doc, **overrides)


class ScorerSettings(BaseSettings):
    """How images are scored, shared by the service and the batch job; each field maps to ``RADSCREEN_<FIELD>``.

    The fields are :class:`ScorerSpec`'s, with its defaults, bounds and descriptions (``spec_setting``);
    tests/service/test_scorer_spec.py checks that the two name the same fields with the same types.
    """

    model_config = SettingsConfigDict(
        env_prefix="RADSCREEN_", env_file=".env", extra="ignore", protected_namespaces=()
    )

    # the embedded artifact's folder when unset (``scorer_spec`` then passes None: each process finds its own)
    model_dir: Path = spec_setting("model_dir", default_factory=default_model_dir)
    backend: BackendSetting = spec_setting("backend")
    device: DeviceSetting = spec_setting("device")
    precision: PrecisionSetting = spec_setting("precision")
    native_bf16: NativeBf16Setting = spec_setting("native_bf16")
    strategy: StrategySetting = spec_setting("strategy")
    mc_samples: int | None = spec_setting("mc_samples")
    threads: int | None = spec_setting("threads")
    max_pixels: int = spec_setting("max_pixels")
    max_upload_bytes: int = spec_setting("max_upload_bytes")
    decode_timeout_s: float = spec_setting("decode_timeout_s")

    def scorer_spec(self) -> ScorerSpec:
        """The :class:`ScorerSpec` these settings describe.

        ``model_dir`` stays ``None`` unless it was set (``RADSCREEN_MODEL_DIR``, ``.env`` or a keyword): the
        spec then means "the embedded default artifact", which each process (a Ray worker included) finds
        in its own installation.
        """
        values = {f.name: getattr(self, f.name) for f in fields(ScorerSpec)}
        values["model_dir"] = self.model_dir if "model_dir" in self.model_fields_set else None
        return ScorerSpec(**values)


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
    decode_workers: int | None = Field(
        default=None, ge=1, le=64,
        description="Threads decoding and preprocessing images (Pillow and numpy release the GIL). Default: one "
                    "per core (up to 16) when scoring on a GPU, which the CPU must feed; 2 on the CPU, where the "
                    "model's threads need the cores.",
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
