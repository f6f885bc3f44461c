"""What a clinician reads on the pages, in a real browser at desktop and phone widths: the words of a referral near
the threshold, a confident referral, an uncertain eye, a healthy eye, and a retake on the exam page with its reason.

The words on the page are the service's own (``words`` in the JSON, ``models.outcome.wording``): each case is checked
against the JSON answer for the same photograph and against what the words must and must not say ("likely" only at
50 % or more, never "confident" or "borderline"). The calibrated tiny artifact (tests/helpers/outcomes.py) gives
the near-threshold referral (p̄ 34 % against a threshold of 33.5 %), the uncertain and the healthy eye; a second
tiny artifact (seed 2: p̄ about 64 % on the generated photographs, threshold 5.6 %, no deferral) gives the
confident referral. Screenshots: ``scripts/screenshots.sh`` writes them to docs/screenshots.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.artifacts import build_tiny_artifact
from support.images import fundus_png
from tests.helpers.browser import require_chromium, screenshot
from tests.helpers.service_process import running_service

pytestmark = pytest.mark.browser
API_KEY = "page-words-test-key"
sync_api = require_chromium()
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
FORBIDDEN = ("confident", "borderline")


@pytest.fixture(scope="module")
def confident_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("confident")
    artifact = build_tiny_artifact(folder / "artifact", seed=2, decision_threshold=0.0558, referral_threshold_mi=0.1)
    with running_service(artifact, folder / "service.log", env={"RADSCREEN_API_KEY": API_KEY}) as base:
        yield base


@pytest.fixture(params=sorted(VIEWPORTS))
def width(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _open(browser: Any, url: str, width: str) -> tuple[Any, Any, list[str]]:
    context = browser.new_context(viewport=VIEWPORTS[width], device_scale_factor=1, is_mobile=width == "phone")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    return context, page, errors


def _json(base: str, png: bytes) -> dict[str, Any]:
    response = httpx.post(f"{base}/v1/predict", files={"image": ("x.png", png, "image/png")},
                          headers={"X-API-Key": API_KEY}, timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _single(browser: Any, base: str, png: bytes, width: str, shot: str, tmp_path: Path) -> dict[str, str]:
    """Analyse ``png`` on the single-image page; the words it shows."""
    context, page, errors = _open(browser, base + "/", width)
    try:
        page.evaluate("() => { document.getElementById('settings').open = true; }")  # open, whatever the 401 did
        page.fill("#api-key", API_KEY)
        page.dispatch_event("#api-key", "change")
        page.wait_for_selector("#model-status:has-text('Model ready')", timeout=30_000)
        page.set_input_files("#file-input", [{"name": "eye.png", "mimeType": "image/png", "buffer": png}])
        page.click("#analyse")
        page.wait_for_selector("#decision", timeout=30_000)
        words = {"headline": page.inner_text("#decision .outcome-headline"), "sub": page.inner_text("#decision small"),
                 "probability": page.inner_text("#probability .value"),
                 "uncertainty": page.inner_text("#uncertainty .value"), "results": page.inner_text("#results")}
        _fits_and_shot(page, tmp_path, f"words-{shot}-{width}.png", "#results", width)
    finally:
        context.close()
    assert not errors, errors
    return words


def _common(words: dict[str, str], body: dict[str, Any]) -> None:
    assert words["probability"] == body["words"]["probability"]
    assert words["uncertainty"] == f"Uncertainty: {body['words']['uncertainty']}"
    for word in FORBIDDEN:
        assert word not in words["results"].lower(), (word, words["results"])


def test_a_referral_near_the_threshold_is_set_beside_it_not_called_likely(
    browser: Any, service: str, images: dict[str, bytes], width: str, tmp_path: Path
) -> None:
    body = _json(service, images["refer_referable_dr"])
    p, t = body["diagnosis"]["referable_dr_probability"], body["diagnosis"]["decision_threshold"]
    assert body["outcome"] == "refer_referable_dr" and t <= p < 0.5
    words = _single(browser, service, images["refer_referable_dr"], width, "refer-near-threshold", tmp_path)
    _common(words, body)
    assert words["headline"] == "Refer to an eye-care professional"
    assert words["probability"] == f"{100 * p:.1f} % — above the referral threshold of {100 * t:.1f} %"
    assert "likely" not in words["results"].lower()
    assert words["uncertainty"].startswith("Uncertainty: low: ")


def test_a_confident_referral_says_likely(browser: Any, confident_service: str, width: str, tmp_path: Path) -> None:
    png = fundus_png(seed=1)
    body = _json(confident_service, png)
    p = body["diagnosis"]["referable_dr_probability"]
    assert body["outcome"] == "refer_referable_dr" and p >= 0.5
    words = _single(browser, confident_service, png, width, "refer-confident", tmp_path)
    _common(words, body)
    assert words["probability"] == f"{100 * p:.1f} % — above the referral threshold of 5.6 %; referable DR likely"
    assert words["uncertainty"].startswith("Uncertainty: low: ")


def test_an_uncertain_eye_reads_as_an_estimate_and_high_uncertainty(
    browser: Any, service: str, images: dict[str, bytes], width: str, tmp_path: Path
) -> None:
    body = _json(service, images["grader_review_uncertain"])
    assert body["outcome"] == "grader_review_uncertain"
    words = _single(browser, service, images["grader_review_uncertain"], width, "uncertain", tmp_path)
    _common(words, body)
    assert words["headline"] == "Human grader review needed"
    assert words["probability"].endswith("— the model's uncertain estimate, not a finding (a grader decides)")
    assert "threshold" not in words["probability"] and "likely" not in words["results"].lower()
    assert words["uncertainty"].startswith("Uncertainty: high: ") and "above the grader-review threshold" in (
        words["uncertainty"])


def test_a_healthy_eye_reads_below_the_threshold(
    browser: Any, service: str, images: dict[str, bytes], width: str, tmp_path: Path
) -> None:
    body = _json(service, images["no_referable_dr"])
    p, t = body["diagnosis"]["referable_dr_probability"], body["diagnosis"]["decision_threshold"]
    assert body["outcome"] == "no_referable_dr"
    words = _single(browser, service, images["no_referable_dr"], width, "healthy", tmp_path)
    _common(words, body)
    assert words["headline"] == "No referable diabetic retinopathy found"
    assert words["probability"] == f"{100 * p:.1f} % — below the referral threshold of {100 * t:.1f} %"
    assert words["uncertainty"].startswith("Uncertainty: low: ")


def test_the_exam_page_says_why_an_eye_must_be_retaken(
    browser: Any, service: str, images: dict[str, bytes], width: str, tmp_path: Path
) -> None:
    right, left = images["retake_ungradable"], images["no_referable_dr"]
    parts = [("right", ("right.png", right, "image/png")), ("left", ("left.png", left, "image/png"))]
    response = httpx.post(f"{service}/v1/exams", headers={"X-API-Key": API_KEY}, timeout=60, files=parts)
    assert response.status_code == 200, response.text
    body = response.json()
    reason = body["images"][0]["result"]["words"]["retake_reason"]
    assert body["outcome"] == "retake_ungradable" and reason  # a blank frame: no field of view, too dark, ...
    context, page, errors = _open(browser, service + "/exam", width)
    try:
        page.evaluate("() => { document.getElementById('settings').open = true; }")  # open, whatever the 401 did
        page.fill("#api-key", API_KEY)
        for eye, data in (("right", right), ("left", left)):
            page.set_input_files(f"#{eye}-input", [{"name": f"{eye}.png", "mimeType": "image/png", "buffer": data}])
        page.click("#analyse-exam")
        page.wait_for_selector("#patient-decision", timeout=30_000)
        assert page.inner_text("#retake-right") == f"Why a retake: {reason}"
        assert page.inner_text("#eye-right .photo-retake") == f"Retake: {reason}"
        assert page.query_selector("#retake-left") is None  # the healthy eye needs none
        healthy = page.inner_text("#eye-left .photo-probability")
        assert healthy == f"Referable-DR probability {body['images'][1]['result']['words']['probability']}"
        text = page.inner_text("#exam-results").lower()
        assert not any(word in text for word in FORBIDDEN)
        _fits_and_shot(page, tmp_path, f"words-exam-retake-{width}.png", "#exam-results", width)
    finally:
        context.close()
    assert not errors, errors


def _fits_and_shot(page: Any, folder: Path, name: str, selector: str, width: str) -> None:
    """No horizontal scrolling at this width, and a small screenshot of ``selector``."""
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow} px wider than the {width} screen"
    path = screenshot(page, folder, name, selector=selector)
    assert path.stat().st_size < 150_000


def test_provenance_once_with_the_card_one_click_away(browser: Any, service: str) -> None:
    """The panel names the model once (name, version, sha256, a one-line training summary); its "Model card" link
    opens GET /v1/model/card (behind the API key) in a new tab."""
    assert httpx.get(f"{service}/v1/model/card", timeout=30).status_code == 401
    card = httpx.get(f"{service}/v1/model/card", headers={"X-API-Key": API_KEY}, timeout=30)
    assert card.status_code == 200 and card.headers["content-type"].startswith("text/markdown")
    info = httpx.get(f"{service}/v1/model", headers={"X-API-Key": API_KEY}, timeout=30).json()
    assert card.text == info["model_card"]
    context, page, errors = _open(browser, service + "/", "desktop")
    try:
        page.evaluate("() => { document.getElementById('settings').open = true; }")
        page.fill("#api-key", API_KEY)
        page.dispatch_event("#api-key", "change")
        page.wait_for_selector("#model-status:has-text('Model ready')", timeout=30_000)
        body = page.inner_text("body")
        assert body.count(info["model"]["sha256"][:12]) == 1 and info["model"]["intended_use"] not in body
        with context.expect_page() as opened:
            page.click("#model-card-link")
        tab = opened.value
        tab.wait_for_load_state()
        assert tab.inner_text("body").strip() == card.text.strip()
    finally:
        context.close()
    assert not errors, errors
