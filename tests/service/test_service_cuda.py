"""The service answering on CUDA (``gpu``: skipped without a CUDA device): a real server, a real JPEG."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.inference.spec import BackendSetting
from support.images import synthetic_jpegs
from support.live_server import live_server, settings_for
from tests.helpers.gpu import GPU

pytestmark = GPU


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_the_service_scores_on_cuda_and_says_so(backend: BackendSetting, tiny_artifact: Path) -> None:
    from models.onnx_backend import ProviderFallbackError
    from service.inference.loading import load_scorer
    from service.inference.spec import ScorerSpec

    if backend == "onnxruntime":
        try:
            load_scorer(ScorerSpec(model_dir=tiny_artifact, backend=backend, device="cuda", precision="fp32"))
        except ProviderFallbackError as exc:
            pytest.skip(f"onnxruntime's CUDA provider does not load here: {exc}")
    settings = settings_for(tiny_artifact, device="cuda", backend=backend, precision="fp32")
    with live_server(settings) as base, httpx.Client(base_url=base, timeout=120) as client:
        runtime = client.get("/v1/model").json()["runtime"]
        assert (runtime["device"], runtime["backend"], runtime["precision"]) == ("cuda", backend, "fp32")
        r = client.post("/v1/predict", content=synthetic_jpegs(1, 256, seed=1)[0],
                        headers={"Content-Type": "image/jpeg"})
        assert r.status_code == 200, r.text
        assert 0.0 <= r.json()["diagnosis"]["referable_dr_probability"] <= 1.0
