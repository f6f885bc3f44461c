"""The clinician page in a real browser (Debian chromium driven by Playwright) against a real service.

The service runs with an API key and a tiny artifact whose referral threshold is far below the
network's MI, so every gradable fundus image is referred as "uncertain" and a blank image is referred
for quality: both referral paths are visible. Screenshots go to a temp dir and, when set, to
$RADSCREEN_SCREENSHOT_DIR.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy.live_service import blank_png, build_artifact, fundus_png, running_service

CHROMIUM = "/usr/bin/chromium"
API_KEY = "dashboard-test-key"
BROWSER_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]

if not Path(CHROMIUM).is_file():
    pytest.skip(f"{CHROMIUM} not installed: run scripts/install-system-deps.sh (Debian package chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (dev extra) drives the browser")

# WCAG 2.x contrast ratio of an element's text against its first opaque ancestor background.
CONTRAST_JS = """
(selector) => {
  const lum = (c) => {
    const [r, g, b] = c.match(/[\\d.]+/g).slice(0, 3).map(Number).map((v) => {
      v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const node = document.querySelector(selector);
  let bg = null;
  for (let n = node; n; n = n.parentElement) {
    const c = getComputedStyle(n).backgroundColor;
    const alpha = c.startsWith("rgba") ? Number(c.match(/[\\d.]+/g)[3]) : 1;
    if (alpha > 0.99) { bg = c; break; }
  }
  const [a, b] = [lum(getComputedStyle(node).color), lum(bg || "rgb(255,255,255)")];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}
"""


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("dashboard")
    model_dir = build_artifact(root / "artifact", referral_threshold_mi=1e-6)
    with running_service(model_dir, root / "service.log", env={"RADSCREEN_API_KEY": API_KEY}) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, service: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.goto(service + "/")
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def screenshot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    target = os.environ.get("RADSCREEN_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / name)
    return path


def enter_api_key(page: Any) -> None:
    page.fill("#api-key", API_KEY)
    page.dispatch_event("#api-key", "change")
    page.wait_for_selector("#model-status:has-text('Model ready')", timeout=20_000)


def predict_json(service: str, png: bytes) -> dict[str, Any]:
    response = httpx.post(f"{service}/v1/predict", files={"image": ("x.png", png, "image/png")},
                          headers={"X-API-Key": API_KEY}, timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_single_image_report_with_provenance_and_referral(page: Any, service: str, tmp_path: Path) -> None:
    # Listen for the file chooser from the start: subscribing only around the key press races the
    # browser-side interception being switched on.
    choosers: list[Any] = []
    page.on("filechooser", lambda chooser: choosers.append(chooser))
    # Without the key the page explains what is wrong, in plain words, and the banner is already there.
    page.wait_for_selector("#model-status:has-text('API key is missing or wrong')", timeout=20_000)
    assert "Not for clinical use." in page.inner_text("#not-clinical-banner")
    enter_api_key(page)
    model = httpx.get(f"{service}/v1/model", headers={"X-API-Key": API_KEY}, timeout=10).json()["model"]
    provenance = page.inner_text("aside.provenance")
    for text in (model["name"], model["version"], model["sha256"][:12], "synthetic", model["intended_use"],
                 "16 fixed draws", "1.0e-6 nat", "50.0%"):
        assert text in provenance, f"{text!r} missing from the provenance panel"

    # Keyboard: the drop zone is focusable and Enter opens the file chooser.
    png = fundus_png(seed=0)
    page.focus("#drop-zone")
    page.keyboard.press("Enter")
    for _ in range(100):  # up to 10 s
        if choosers:
            break
        page.wait_for_timeout(100)
    assert choosers, "Enter on the focused drop zone did not open the file chooser"
    choosers[0].set_files([{"name": "fundus-0.png", "mimeType": "image/png", "buffer": png}])
    page.wait_for_selector("#preview img")
    page.click("#analyse")
    page.wait_for_selector("#decision", timeout=30_000)

    expected = predict_json(service, png)  # fixed posterior draws: the same image gives the same numbers
    probability = expected["diagnosis"]["referable_dr_probability"]
    assert page.inner_text("#decision").startswith("Refer: the model is uncertain about this image")
    assert f"{100 * probability:.1f}%" in page.inner_text("#probability .value")
    assert "above the referral threshold" in page.inner_text("#uncertainty .value")
    assert page.inner_text("#quality").endswith(f"Gradable (quality score {expected['quality']['score']:.2f})")
    assert model["sha256"][:12] in page.inner_text("#results")
    assert "Analysis complete. Refer: the model is uncertain" in page.inner_text("#status")
    assert page.get_attribute("#results", "aria-live") == "polite"
    gauge_label = page.get_attribute("#uncertainty .gauge", "aria-label")
    assert gauge_label is not None and "referral threshold" in gauge_label

    # Accessibility basics: every form control is labelled, text contrast meets WCAG AA (4.5:1).
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('input:not([type=file])')]
        .filter((i) => !document.querySelector(`label[for="${i.id}"]`)).map((i) => i.id)""")
    assert unlabelled == []
    for selector in ("#not-clinical-banner", "#decision", ".drop-title", "#probability .explain",
                     "aside .facts dt", "#analyse", ".site-footer p"):
        ratio = page.evaluate(CONTRAST_JS, selector)
        assert ratio >= 4.5, f"{selector}: contrast {ratio:.2f} < 4.5"
    shot = screenshot(page, tmp_path, "dashboard-single.png")
    assert shot.stat().st_size > 10_000


def test_batch_table_from_drag_and_drop(page: Any, service: str, tmp_path: Path) -> None:
    enter_api_key(page)
    files = [("fundus-1.png", fundus_png(seed=1)), ("blank.png", blank_png()), ("notes.png", b"not an image")]
    data_transfer = page.evaluate_handle(
        """(files) => { const dt = new DataTransfer();
            for (const [name, b64] of files) {
              const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
              dt.items.add(new File([bytes], name, { type: "image/png" })); }
            return dt; }""",
        [[name, base64.b64encode(data).decode()] for name, data in files],
    )
    page.dispatch_event("#drop-zone", "drop", {"dataTransfer": data_transfer})
    assert page.inner_text("#analyse") == "Analyse 3 images"
    page.click("#analyse")
    page.wait_for_selector("#batch-table", timeout=30_000)

    rows = page.query_selector_all("#batch-table tbody tr")
    assert len(rows) == 3
    cells = [[c.inner_text() for c in row.query_selector_all("td")] for row in rows]
    expected = predict_json(service, files[0][1])
    assert f"{100 * expected['diagnosis']['referable_dr_probability']:.1f}%" in cells[0][1]
    assert cells[0][-1].startswith("Refer: the model is uncertain about this image")
    assert "Not gradable" in cells[1][3] and "image quality too low to grade" in cells[1][-1]
    assert "This file type is not accepted" in cells[2][1] and "Not analysed" in cells[2][-1]
    assert page.inner_text("#batch-summary") == "2 of 3 images analysed; 2 referred to an expert."
    assert len(page.query_selector_all("#batch-table img.thumb")) == 2  # the third cannot be drawn
    assert page.inner_text("#batch-table tbody tr:nth-child(3) .no-preview") == "No preview"
    screenshot(page, tmp_path, "dashboard-batch.png")


def test_refused_upload_is_explained_in_plain_words(page: Any, tmp_path: Path) -> None:
    enter_api_key(page)
    page.set_input_files("#file-input", [{"name": "letter.txt", "mimeType": "text/plain", "buffer": b"hello"}])
    page.click("#analyse")
    page.wait_for_selector("#error:not([hidden])", timeout=30_000)
    text = page.inner_text("#error")
    assert "This file type is not accepted. Use JPEG, PNG, TIFF, WebP or BMP." in text
    assert "Details: " in text and "Request id: " in text
    assert page.inner_text("#status") == "Analysis failed."
    screenshot(page, tmp_path, "dashboard-error.png")
