"""The service answering on CUDA (``gpu``: skipped without a CUDA device): a real server, a real JPEG."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.inference.spec import BackendSetting
from support.images import synthetic_jpegs
from tests.helpers.gpu import GPU, ort_cuda_or_skip

pytest.importorskip("uvicorn", reason="the web stack (uvicorn, FastAPI) is not installed: the live-server test "
                                      "needs it; the other gpu tests run without it")
import httpx

from support.live_server import live_server, settings_for

pytestmark = GPU


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_the_service_scores_on_cuda_and_says_so(backend: BackendSetting, tiny_artifact: Path) -> None:
    from service.inference.loading import load_scorer
    from service.inference.spec import ScorerSpec

    if backend == "onnxruntime":  # a CPU onnxruntime (a lease's node) or one whose CUDA libraries do not load
        ort_cuda_or_skip(lambda: load_scorer(ScorerSpec(model_dir=tiny_artifact, backend=backend, device="cuda",
                                                        precision="fp32")))
    settings = settings_for(tiny_artifact, device="cuda", backend=backend, precision="fp32")
    with live_server(settings) as base, httpx.Client(base_url=base, timeout=120) as client:
        runtime = client.get("/v1/model").json()["runtime"]
        assert (runtime["device"], runtime["backend"], runtime["precision"]) == ("cuda", backend, "fp32")
        r = client.post("/v1/predict", content=synthetic_jpegs(1, 256, seed=1)[0],
                        headers={"Content-Type": "image/jpeg"})
        assert r.status_code == 200, r.text
        assert 0.0 <= r.json()["diagnosis"]["referable_dr_probability"] <= 1.0
