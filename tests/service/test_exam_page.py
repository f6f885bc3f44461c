"""The exam page (/exam) in a real browser against a real service: both eyes side by side, one patient headline.

Same browser, service and screenshot helpers as the single-image page (tests/service/test_dashboard.py); the
artifact is calibrated so that each per-image outcome occurs, so the patient outcome is chosen by which
photograph stands for which eye, and what the page shows is compared with what POST /v1/exams answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.browser import open_page, require_chromium, screenshot

pytestmark = pytest.mark.browser
API_KEY = "exam-page-test-key"
GREEN = "outcome-clear"  # the only colour class of no_referable_dr
sync_api = require_chromium()


@pytest.fixture
def exam_page(browser: Any, service: str) -> Iterator[Any]:
    with open_page(browser, service + "/exam") as pg:
        pg.click("#settings-summary")
        pg.fill("#api-key", API_KEY)
        yield pg


def exam_json(service: str, right: bytes | None, left: bytes | None) -> dict[str, Any]:
    files = [(eye, (f"{eye}.png", data, "image/png")) for eye, data in (("right", right), ("left", left)) if data]
    response = httpx.post(f"{service}/v1/exams", files=files, headers={"X-API-Key": API_KEY}, timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json())


def choose(page: Any, eye: str, data: bytes) -> None:
    page.set_input_files(f"#{eye}-input", [{"name": f"{eye}.png", "mimeType": "image/png", "buffer": data}])


def test_exam_shows_both_eyes_side_by_side_under_one_patient_headline(
    exam_page: Any, service: str, images: dict[str, bytes], tmp_path: Path
) -> None:
    right, left = images["refer_referable_dr"], images["no_referable_dr"]
    choose(exam_page, "right", right)
    choose(exam_page, "left", left)
    exam_page.click("#analyse-exam")
    exam_page.wait_for_selector("#patient-decision", timeout=30_000)
    body = exam_json(service, right, left)
    assert body["outcome"] == "refer_referable_dr"
    decision = exam_page.locator("#patient-decision")
    assert decision.get_attribute("data-outcome") == body["outcome"]
    classes = (decision.get_attribute("class") or "").split()
    assert "outcome-refer" in classes and GREEN not in classes
    headline = exam_page.inner_text("#patient-decision .outcome-headline")
    assert headline == "Refer the patient to an eye-care professional"
    assert body["outcome_reason"] in exam_page.inner_text("#patient-decision")
    for eye in ("right", "left"):
        column = exam_page.locator(f"#eye-{eye} .eye-decision")
        assert column.get_attribute("data-outcome") == body["eyes"][eye]["outcome"]
    # side by side: the two eye columns share a row, right eye on the left of the screen (as the clinician faces)
    r_box, l_box = exam_page.locator("#eye-right").bounding_box(), exam_page.locator("#eye-left").bounding_box()
    assert r_box is not None and l_box is not None
    assert abs(r_box["y"] - l_box["y"]) < 1 and r_box["x"] < l_box["x"]
    words = body["images"][0]["result"]["words"]
    assert exam_page.inner_text("#eye-right .photo-probability") == f"Referable-DR probability {words['probability']}"
    assert "— above the referral threshold of " in words["probability"]
    shot = screenshot(exam_page, tmp_path, "exam-refer.png", selector="#exam-results")
    assert shot.stat().st_size < 150_000


def test_one_eye_only_is_a_retake_and_the_missing_eye_is_said(
    exam_page: Any, service: str, images: dict[str, bytes], tmp_path: Path
) -> None:
    choose(exam_page, "left", images["no_referable_dr"])
    exam_page.click("#analyse-exam")
    exam_page.wait_for_selector("#patient-decision", timeout=30_000)
    assert exam_page.locator("#patient-decision").get_attribute("data-outcome") == "retake_ungradable"
    assert exam_page.inner_text("#patient-decision .outcome-headline") == "Retake: the patient cannot be screened yet"
    assert exam_page.inner_text("#eye-right .outcome-headline") == "No photograph of this eye"
    assert exam_page.locator("#eye-left .eye-decision").get_attribute("data-outcome") == "no_referable_dr"
    screenshot(exam_page, tmp_path, "exam-one-eye.png")


def test_each_photograph_states_its_uncertainty_as_the_server_decided_it(
    exam_page: Any, service: str, images: dict[str, bytes]
) -> None:
    choose(exam_page, "right", images["grader_review_uncertain"])
    choose(exam_page, "left", images["no_referable_dr"])
    exam_page.click("#analyse-exam")
    exam_page.wait_for_selector("#patient-decision", timeout=30_000)
    assert exam_page.locator("#patient-decision").get_attribute("data-outcome") == "grader_review_uncertain"
    right = exam_page.locator("#eye-right .exam-photo .meta").first.inner_text()
    left = exam_page.locator("#eye-left .exam-photo .meta").first.inner_text()
    assert right.startswith("Uncertainty: high: ") and "above the grader-review threshold" in right
    assert left.startswith("Uncertainty: low: ") and "at or below the grader-review threshold" in left


def test_an_uncertain_exam_shows_an_estimate_never_a_finding(
    exam_page: Any, service: str, images: dict[str, bytes]
) -> None:
    """The uncertain photograph's number is worded as on the single-image page: an uncertain estimate, not a
    finding, without the decision threshold beside it and not in bold (a reader could take 40 % > 6.5 % as
    "refer")."""
    right, left = images["grader_review_uncertain"], images["no_referable_dr"]
    choose(exam_page, "right", right)
    choose(exam_page, "left", left)
    exam_page.click("#analyse-exam")
    exam_page.wait_for_selector("#patient-decision", timeout=30_000)
    body = exam_json(service, right, left)
    assert body["outcome"] == "grader_review_uncertain"
    p = body["images"][0]["result"]["diagnosis"]["referable_dr_probability"]
    uncertain = exam_page.locator("#eye-right .photo-probability")
    words = uncertain.inner_text()
    assert words == body["images"][0]["result"]["words"]["probability"]
    assert words == f"{100 * p:.1f} % — the model's uncertain estimate, not a finding (a grader decides)"
    assert "threshold" not in words and "Referable-DR probability" not in words
    assert int(uncertain.evaluate("e => getComputedStyle(e).fontWeight")) < 600
    certain = exam_page.locator("#eye-left .photo-probability")  # the certain eye keeps its finding
    assert certain.inner_text().startswith("Referable-DR probability ")
    assert int(certain.evaluate("e => getComputedStyle(e).fontWeight")) >= 600
    assert exam_page.inner_text("#patient-decision small") == body["outcome_reason"]
    assert "retake" not in body["outcome_reason"]


@pytest.mark.parametrize(("left", "needed"), [
    ("retake_ungradable", "retake the left-eye photograph (not gradable)"),
    (None, "photograph the left eye (none was sent)"),
])
def test_a_grader_review_headline_names_the_retake_of_the_other_eye(
    exam_page: Any, service: str, images: dict[str, bytes], left: str | None, needed: str
) -> None:
    """Right eye uncertain, left eye ungradable (or not sent): the patient line under the headline says the
    left eye must still be photographed, word for word as the API (and exams.csv) say it."""
    right_bytes, left_bytes = images["grader_review_uncertain"], images[left] if left else None
    choose(exam_page, "right", right_bytes)
    if left_bytes:
        choose(exam_page, "left", left_bytes)
    exam_page.click("#analyse-exam")
    exam_page.wait_for_selector("#patient-decision", timeout=30_000)
    body = exam_json(service, right_bytes, left_bytes)
    assert body["outcome"] == "grader_review_uncertain" and body["eyes"]["left"]["outcome"] == "retake_ungradable"
    patient = exam_page.inner_text("#patient-decision")
    assert exam_page.inner_text("#patient-decision .outcome-headline") == "Human grader review needed before a decision"
    assert exam_page.inner_text("#patient-decision small") == body["outcome_reason"] == (
        "Human grader review: the model is uncertain about at least one photograph (right eye); " + needed + ".")
    assert needed in patient


def test_single_image_page_accepts_dicom(browser: Any, service: str) -> None:
    with open_page(browser, service + "/") as pg:
        assert "DICOM (.dcm)" in pg.inner_text("#drop-help")
        accept = (pg.get_attribute("#file-input", "accept") or "").split(",")
        assert "application/dicom" in accept and ".dcm" in accept


def test_single_image_page_links_to_the_exam_page(browser: Any, service: str) -> None:
    context = browser.new_context()
    pg = context.new_page()
    pg.goto(service + "/")
    pg.click("text=Screen a patient")
    pg.wait_for_selector("#exam-form")
    assert pg.url.endswith("/exam")
    context.close()
