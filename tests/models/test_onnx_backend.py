"""ONNX Runtime backend: agreement with the torch DrawnNetwork, and a graph that carries no weights."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, numpy_helper

from models.nn.draws import DrawnNetwork, materialise_draws
from models.nn.sampling import seeded
from models.nn.vgg import VGGConfig, build_vgg16_star, mc_logits
from models.serving.onnx_backend import (
    EXTERNAL_LOCATION,
    OnnxDrawnSession,
    build_onnx_graph,
    export_graph,
    weight_shapes,
)

Activation = Literal["leaky_relu", "relu"]


@cache
def tiny_net(activation: Activation, k: int, strategy: str = "grouped") -> DrawnNetwork:
    torch.manual_seed(0)
    # rho_init -3 (σ ≈ 0.05) so that the K draws differ visibly in their logits.
    model = build_vgg16_star(VGGConfig(width=4, input_size=64, activation=activation, rho_init=-3.0))
    return materialise_draws(model, mc_samples=k, seed=11, strategy=strategy)


def images(batch: int, size: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)


def baked_bytes(model: onnx.ModelProto) -> int:
    """Bytes of tensor data stored inside the graph file itself."""
    inside = [t for t in model.graph.initializer if t.data_location != TensorProto.EXTERNAL]
    return sum(numpy_helper.to_array(t).nbytes for t in inside)


@pytest.mark.parametrize("activation", ["leaky_relu", "relu"])
@pytest.mark.parametrize("k", [4, 16])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("strategy", ["grouped", "loop"])
def test_onnx_matches_torch_drawn_network(activation: Activation, k: int, batch: int, strategy: str) -> None:
    net = tiny_net(activation, k)
    x = images(batch)
    expected = net(torch.from_numpy(x)).numpy()  # [K, B, O]
    got = OnnxDrawnSession(net, intra_op_threads=1, strategy=strategy).run(x)
    assert got.shape == (k, batch, 1) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
    assert np.ptp(expected[:, 0, 0]) > 1e-2  # the K draws disagree, so the comparison is per draw


def test_onnx_matches_the_seeded_reference_loop() -> None:
    """ORT == the Bayesian model's own seeded K-sample forward (the 16-pass reference), per draw."""
    torch.manual_seed(0)
    model = build_vgg16_star(VGGConfig(width=4, input_size=64, rho_init=-3.0)).eval()
    x = images(2, seed=3)
    with torch.no_grad(), seeded(model, 5):
        reference = mc_logits(model, torch.from_numpy(x), 16).numpy()  # [S, B, O]
    net = materialise_draws(model, mc_samples=16, seed=5, strategy="loop")
    np.testing.assert_allclose(OnnxDrawnSession(net).run(x), reference, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("strategy", ["grouped", "loop"])
def test_head_draws_match_torch_draw_for_draw(strategy: str, tmp_path: Path) -> None:
    """M head draws per network draw: ORT returns the same [K·M, B, O] logits, in the same (draw-major) order."""
    torch.manual_seed(0)
    model = build_vgg16_star(VGGConfig(width=4, input_size=64, rho_init=-3.0)).eval()
    net = materialise_draws(model, mc_samples=3, seed=2, head_draws=8)
    x = images(4, seed=1)
    expected = net(torch.from_numpy(x)).numpy()
    got = OnnxDrawnSession(net, intra_op_threads=1, strategy=strategy).run(x)
    assert got.shape == (24, 4, 1)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
    assert np.ptp(expected[:8, 0, 0]) > 1e-3  # the head draws of one network draw really differ
    graph = onnx.load(str(export_graph(net, tmp_path / "g.onnx", strategy)), load_external_data=False)
    dims = [d.dim_value or d.dim_param for d in graph.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [24, "batch", 1]
    with pytest.raises(ValueError, match=r"does not fit this DrawnNetwork \(K=3, M=1\)"):
        OnnxDrawnSession(materialise_draws(model, mc_samples=3, seed=2), graph=tmp_path / "g.onnx", strategy=strategy)


def test_dynamic_batch_and_image_size() -> None:
    net = tiny_net("leaky_relu", 4)
    session = OnnxDrawnSession(net)
    for batch, size in [(2, 64), (5, 96)]:
        x = images(batch, size)
        np.testing.assert_allclose(session.run(x), net(torch.from_numpy(x)).numpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("strategy", ["grouped", "loop"])
def test_graph_carries_no_weights(strategy: str) -> None:
    net = tiny_net("leaky_relu", 16)
    model = build_onnx_graph(net, strategy)
    assert baked_bytes(model) < 64  # only the reshape target [0, K, -1] / the stacking axis
    external = {t.name: t for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    assert {n: tuple(t.dims) for n, t in external.items()} == weight_shapes(net, strategy)
    assert sum(int(np.prod(t.dims)) for t in external.values()) == sum(p.numel() for p in net.buffers())
    for t in external.values():
        assert not t.raw_data and not t.float_data
        assert {e.key: e.value for e in t.external_data} == {"location": EXTERNAL_LOCATION}
    assert [i.name for i in model.graph.input] == ["images"]  # the weights are not inputs either
    assert model.opset_import[0].version >= 17


def test_exported_graph_is_small_and_runs_with_injected_weights(tmp_path: Path) -> None:
    net = tiny_net("relu", 4)
    path = export_graph(net, tmp_path / "graph.onnx")
    assert path.stat().st_size < 16_000
    x = images(2)
    np.testing.assert_allclose(OnnxDrawnSession(net, graph=path).run(x), net(torch.from_numpy(x)).numpy(),
                               atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="does not fit this DrawnNetwork"):
        OnnxDrawnSession(tiny_net("relu", 16), graph=path)
    with pytest.raises(ValueError, match="does not fit this DrawnNetwork"):
        OnnxDrawnSession(net, graph=path, strategy="loop")
    with pytest.raises(ValueError, match="Unknown ONNX graph strategy 'unrolled'"):
        build_onnx_graph(net, "unrolled")


def test_full_width_graph_is_under_a_megabyte(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = build_vgg16_star(VGGConfig(width=46, input_size=64))
    net = materialise_draws(model, mc_samples=16, seed=0)  # ≈ 490 MB of drawn weights in memory
    path = export_graph(net, tmp_path / "graph.onnx")
    assert path.stat().st_size < 1_000_000
    drawn_bytes = sum(4 * int(np.prod(s)) for s in weight_shapes(net).values())
    assert drawn_bytes > 400_000_000  # what a baked-in graph would have weighed


def test_run_rejects_wrong_inputs() -> None:
    session = OnnxDrawnSession(tiny_net("leaky_relu", 4))
    with pytest.raises(TypeError, match="float32"):
        session.run(images(1).astype(np.float64))
    with pytest.raises(ValueError, match=r"\[B, 3, H, W\]"):
        session.run(images(1)[:, :2])


def test_unavailable_provider_is_named() -> None:
    with pytest.raises(ValueError, match="NoSuchExecutionProvider"):
        OnnxDrawnSession(tiny_net("leaky_relu", 4), providers=["NoSuchExecutionProvider"])


def test_default_providers_follow_the_device() -> None:
    session = OnnxDrawnSession(tiny_net("leaky_relu", 4), device="cpu")
    assert session.providers == ["CPUExecutionProvider"]
    assert session.active_providers == ["CPUExecutionProvider"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback; a CUDA machine activates CUDA")
def test_a_cuda_request_that_falls_back_to_the_cpu_fails_at_start() -> None:
    """onnxruntime-gpu lists CUDA as available on any machine; without a usable GPU the session would run
    on the CPU while the service reports cuda. It must refuse instead, naming what actually runs."""
    import onnxruntime as ort

    from models.serving.onnx_backend import ProviderFallbackError

    assert "CUDAExecutionProvider" in ort.get_available_providers()  # the build claims CUDA ...
    with pytest.raises(ProviderFallbackError, match=r"could not activate CUDAExecutionProvider.*CPUExecutionProvider"):
        OnnxDrawnSession(tiny_net("leaky_relu", 4), device="cuda", intra_op_threads=1)  # ... the session lacks it
    assert OnnxDrawnSession(tiny_net("leaky_relu", 4), device="cpu", intra_op_threads=1).active_providers == [
        "CPUExecutionProvider"]


def test_the_onnx_backend_reports_no_device_it_does_not_run_on() -> None:
    from models.serving.onnx_backend import ProviderFallbackError
    from service.inference.backends import OnnxBackend

    if torch.cuda.is_available():
        pytest.skip("checks the CPU fallback; a CUDA machine activates CUDA")
    with pytest.raises(ProviderFallbackError):
        OnnxBackend(tiny_net("leaky_relu", 4), device="cuda", precision="fp32")


def test_the_cuda_provider_runs_ieee_fp32() -> None:
    """ORT's CUDA provider allows TF32 by default; the session asks for use_tf32=0."""
    from models.serving.onnx_backend import _provider_options

    assert _provider_options(["CUDAExecutionProvider", "CPUExecutionProvider"]) == [{"use_tf32": "0"}, {}]
    assert _provider_options(["CPUExecutionProvider"]) == [{}]
