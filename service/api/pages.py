"""GET /: the clinician-facing page (``service/static/index.html``), or a placeholder without it;
GET /exam: the patient exam page, both eyes of one visit (``service/static/exam.html``)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, Response

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
PLACEHOLDER = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Radial Screen</title></head>
<body><h1>Radial Screen</h1><p>The dashboard page is not installed. The API is at
<a href="/docs">/docs</a>; POST an image to <code>/v1/predict</code>.</p>
<p>Decision support only, not a diagnosis.</p></body></html>"""

router = APIRouter(tags=["dashboard"])


def _page(name: str) -> Response:
    page = STATIC_DIR / name
    if page.is_file():
        return FileResponse(page, media_type="text/html")
    return HTMLResponse(PLACEHOLDER)


@router.get("/", include_in_schema=False)
async def index() -> Response:
    return _page("index.html")


@router.get("/exam", include_in_schema=False)
async def exam_page() -> Response:
    return _page("exam.html")
