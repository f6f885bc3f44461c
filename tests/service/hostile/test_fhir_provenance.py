"""Round three, ``POST /v1/fhir`` provenance: a document is rendered only as the loaded model's own.

The finding: with p 0.97, a forged decision threshold of 0.99 and a model sha256 of zeros, the endpoint
returned a DiagnosticReport saying ``no_referable_dr`` from a Device carrying that sha. Now every field of the
posted ``model`` and both thresholds must equal the loaded model's, or the answer is a 422 naming the fields
that differ (real uvicorn on 127.0.0.1).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.images import fundus_png
from support.live_server import live_server, settings_for


@pytest.fixture(scope="module")
def server(tiny_artifact: Path) -> Iterator[str]:
    with live_server(settings_for(tiny_artifact)) as base:
        yield base


@pytest.fixture(scope="module")
def document(server: str) -> dict[str, Any]:
    response = httpx.post(f"{server}/v1/predict", files={"image": ("e.png", fundus_png(seed=3), "image/png")},
                          timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json())


def render(server: str, doc: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server}/v1/fhir", json=doc, timeout=30)


def refused(response: httpx.Response, *fields: str) -> None:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["type"].endswith("/validation-error")
    assert "not made by the loaded model" in body["detail"]
    assert [".".join(e["loc"][1:]) for e in body["errors"]] == list(fields)
    assert "resourceType" not in response.text  # nothing of a report was rendered


def forged_clear(doc: dict[str, Any]) -> dict[str, Any]:
    """The issue's forgery: p 0.97 under a threshold of 0.99, certain and gradable, stated no_referable_dr."""
    out = copy.deepcopy(doc)
    out["diagnosis"].update(referable_dr_probability=0.97, decision_threshold=0.99, label="non_referable")
    out["uncertainty"].update(mutual_information=0.0, predictive_entropy=0.0, expected_entropy=0.0)
    out["quality"].update(gradable=True, score=0.8, issues=[])
    out.update(refer_to_expert=False, referral_reasons=[], outcome="no_referable_dr",
               outcome_reason="No referable diabetic retinopathy")
    out["model"]["sha256"] = "0" * 64
    return out


def test_the_loaded_models_own_document_renders(server: str, document: dict[str, Any]) -> None:
    response = render(server, document)
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/fhir+json")
    device = next(e["resource"] for e in response.json()["entry"] if e["resource"]["resourceType"] == "Device")
    assert device["identifier"][0]["value"] == document["model"]["sha256"]


def test_forged_threshold_and_sha_are_refused_not_rendered(server: str, document: dict[str, Any]) -> None:
    refused(render(server, forged_clear(document)), "model.sha256", "diagnosis.decision_threshold")


@pytest.mark.parametrize(("path", "value"), [
    (("model", "name"), "some-other-model"),
    (("model", "version"), "9.9.9"),
    (("model", "mc_samples"), 1),
    (("model", "head_draws"), 4096),
    (("model", "training_data"), "real: 10 million clinically validated eyes"),
    (("model", "intended_use"), "Clinical diagnosis without human review"),
    (("diagnosis", "decision_threshold"), 0.99),
    (("uncertainty", "referral_threshold_mi"), 0.693),
])
def test_each_provenance_field_must_match(server: str, document: dict[str, Any], path: tuple[str, str],
                                          value: Any) -> None:
    doc = copy.deepcopy(document)
    doc[path[0]][path[1]] = value
    refused(render(server, doc), ".".join(path))


def test_a_consistent_forgery_under_the_real_thresholds_is_still_checked(server: str,
                                                                         document: dict[str, Any]) -> None:
    """With the loaded model's thresholds and sha the outcome is re-derived from them: a stated outcome that
    they contradict stays a 422 (the earlier rule), so no combination renders a forged outcome."""
    doc = forged_clear(document)
    doc["model"]["sha256"] = document["model"]["sha256"]
    doc["diagnosis"]["decision_threshold"] = document["diagnosis"]["decision_threshold"]
    assert document["diagnosis"]["decision_threshold"] < 0.97  # so 0.97 is referable under the real threshold
    response = render(server, doc)
    assert response.status_code == 422 and "contradicts" in response.json()["detail"]
