"""Liveness, readiness and Prometheus metrics (open even when an API key is configured)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from service.http.deps import MetricsDep, ModelHostDep
from service.http.schemas import Health, Readiness
from service.metrics import CONTENT_TYPE_LATEST

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="The process is alive")
async def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="The model is loaded, verified and warm",
    responses={503: {"model": Readiness, "description": "Still loading, or failed to load"}},
)
async def readyz(host: ModelHostDep) -> JSONResponse:
    if host.state == "ready":
        return JSONResponse(Readiness(status="ready").model_dump())
    detail = host.error if host.state == "failed" else "loading and warming up the model"
    return JSONResponse(
        Readiness(status=host.state, detail=detail).model_dump(),
        status_code=503,
        headers={"Retry-After": "2"},
    )


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
async def metrics(metrics: MetricsDep) -> Response:
    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
