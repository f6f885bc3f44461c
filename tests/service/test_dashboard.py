"""The clinician page in a real browser (Debian chromium driven by Playwright) against a real service.

The service runs with an API key and a tiny artifact calibrated (tests/helpers/outcomes.py) so that each
of the four screening outcomes occurs for one generated image: every outcome is checked on the single
view and in the batch table (headline words and colour class), and the FHIR download is checked to reuse
the result on screen. Screenshots go to a temp dir and, when $RADSCREEN_SCREENSHOT_DIR is set, there too
(the ones in docs/screenshots/ were made with RADSCREEN_SCREENSHOT_DIR=docs/screenshots; tests.helpers.browser).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.browser import open_page, require_chromium, screenshot
from tests.helpers.outcomes import OUTCOMES

pytestmark = pytest.mark.browser  # deselect locally with -m "not browser"; CI runs it

API_KEY = "dashboard-test-key"
sync_api = require_chromium()

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


# What the page must show for each outcome: headline words and the colour class (never green unless clear).
EXPECTED = {
    "refer_referable_dr": ("Refer to an eye-care professional", "outcome-refer"),
    "grader_review_uncertain": ("Human grader review needed", "outcome-review"),
    "retake_ungradable": ("Retake the photograph", "outcome-retake"),
    "no_referable_dr": ("No referable diabetic retinopathy found", "outcome-clear"),
}
GREEN = "outcome-clear"
DEFERRALS = ("grader_review_uncertain", "retake_ungradable")


def font_px(page: Any, selector: str) -> float:
    """Computed font size of the first element matching ``selector``, in CSS pixels."""
    return float(page.evaluate(
        "(s) => parseFloat(getComputedStyle(document.querySelector(s)).fontSize)", selector))


@pytest.fixture
def page(browser: Any, service: str) -> Iterator[Any]:
    with open_page(browser, service + "/") as pg:
        yield pg


def enter_api_key(page: Any) -> None:
    page.fill("#api-key", API_KEY)
    page.dispatch_event("#api-key", "change")
    page.wait_for_selector("#model-status:has-text('Model ready')", timeout=20_000)


def predict_json(service: str, png: bytes) -> dict[str, Any]:
    response = httpx.post(f"{service}/v1/predict", files={"image": ("x.png", png, "image/png")},
                          headers={"X-API-Key": API_KEY}, timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json())


def analyse_one(page: Any, name: str, png: bytes) -> None:
    page.set_input_files("#file-input", [{"name": name, "mimeType": "image/png", "buffer": png}])
    page.click("#analyse")
    page.wait_for_selector("#decision", timeout=30_000)


def test_single_image_report_with_provenance_keyboard_and_contrast(
    page: Any, service: str, images: dict[str, bytes], tmp_path: Path
) -> None:
    # Listen for the file chooser from the start: subscribing only around the key press races the
    # browser-side interception being switched on.
    choosers: list[Any] = []
    page.on("filechooser", lambda chooser: choosers.append(chooser))
    # Without the key the page explains what is wrong, says the key is required, and the banner is there.
    page.wait_for_selector("#model-status:has-text('API key is missing or wrong')", timeout=20_000)
    assert "Not for clinical use." in page.inner_text("#not-clinical-banner")
    assert page.inner_text("#api-key-label").startswith("API key (required by this server")
    assert page.inner_text("#settings-summary") == "Connection settings (API key required)"
    enter_api_key(page)
    info = httpx.get(f"{service}/v1/model", headers={"X-API-Key": API_KEY}, timeout=10).json()
    model, cal = info["model"], info["calibration"]
    provenance = page.inner_text("aside.provenance")
    assert info["training_summary"] == "synthetic"
    for text in (model["name"], model["version"], model["sha256"][:12], info["training_summary"], "Model card",
                 "16 fixed draws (16 forward passes per image)", f"{cal['referral_threshold_mi']:.4f} nat",
                 f"{100 * cal['decision_threshold']:.1f}%"):
        assert text in provenance, f"{text!r} missing from the provenance panel"

    # Keyboard: the drop zone is focusable and Enter opens the file chooser.
    png = images["refer_referable_dr"]
    page.focus("#drop-zone")
    page.keyboard.press("Enter")
    for _ in range(100):  # up to 10 s
        if choosers:
            break
        page.wait_for_timeout(100)
    assert choosers, "Enter on the focused drop zone did not open the file chooser"
    choosers[0].set_files([{"name": "fundus.png", "mimeType": "image/png", "buffer": png}])
    page.wait_for_selector("#preview img")
    page.click("#analyse")
    page.wait_for_selector("#decision", timeout=30_000)

    expected = predict_json(service, png)  # fixed posterior draws: the same image gives the same numbers
    probability = expected["diagnosis"]["referable_dr_probability"]
    assert page.inner_text("#probability .value") == expected["words"]["probability"]
    assert f"{100 * probability:.1f} % — above the referral threshold of " in page.inner_text("#probability .value")
    assert page.inner_text("#uncertainty .value") == f"Uncertainty: {expected['words']['uncertainty']}"
    assert page.inner_text("#uncertainty .value").startswith("Uncertainty: low: ")
    page.click("#uncertainty details summary")
    assert "against the calibrated threshold" in page.inner_text("#uncertainty details")
    assert page.inner_text("#quality .quality") == "Gradable: passed every quality check"
    page.click("#quality details summary")  # the score is explained, not shown as a grade of the image
    assert f"Quality score {expected['quality']['score']:.2f}: the smallest of the per-check margins" in (
        page.inner_text("#quality details"))
    # the provenance once: the hash and the training summary stand in the panel only, not under the result
    whole = page.inner_text("body")
    assert whole.count(model["sha256"][:12]) == 1 and whole.count(info["training_summary"]) == 1
    assert model["sha256"][:12] not in page.inner_text("#results")
    assert page.inner_text("#status") == "Analysis complete. Refer to an eye-care professional."
    assert page.get_attribute("#results", "aria-live") == "polite"
    gauge_label = page.get_attribute("#uncertainty .gauge", "aria-label")
    assert gauge_label is not None and "calibrated threshold" in gauge_label

    # Accessibility basics: every form control is labelled, text contrast meets WCAG AA (4.5:1).
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('input:not([type=file])')]
        .filter((i) => !document.querySelector(`label[for="${i.id}"]`)).map((i) => i.id)""")
    assert unlabelled == []
    for selector in ("#not-clinical-banner", "#decision", ".drop-title", "#probability .explain",
                     "aside .facts dt", "#analyse", ".site-footer p"):
        ratio = page.evaluate(CONTRAST_JS, selector)
        assert ratio >= 4.5, f"{selector}: contrast {ratio:.2f} < 4.5"


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_each_outcome_on_the_single_view(
    page: Any, service: str, images: dict[str, bytes], outcome: str, tmp_path: Path
) -> None:
    enter_api_key(page)
    png = images[outcome]
    analyse_one(page, f"{outcome}.png", png)
    body = predict_json(service, png)
    assert body["outcome"] == outcome  # the calibrated artifact really gives this outcome
    headline, cls = EXPECTED[outcome]
    decision = page.locator("#decision")
    assert page.inner_text("#decision .outcome-headline") == headline
    classes = (decision.get_attribute("class") or "").split()
    assert cls in classes and (outcome == "no_referable_dr") == (GREEN in classes)
    assert decision.get_attribute("data-outcome") == outcome
    colour = page.evaluate("() => getComputedStyle(document.querySelector('#decision')).backgroundColor")
    assert colour == {"outcome-refer": "rgb(253, 236, 236)", "outcome-review": "rgb(255, 237, 213)",
                      "outcome-retake": "rgb(237, 233, 254)", "outcome-clear": "rgb(231, 246, 236)"}[cls]
    prob_text = page.inner_text("#probability .value")
    probability = f"{100 * body['diagnosis']['referable_dr_probability']:.1f} %"
    if outcome == "retake_ungradable":
        assert prob_text == "Not graded" and "%" not in prob_text  # the number is not a finding
        assert page.inner_text("#quality .quality") == f"Not gradable: {body['words']['retake_reason']}"
        reasons = page.locator("#quality .quality-why li").all_inner_texts()  # each refusal explains itself
        details = body["quality"]["details"]
        assert len(reasons) == len(details) >= 1
        for text, finding in zip(reasons, details, strict=True):
            bound = "at least" if finding["relation"] == ">=" else "at most"
            assert f"needs {bound} {float(finding['threshold']):.3g}" in text, (text, finding)
    elif outcome == "grader_review_uncertain":
        assert prob_text == body["words"]["probability"] and "not a finding" in prob_text
        assert "threshold" not in prob_text
        assert page.query_selector("#probability .gauge") is None  # no bar against the decision threshold
    else:
        assert prob_text.startswith(probability)
    if outcome in DEFERRALS:  # a deferral's probability is never worded as a finding
        words = page.inner_text("#results").lower()
        assert "likely" not in words and "not referable" not in words, words
    # the outcome is the largest text of the result: no number outranks what to do
    assert font_px(page, "#probability .value") < font_px(page, "#decision .outcome-headline")
    if outcome == "grader_review_uncertain":
        assert font_px(page, "#probability .value") <= 0.8 * font_px(page, "#decision .outcome-headline")
    level = page.inner_text("#uncertainty .value")
    assert level == f"Uncertainty: {body['words']['uncertainty']}"
    assert level.startswith("Uncertainty: high: ") == (outcome == "grader_review_uncertain")
    assert "confident" not in page.inner_text("#results") and "borderline" not in page.inner_text("#results")
    assert "No referral" not in page.inner_text("#results")
    shot = screenshot(page, tmp_path, f"outcome-{outcome}.png", selector="#results")
    assert shot.stat().st_size < 150_000


def test_fhir_download_reuses_the_result_on_screen(page: Any, service: str, images: dict[str, bytes]) -> None:
    enter_api_key(page)
    analyse_one(page, "review.png", images["grader_review_uncertain"])
    meta = page.inner_text("#results")
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    with page.expect_download() as download_info:
        page.click("#fhir")
    bundle = json.loads(Path(download_info.value.path()).read_text())
    assert [u for u in requests if "/v1/predict" in u] == []  # the model did not run again
    assert [u.removeprefix(service) for u in requests if u.startswith(service)] == ["/v1/fhir"]
    assert f"Request {bundle['identifier']['value']}." in meta  # the same request id as on screen
    report = next(e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == "DiagnosticReport")
    assert report["conclusionCode"][0]["coding"][0]["code"] == "grader_review_uncertain"


def test_batch_table_shows_every_outcome_and_counts_failed_files(
    page: Any, service: str, images: dict[str, bytes], tmp_path: Path
) -> None:
    enter_api_key(page)
    files = [(f"{o}.png", images[o]) for o in OUTCOMES] + [("notes.png", b"not an image")]
    data_transfer = page.evaluate_handle(
        """(files) => { const dt = new DataTransfer();
            for (const [name, b64] of files) {
              const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
              dt.items.add(new File([bytes], name, { type: "image/png" })); }
            return dt; }""",
        [[name, base64.b64encode(data).decode()] for name, data in files],
    )
    page.dispatch_event("#drop-zone", "drop", {"dataTransfer": data_transfer})
    assert page.inner_text("#analyse") == "Analyse 5 images"
    page.click("#analyse")
    page.wait_for_selector("#batch-table", timeout=30_000)

    rows = page.query_selector_all("#batch-table tbody tr")
    assert len(rows) == 5
    for row, outcome in zip(rows, OUTCOMES, strict=False):
        cell = row.query_selector("td.outcome-cell")
        assert cell is not None
        headline, cls = EXPECTED[outcome]
        assert cell.inner_text() == headline and cls in (cell.get_attribute("class") or "").split()
        cells = [c.inner_text() for c in row.query_selector_all("td")]
        if outcome == "retake_ungradable":
            assert cells[2] == "Not graded" and "Not gradable" in cells[4]
        elif outcome == "grader_review_uncertain":
            expected = predict_json(service, images[outcome])
            probability = f"{100 * expected['diagnosis']['referable_dr_probability']:.1f}%"
            assert cells[2].split("\n") == [f"uncertain estimate {probability}", "not a finding"]
        else:
            expected = predict_json(service, images[outcome])
            assert cells[2].startswith(f"{100 * expected['diagnosis']['referable_dr_probability']:.1f}%")
    failed = [c.inner_text() for c in rows[4].query_selector_all("td")]
    assert failed[1] == "Not analysed: check the file" and "This file type is not accepted" in failed[2]
    assert page.inner_text("#batch-summary") == "5 images: 4 analysed, 1 failed."
    counts = {li.get_attribute("data-outcome"): li.inner_text() for li in page.query_selector_all("#batch-counts li")}
    assert counts == {
        "refer_referable_dr": "Refer to an eye-care professional: 1",
        "grader_review_uncertain": "Human grader review needed: 1",
        "retake_ungradable": "Retake the photograph: 1",
        "no_referable_dr": "No referable diabetic retinopathy found: 1",
        "failed": "Not analysed (failed file): 1",
    }
    # One fixed MI scale for every row: the threshold marker sits at the same place (the middle) in each.
    markers = page.evaluate(
        "() => [...document.querySelectorAll('#batch-table .gauge .marker')].map((m) => m.style.left)")
    assert markers == ["50%"] * 4
    assert len(page.query_selector_all("#batch-table img.thumb")) == 4  # the fifth cannot be drawn
    shot = screenshot(page, tmp_path, "batch-outcomes.png", selector="#results")
    assert shot.stat().st_size < 150_000


def test_upload_area_is_above_the_fold_on_a_phone(browser: Any, service: str) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=1, is_mobile=True)
    pg = context.new_page()
    pg.goto(service + "/")
    box = pg.locator("#drop-zone").bounding_box()
    analyse = pg.locator("#analyse").bounding_box()
    context.close()
    assert box is not None and analyse is not None
    assert box["y"] + box["height"] <= 844 and analyse["y"] + analyse["height"] <= 844, (box, analyse)


def test_refused_upload_is_explained_in_plain_words(page: Any, tmp_path: Path) -> None:
    enter_api_key(page)
    page.set_input_files("#file-input", [{"name": "letter.txt", "mimeType": "text/plain", "buffer": b"hello"}])
    page.click("#analyse")
    page.wait_for_selector("#error:not([hidden])", timeout=30_000)
    text = page.inner_text("#error")
    assert "This file type is not accepted. Use JPEG, PNG, TIFF, WebP, BMP or a DICOM photograph." in text
    assert "Details: " in text and "Request id: " in text
    assert page.inner_text("#status") == "Analysis failed."
    screenshot(page, tmp_path, "dashboard-error.png")


def test_a_costly_encoding_is_explained_in_plain_words(page: Any) -> None:
    from support.hostile_decode import jpeg_many_scans

    enter_api_key(page)
    bomb = jpeg_many_scans(64, 2000)  # far more progressive scans than any camera writes
    page.set_input_files("#file-input", [{"name": "scans.jpg", "mimeType": "image/jpeg", "buffer": bomb}])
    page.click("#analyse")
    page.wait_for_selector("#error:not([hidden])", timeout=30_000)
    assert "too costly to decode" in page.inner_text("#error") and "original JPEG" in page.inner_text("#error")
