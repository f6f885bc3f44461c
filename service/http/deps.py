"""FastAPI dependencies: the per-app settings, model host and metrics, and the API-key check.

Everything lives on ``app.state`` (set by ``create_app``), never in module globals, so several apps
with different settings can run in one process.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader

from service.http.errors import ServiceProblem
from service.metrics import ServiceMetrics
from service.model_host import ModelHost
from service.settings import Settings

_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="Required when configured.")


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_model_host(request: Request) -> ModelHost:
    host: ModelHost = request.app.state.model_host
    return host


def get_metrics(request: Request) -> ServiceMetrics:
    metrics: ServiceMetrics = request.app.state.metrics
    return metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
ModelHostDep = Annotated[ModelHost, Depends(get_model_host)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]


def require_api_key(settings: SettingsDep, key: Annotated[str | None, Depends(_api_key_header)]) -> None:
    """401 unless no key is configured or X-API-Key matches it (constant-time comparison)."""
    if settings.api_key is None:
        return
    expected = settings.api_key.get_secret_value().encode()
    if key is None or not secrets.compare_digest(key.encode(), expected):
        raise ServiceProblem(
            "unauthorized",
            401,
            "Missing X-API-Key header." if key is None else "The X-API-Key header does not match.",
            headers={"WWW-Authenticate": 'ApiKey header="X-API-Key"'},
        )


ApiKeyDep = Depends(require_api_key)
