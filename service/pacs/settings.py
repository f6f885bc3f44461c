"""The PACS knobs, read from ``RADSCREEN_PACS_*`` environment variables (table in docs/integration.md, "PACS").

Shared by the HTTP service (STOW-RS at ``/dicomweb/studies``, on when ``RADSCREEN_PACS_SPOOL_DIR`` is set) and the
C-STORE receiver (``radscreen dicom-listen``). Several processes may share a spool: all receive into it, one at a
time grades and delivers (``Spool.try_lock``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_AE_TITLE = r"^[\x21-\x5B\x5D-\x7E](?:[\x20-\x5B\x5D-\x7E]{0,14}[\x21-\x5B\x5D-\x7E])?$"  # 1-16, no backslash


class PacsSettings(BaseSettings):
    """Receiving, grading and delivering DICOM (see the module docstring)."""

    model_config = SettingsConfigDict(env_prefix="RADSCREEN_PACS_", env_file=".env", extra="ignore")

    spool_dir: Path | None = Field(
        default=None,
        description="Folder of received instances and results: required by dicom-listen, and turns STOW-RS on in "
                    "serve.")
    ae_title: str = Field(default="RADSCREEN", pattern=_AE_TITLE, description="Our AE title (receiver and sender).")
    listen_host: str = Field(default="127.0.0.1", description="C-STORE receiver: bind address.")
    listen_port: int = Field(default=11112, ge=1, le=65535, description="C-STORE receiver: port.")
    allowed_calling_aets: list[str] = Field(
        default_factory=list, description='JSON list of calling AE titles accepted (empty: any), e.g. ["ORTHANC"].')
    max_associations: int = Field(default=4, ge=1, le=64, description="C-STORE receiver: associations at once.")
    max_associations_per_ae: int = Field(
        default=2, ge=1, le=64,
        description="C-STORE receiver: associations at once from one calling AE title (spaces around it stripped); "
                    "at most max_associations (a larger value is refused at start).")
    acse_timeout_s: float = Field(default=30.0, gt=0, le=3600, description="Association negotiation timeout.")
    dimse_timeout_s: float = Field(default=30.0, gt=0, le=3600, description="Timeout of one DIMSE message.")
    network_timeout_s: float = Field(default=60.0, gt=0, le=3600, description="Idle association timeout.")
    stow_max_parts: int = Field(
        default=32, ge=1, le=1024,
        description="STOW-RS: most parts (instances) in one request; a body with more is refused 413 as the first "
        "extra part begins, and nothing of it is stored. 32 = four full visits at the default "
        "RADSCREEN_MAX_EXAM_IMAGES (8): room for a visit's photographs and the other instances of its study "
        "(refused one by one), while it bounds a request's parsing, its answer (one item per part) and, with "
        "RADSCREEN_MAX_UPLOAD_BYTES per part, what it spools.")
    settle_s: float = Field(
        default=2.0, ge=0, le=3600, description="Both eyes received: grade once no instance came for this long.")
    quiet_s: float = Field(
        default=120.0, gt=0, le=86_400, description="One eye only: grade once no instance came for this long.")
    poll_s: float = Field(default=0.5, gt=0, le=60, description="How often the spool is looked at.")
    retention_s: float = Field(
        default=86_400.0, ge=0, le=30 * 86_400,
        description="A graded and delivered (or refused, or quarantined) study's instances are deleted this long "
                    "after its last instance.")
    archive_url: str | None = Field(
        default=None, description="STOW-RS base URL of the archive (results are POSTed to <url>/studies).")
    archive_host: str | None = Field(default=None, description="C-STORE archive: host (when no archive_url).")
    archive_port: int = Field(default=104, ge=1, le=65535, description="C-STORE archive: port.")
    archive_ae_title: str = Field(default="ORTHANC", pattern=_AE_TITLE, description="C-STORE archive: AE title.")
    archive_timeout_s: float = Field(
        default=30.0, gt=0, le=3600,
        description="Deadline of one whole delivery (connect, send, answer); past it the delivery counts as failed.")
    retry_base_s: float = Field(default=2.0, gt=0, le=3600, description="First retry delay; doubles per failure.")
    retry_max_s: float = Field(default=300.0, gt=0, le=86_400, description="Longest delay between two retries.")
    min_free_mb: int = Field(
        default=256, ge=0, le=1_048_576,
        description="Grading pauses while the spool's file system has less free space than this (MiB).")
    metrics_port: int | None = Field(
        default=None, ge=1, le=65535, description="dicom-listen: serve Prometheus metrics on this port.")

    @field_validator("allowed_calling_aets", mode="after")
    @classmethod
    def _strip(cls, value: list[str]) -> list[str]:
        return [v.strip() for v in value if v.strip()]

    @model_validator(mode="after")
    def _per_ae_within_total(self) -> PacsSettings:
        if self.max_associations_per_ae > self.max_associations:
            raise ValueError(f"max_associations_per_ae ({self.max_associations_per_ae}) exceeds max_associations "
                             f"({self.max_associations}): set RADSCREEN_PACS_MAX_ASSOCIATIONS_PER_AE at most "
                             "RADSCREEN_PACS_MAX_ASSOCIATIONS")
        return self
