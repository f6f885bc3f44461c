"""The HTTP service end to end: real uvicorn on 127.0.0.1, driven by httpx."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.http.schemas import ModelIdentity, PredictionResponse, Timing
from service.inference.loading import load_scorer
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from support.images import encode, fundus_like
from support.live_server import live_server, settings_for, wait_until_ready
from tests.helpers.gated_scorer import GatedScorer

VOLATILE = ("request_id", "timing_ms")


@pytest.fixture(scope="module")
def server(tiny_artifact: Path) -> Iterator[str]:
    with live_server(settings_for(tiny_artifact)) as base:
        yield base


def stable(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in VOLATILE}


def metric_samples(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{base}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_predict_multipart_and_raw_give_the_design_body(server: str) -> None:
    png = encode(fundus_like(3))
    r = httpx.post(
        f"{server}/v1/predict", files={"image": ("eye.png", png, "image/png")}, data={"study_id": "study-0042"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == set(PredictionResponse.model_fields)  # the documented schema (OpenAPI), every field
    assert body["study_id"] == "study-0042" and body["request_id"] == r.headers["x-request-id"]
    assert list(body["model"]) == list(ModelIdentity.model_fields)  # in the documented order
    assert body["model"]["name"] == "tiny-radial-test" and body["model"]["mc_samples"] == 16
    assert 0 <= body["diagnosis"]["referable_dr_probability"] <= 1
    assert body["uncertainty"]["unit"] == "nat" and body["uncertainty"]["mutual_information"] >= 0
    assert set(body["timing_ms"]) == set(Timing.model_fields)
    assert body["quality"]["gradable"] is True
    assert body["refer_to_expert"] == bool(body["referral_reasons"])
    raw = httpx.post(f"{server}/predict?study_id=abc", content=png, headers={"Content-Type": "image/png"})
    assert raw.status_code == 200
    assert stable(raw.json()) == {**stable(body), "study_id": "abc"}


def test_non_fundus_image_is_referred_for_quality(server: str) -> None:
    import numpy as np

    grey = np.full((128, 128, 3), 128, np.uint8)
    body = httpx.post(f"{server}/v1/predict", content=encode(grey), headers={"Content-Type": "image/png"}).json()
    assert body["quality"]["gradable"] is False and "no_field_of_view" in body["quality"]["issues"]
    assert body["refer_to_expert"] is True and "image_quality" in body["referral_reasons"]
    assert body["outcome"] == "retake_ungradable"
    details = body["quality"]["details"]  # each issue explained: the measure, its value, the threshold missed
    assert {d["issue"] for d in details} == set(body["quality"]["issues"])
    for d in details:
        assert (d["value"] < d["threshold"]) if d["relation"] == ">=" else (d["value"] > d["threshold"]), d
        assert d["message"].startswith(f"{d['issue']}: {d['measure']} ") and f"needs {d['relation']}" in d["message"]


def test_an_ungradable_upload_is_labelled_not_graded(server: str) -> None:
    """A blank dark-grey JPEG is ungradable: its label says so, never "non_referable" (nothing was graded)."""
    import numpy as np

    grey = encode(np.full((256, 256, 3), 90, np.uint8), "JPEG", quality=90)  # not 128: a truncated JPEG's fill
    r = httpx.post(f"{server}/v1/predict", content=grey, headers={"Content-Type": "image/jpeg"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["quality"]["gradable"] is False and body["outcome"] == "retake_ungradable"
    assert body["diagnosis"]["label"] == "not_graded"
    metrics = httpx.get(f"{server}/metrics").text
    assert any(line.startswith('radscreen_predictions_total{label="not_graded"}') and float(line.split()[-1]) >= 1
               for line in metrics.splitlines())


def test_batch_keeps_order_and_isolates_bad_items(server: str) -> None:
    files = [
        ("image", ("a.png", encode(fundus_like(1)), "image/png")),
        ("image", ("b.bin", b"\x89PNG\r\n\x1a\nbroken", "image/png")),
        ("image", ("c.png", encode(fundus_like(2)), "image/png")),
    ]
    r = httpx.post(f"{server}/v1/predict/batch", files=files, data={"study_id": ["s1", "s2", "s3"]})
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert [i["index"] for i in items] == [0, 1, 2] and [i["filename"] for i in items] == ["a.png", "b.bin", "c.png"]
    assert items[1]["result"] is None
    assert items[1]["problem"]["type"].endswith("/undecodable-image") and items[1]["problem"]["status"] == 400
    for item, seed, sid in ((items[0], 1, "s1"), (items[2], 2, "s3")):
        alone = httpx.post(
            f"{server}/v1/predict", content=encode(fundus_like(seed)), headers={"Content-Type": "image/png"}
        ).json()
        assert item["result"]["study_id"] == sid
        assert item["result"]["diagnosis"]["referable_dr_probability"] == pytest.approx(
            alone["diagnosis"]["referable_dr_probability"], abs=1e-6
        )
    mismatch = httpx.post(f"{server}/v1/predict/batch", files=files[:2], data={"study_id": ["only-one"]})
    assert mismatch.status_code == 422 and mismatch.json()["type"].endswith("/validation-error")


def test_concurrent_requests_are_batched_and_answer_like_single_requests(tiny_artifact: Path) -> None:
    # its own server with a 1 s batch window: with the shared 30 ms one, a loaded CI machine decoding
    # 24 uploads on 2 workers can deliver them further apart than the window, and every forward is single
    with live_server(settings_for(tiny_artifact, max_wait_ms=1000.0)) as server:
        _concurrent_batched_equal_single(server)


def _concurrent_batched_equal_single(server: str) -> None:
    images = [encode(fundus_like(100 + i)) for i in range(24)]
    before = metric_samples(server)

    async def fire() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server, timeout=60) as client:
            return await asyncio.gather(
                *(client.post("/v1/predict", content=img, headers={"Content-Type": "image/png"}) for img in images)
            )

    together = asyncio.run(fire())
    assert all(r.status_code == 200 for r in together)
    after = metric_samples(server)
    batches = after[("radscreen_batch_size_count", ())] - before[("radscreen_batch_size_count", ())]
    singles = (
        after[("radscreen_batch_size_bucket", (("le", "1.0"),))]
        - before[("radscreen_batch_size_bucket", (("le", "1.0"),))]
    )
    assert batches < 24 and singles < batches  # some forwards carried more than one image
    for img, r in zip(images, together, strict=True):
        alone = httpx.post(f"{server}/v1/predict", content=img, headers={"Content-Type": "image/png"}).json()
        for key in ("referable_dr_probability",):
            assert r.json()["diagnosis"][key] == pytest.approx(alone["diagnosis"][key], abs=1e-6)
        assert r.json()["uncertainty"]["mutual_information"] == pytest.approx(
            alone["uncertainty"]["mutual_information"], abs=1e-6
        )


def test_same_image_same_json_across_app_instances(tiny_artifact: Path, server: str) -> None:
    png = encode(fundus_like(7))
    first = httpx.post(f"{server}/v1/predict", content=png, headers={"Content-Type": "image/png"}).json()
    with live_server(settings_for(tiny_artifact, max_wait_ms=0.0)) as other:
        second = httpx.post(f"{other}/v1/predict", content=png, headers={"Content-Type": "image/png"}).json()
    assert stable(first) == stable(second)


def test_model_health_and_metrics(server: str) -> None:
    model = httpx.get(f"{server}/v1/model").json()
    assert model["model"]["name"] == "tiny-radial-test" and "Tiny test model" in model["model_card"]
    assert model["calibration"]["referral_threshold_mi"] == pytest.approx(0.002)
    assert model["preprocessing"]["input_size"] == 64
    assert model["runtime"]["backend"] == "onnxruntime"  # backend=auto, fp32, CPU
    assert httpx.get(f"{server}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{server}/readyz").json()["status"] == "ready"
    before = metric_samples(server)
    httpx.post(f"{server}/v1/predict", content=encode(fundus_like(9)), headers={"Content-Type": "image/png"})
    httpx.post(f"{server}/v1/predict", content=b"junk", headers={"Content-Type": "image/png"})
    after = metric_samples(server)
    key_ok = ("radscreen_requests_total", (("endpoint", "/v1/predict"), ("status", "200")))
    key_bad = ("radscreen_requests_total", (("endpoint", "/v1/predict"), ("status", "415")))
    assert after[key_ok] == before.get(key_ok, 0) + 1 and after[key_bad] == before.get(key_bad, 0) + 1
    assert after[("radscreen_probability_count", ())] == before[("radscreen_probability_count", ())] + 1
    assert after[("radscreen_ready", ())] == 1.0
    info = [k for k in after if k[0] == "radscreen_model_info"]
    assert len(info) == 1 and dict(info[0][1])["name"] == "tiny-radial-test"
    names = {k[0] for k in after}
    for name in (
        "radscreen_request_latency_seconds_bucket",
        "radscreen_queue_wait_seconds_count",
        "radscreen_inference_seconds_count",
        "radscreen_queue_depth",
        "radscreen_predictions_total",
        "radscreen_referrals_total",
        "radscreen_outcomes_total",
        "radscreen_mutual_information_count",
    ):
        assert name in names, name


def test_fhir_output_is_negotiated(server: str) -> None:
    pytest.importorskip("service.interop.fhir")
    png = encode(fundus_like(4))
    r = httpx.post(f"{server}/v1/predict?format=fhir", content=png, headers={"Content-Type": "image/png"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/fhir+json")
    assert r.json()["resourceType"] == "Bundle"
    r2 = httpx.post(
        f"{server}/v1/predict", content=png, headers={"Content-Type": "image/png", "Accept": "application/fhir+json"}
    )
    assert r2.json()["resourceType"] == "Bundle"


def test_dashboard_and_openapi(server: str) -> None:
    page = httpx.get(f"{server}/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    spec = httpx.get(f"{server}/openapi.json").json()
    post = spec["paths"]["/v1/predict"]["post"]
    assert {"multipart/form-data", "image/png"} <= set(post["requestBody"]["content"])
    assert {"400", "413", "415", "422", "503"} <= set(post["responses"])
    assert "examples" in spec["components"]["schemas"]["PredictionResponse"]


def test_api_key_and_cors(tiny_artifact: Path) -> None:
    settings = settings_for(tiny_artifact, api_key="s3cret", cors_origins=["https://dash.example"])
    with live_server(settings) as base:
        png = encode(fundus_like(5))
        missing = httpx.post(f"{base}/v1/predict", content=png, headers={"Content-Type": "image/png"})
        assert missing.status_code == 401 and missing.json()["type"].endswith("/unauthorized")
        assert "Missing" in missing.json()["detail"]
        wrong = httpx.post(
            f"{base}/v1/predict", content=png, headers={"Content-Type": "image/png", "X-API-Key": "nope"}
        )
        assert wrong.status_code == 401 and "does not match" in wrong.json()["detail"]
        ok = httpx.post(f"{base}/v1/predict", content=png, headers={"Content-Type": "image/png", "X-API-Key": "s3cret"})
        assert ok.status_code == 200
        assert httpx.get(f"{base}/v1/model").status_code == 401
        for open_path in ("/healthz", "/readyz", "/metrics"):
            assert httpx.get(f"{base}{open_path}").status_code == 200
        pre = httpx.options(
            f"{base}/v1/predict",
            headers={
                "Origin": "https://dash.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "x-api-key,content-type",
            },
        )
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "https://dash.example"
        assert "x-api-key" in pre.headers["access-control-allow-headers"].lower()
        evil = httpx.options(
            f"{base}/v1/predict", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in evil.headers


def test_overload_answers_503_with_retry_after(tiny_artifact: Path) -> None:
    holder: dict[str, GatedScorer] = {}

    def factory(spec: ScorerSpec) -> Scorer:
        holder["s"] = GatedScorer(load_scorer(spec))
        return holder["s"]

    settings = settings_for(tiny_artifact, max_batch_size=1, queue_size=1, max_wait_ms=0.0)
    with live_server(settings, scorer_factory=factory) as base:
        png = encode(fundus_like(6))

        async def scenario() -> tuple[httpx.Response, ...]:
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                post = lambda: client.post("/v1/predict", content=png, headers={"Content-Type": "image/png"})  # noqa: E731
                first = asyncio.ensure_future(post())
                entered = await asyncio.to_thread(holder["s"].entered.wait, 60)
                assert entered, "the first image never reached the forward"
                second = asyncio.ensure_future(post())
                deadline = time.monotonic() + 60
                while metric_samples(base)[("radscreen_queue_depth", ())] < 1:  # second waits in the queue
                    assert time.monotonic() < deadline, "the second image never reached the queue"
                    await asyncio.sleep(0.01)
                third = await post()
                holder["s"].gate.set()
                return third, await first, await second

        third, first, second = asyncio.run(scenario())
        assert third.status_code == 503 and int(third.headers["retry-after"]) >= 1
        assert third.json()["type"].endswith("/overloaded") and "queue is full" in third.json()["detail"]
        assert first.status_code == second.status_code == 200


def test_readiness_before_and_after_load(tiny_artifact: Path, tmp_path: Path) -> None:
    release = threading.Event()

    def slow_factory(spec: ScorerSpec) -> Scorer:
        assert release.wait(60)
        return load_scorer(spec)

    with live_server(settings_for(tiny_artifact), scorer_factory=slow_factory, wait_ready=False) as base:
        assert httpx.get(f"{base}/healthz").status_code == 200
        loading = httpx.get(f"{base}/readyz")
        assert loading.status_code == 503 and loading.json()["status"] == "loading"
        early = httpx.post(f"{base}/v1/predict", content=encode(fundus_like(1)), headers={"Content-Type": "image/png"})
        assert early.status_code == 503 and early.json()["type"].endswith("/not-ready")
        assert "retry-after" in early.headers
        assert metric_samples(base)[("radscreen_ready", ())] == 0.0
        release.set()
        wait_until_ready(base)
        assert httpx.get(f"{base}/readyz").json()["status"] == "ready"

    with live_server(settings_for(tmp_path / "missing"), wait_ready=False) as base:
        for _ in range(200):
            body = httpx.get(f"{base}/readyz").json()
            if body["status"] != "loading":
                break
            asyncio.run(asyncio.sleep(0.02))
        assert body["status"] == "failed" and "does not exist" in body["detail"]
