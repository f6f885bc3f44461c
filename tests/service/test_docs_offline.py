"""/docs and /redoc work without internet: their HTML names no external host and every asset it
references is served by the service itself (a real uvicorn server on 127.0.0.1)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from service.settings import Settings
from support.live_server import live_server

# Any absolute or protocol-relative URL in the page, wherever it appears (attributes, inline JS, CSS).
EXTERNAL_URL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}", re.IGNORECASE)
# What a browser would fetch from the page's inline script: the spec URL passed to Swagger UI / ReDoc.
SPEC_URL = re.compile(r"""(?:url:\s*|spec-url=)['"]([^'"]+)['"]""")


class _References(HTMLParser):
    """Collects every URL the page makes the browser load: script src, link href, img src."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and ((tag == "link" and name == "href") or (name == "src" and tag in ("script", "img"))):
                self.urls.append(value)


@pytest.fixture(scope="module")
def base_url(tiny_artifact: Path) -> Iterator[str]:
    with live_server(Settings(model_dir=tiny_artifact, device="cpu"), wait_ready=False) as base:
        yield base


@pytest.mark.parametrize(
    ("page", "assets"),
    [
        ("/docs", {"swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"}),
        ("/redoc", {"redoc.standalone.js", "favicon.png"}),
    ],
)
def test_docs_page_is_self_contained(base_url: str, page: str, assets: set[str]) -> None:
    resp = httpx.get(base_url + page)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    html = resp.text
    assert EXTERNAL_URL.findall(html) == [], f"{page} names an external host"
    assert "cdn.jsdelivr" not in html and "fonts.googleapis" not in html

    parser = _References()
    parser.feed(html)
    assert {Path(urlsplit(u).path).name for u in parser.urls} == assets
    for ref in parser.urls:
        assert urlsplit(ref).netloc == "", ref
        asset = httpx.get(urljoin(base_url + page, ref))
        assert asset.status_code == 200, ref
        assert len(asset.content) > 1000, f"{ref} is suspiciously small ({len(asset.content)} bytes)"
        expected_type = {".js": "javascript", ".css": "text/css", ".png": "image/png"}[Path(ref).suffix]
        assert expected_type in asset.headers["content-type"], (ref, asset.headers["content-type"])

    spec_urls = SPEC_URL.findall(html)
    assert spec_urls == ["/openapi.json"]
    spec = httpx.get(base_url + spec_urls[0])
    assert spec.status_code == 200
    assert spec.json()["info"]["title"] == "Radial Screen"


def test_swagger_ui_bundle_is_the_real_library(base_url: str) -> None:
    """The served bundle is Swagger UI itself (defines SwaggerUIBundle), not an empty placeholder."""
    js = httpx.get(f"{base_url}/docs-assets/swagger-ui-bundle.js")
    assert js.status_code == 200
    assert "SwaggerUIBundle" in js.text
    redoc = httpx.get(f"{base_url}/docs-assets/redoc.standalone.js")
    assert redoc.status_code == 200 and "Redoc" in redoc.text


def test_docs_routes_are_not_in_the_schema_and_oauth_redirect_is_local(base_url: str) -> None:
    paths = httpx.get(f"{base_url}/openapi.json").json()["paths"]
    assert not {"/docs", "/redoc", "/docs/oauth2-redirect"} & set(paths)
    redirect = httpx.get(f"{base_url}/docs/oauth2-redirect")
    assert redirect.status_code == 200
    assert EXTERNAL_URL.findall(redirect.text) == []


def test_unknown_asset_is_404(base_url: str) -> None:
    assert httpx.get(f"{base_url}/docs-assets/nope.js").status_code == 404
