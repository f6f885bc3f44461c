"""Driving Debian's Chromium with Playwright for the page tests, and their screenshots.

``launch()`` yields a headless Chromium (the page test modules skip themselves first with
``require_chromium()`` when the browser or Playwright is missing; their fixtures are in
tests/service/conftest.py). ``open_page()``
opens a page and fails the test on any JavaScript error; ``screenshot()`` saves a PNG of the page or of one
element, palette-compressed, and copies it to ``$RADSCREEN_SCREENSHOT_DIR`` when set (the ones in
docs/screenshots/ were made with RADSCREEN_SCREENSHOT_DIR=docs/screenshots).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]


def require_chromium() -> Any:
    """Playwright's sync API, or skip the calling module (no Chromium, or no Playwright)."""
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"{CHROMIUM} not installed: run scripts/install-system-deps.sh (Debian package chromium)",
                    allow_module_level=True)
    return pytest.importorskip("playwright.sync_api", reason="playwright (dev extra) drives the browser")


@contextmanager
def launch() -> Iterator[Any]:
    """A headless Chromium browser (skips the calling module without one)."""
    sync_api = require_chromium()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS, headless=True)
        yield browser
        browser.close()


@contextmanager
def open_page(browser: Any, url: str) -> Iterator[Any]:
    """A 1280x900 page at ``url``; the test fails if the page raised a JavaScript error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def screenshot(page: Any, tmp_path: Path, name: str, selector: str | None = None) -> Path:
    """Save a PNG of the page (or of one element); copied to $RADSCREEN_SCREENSHOT_DIR when set."""
    path = tmp_path / name
    if selector is None:
        page.screenshot(path=str(path), full_page=True)
    else:
        page.locator(selector).screenshot(path=str(path))
    from PIL import Image

    with Image.open(path) as shot:  # a 256-colour palette keeps the docs copies small (< 150 KB)
        small = shot.convert("RGB").quantize(colors=256)
    small.save(path, optimize=True)
    target = os.environ.get("RADSCREEN_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / name)
    return path
