"""GET /docs and /redoc served with no CDN: the interactive API docs work in an air-gapped clinic.

FastAPI's default pages load Swagger UI and ReDoc from jsdelivr (and ReDoc its fonts from Google),
so behind a clinic firewall they render blank. The same assets ship in the ``fastapi-offline``
package (Swagger UI bundle + CSS, ReDoc standalone, a favicon); ``install_offline_docs`` mounts them
under ``/docs-assets`` and serves both pages through FastAPI's own HTML builders pointed there.
The app must be built with ``docs_url=None, redoc_url=None`` so that these routes are the only ones.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
ASSETS_URL = "/docs-assets"  # not under /static: that mount (the clinician page) would shadow it
DOCS_URL = "/docs"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
REDOC_URL = "/redoc"
# Swagger UI would otherwise offer to send the schema to validator.swagger.io (an external host).
SWAGGER_UI_PARAMETERS = {"validatorUrl": None}

router = APIRouter(include_in_schema=False)


def _asset(request: Request, name: str) -> str:
    """URL of one packaged asset, honouring a reverse proxy's root_path."""
    return f"{request.scope.get('root_path', '')}{ASSETS_URL}/{name}"


def _openapi_url(request: Request) -> str:
    return f"{request.scope.get('root_path', '')}{request.app.openapi_url}"


@router.get(DOCS_URL)
async def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=_openapi_url(request),
        title=f"{request.app.title} - Swagger UI",
        oauth2_redirect_url=OAUTH2_REDIRECT_URL,
        swagger_js_url=_asset(request, "swagger-ui-bundle.js"),
        swagger_css_url=_asset(request, "swagger-ui.css"),
        swagger_favicon_url=_asset(request, "favicon.png"),
        swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
    )


@router.get(OAUTH2_REDIRECT_URL)
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get(REDOC_URL)
async def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=_openapi_url(request),
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=_asset(request, "redoc.standalone.js"),
        redoc_favicon_url=_asset(request, "favicon.png"),
        with_google_fonts=False,
    )


def install_offline_docs(app: FastAPI) -> None:
    """Add the /docs and /redoc pages and mount their packaged assets on ``app``."""
    if app.docs_url is not None or app.redoc_url is not None:
        raise ValueError("build the app with docs_url=None, redoc_url=None: the offline pages replace FastAPI's")
    app.include_router(router)
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
