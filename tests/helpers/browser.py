"""Driving Debian's Chromium with Playwright for the page tests, and their screenshots.

``launch()`` yields a headless Chromium (the module that uses it skips itself first with
``require_chromium()`` when the browser or Playwright is missing); ``screenshot()`` saves a PNG of the
page or of one element, palette-compressed, and copies it to ``$RADSCREEN_SCREENSHOT_DIR`` when set (the
ones in docs/screenshots/ were made with RADSCREEN_SCREENSHOT_DIR=docs/screenshots).
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
def launch(sync_api: Any) -> Iterator[Any]:
    """A headless Chromium browser for one test module."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS, headless=True)
        yield browser
        browser.close()


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
