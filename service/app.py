"""The FastAPI application factory.

``create_app(settings)`` wires one independent app: its own settings, metrics registry and
model host (``service.model_host.ModelHost``) on ``app.state``; the lifespan starts loading the model in
the background (readiness turns true only after load, verification, materialisation of the draws and
warm-up) and stops the batcher on shutdown.

Run it with ``radscreen serve`` or ``uvicorn --factory service.app:create_app``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from service.api import dicomweb, exams, health, model, pages, predict
from service.api.docs import install_offline_docs
from service.api.pages import STATIC_DIR
from service.http.cors import ProblemCORSMiddleware
from service.http.errors import install_error_handlers
from service.http.middleware import RequestContextMiddleware
from service.metrics import ServiceMetrics
from service.model_host import ModelHost, ScorerFactory
from service.pacs.settings import PacsSettings
from service.pacs.store import Spool
from service.settings import Settings

logger = logging.getLogger(__name__)

DESCRIPTION = """Uncertainty-aware screening for referable diabetic retinopathy (EyePACS grade >= 2).

Every answer carries the model's identity (artifact sha256), its uncertainty (mutual information
over K fixed posterior draws of a Radial Bayesian VGG-16*), an image-quality verdict and whether
the image should be referred to an expert. Errors are RFC 9457 `application/problem+json`.

**Decision support only, not a diagnosis.** See `GET /v1/model` for the model card.
"""


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    host: ModelHost = app.state.model_host
    tasks = [asyncio.create_task(host.load(), name="radscreen-load")]
    spool: Spool | None = app.state.pacs_spool
    if spool is not None:  # DICOMweb on: grade what STOW-RS stores and deliver the SRs (service.pacs.worker)
        from service.pacs.worker import start_worker

        tasks.append(start_worker(spool, host, app.state.pacs_settings, app.state.metrics))  # before any request
    try:
        yield
    finally:
        await host.stop(tasks)


def create_app(settings: Settings | None = None, *, scorer_factory: ScorerFactory | None = None,
               pacs: PacsSettings | None = None) -> FastAPI:
    """Build the app. ``scorer_factory`` replaces ``load_scorer`` (tests, benchmarks): it gets
    ``settings.scorer_spec()`` and returns the scorer. ``pacs`` (default: ``RADSCREEN_PACS_*``) turns DICOMweb
    STOW-RS and the PACS worker on when its ``spool_dir`` is set."""
    settings = settings if settings is not None else Settings()
    logging.getLogger("service").setLevel(settings.log_level.upper())
    metrics = ServiceMetrics()
    app = FastAPI(
        title="Radial Screen",
        version="1.0.0",
        summary="Uncertainty-aware diabetic-retinopathy screening",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc come from install_offline_docs: packaged assets, no CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.model_host = ModelHost(settings, metrics, scorer_factory)
    app.state.pacs_settings = pacs = pacs if pacs is not None else PacsSettings()
    app.state.pacs_spool = Spool(pacs.spool_dir) if pacs.spool_dir is not None else None

    install_error_handlers(app)
    for router in (predict.router, exams.router, dicomweb.router, model.router, health.router, pages.router):
        app.include_router(router)
    install_offline_docs(app)
    app.mount("/static", StaticFiles(directory=STATIC_DIR, check_dir=False), name="static")
    if settings.cors_origins:
        app.add_middleware(
            ProblemCORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type", "X-API-Key", "X-Request-ID", "Accept"],
            expose_headers=["X-Request-ID", "Retry-After"],
            max_age=600,
        )
    app.add_middleware(RequestContextMiddleware, settings=settings, metrics=metrics)  # outermost
    return app
