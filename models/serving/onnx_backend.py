"""ONNX Runtime backend for the serving form: K fixed posterior draws as one weight-free ONNX graph.

The graph is built with ``onnx.helper`` straight from :attr:`DrawnNetwork.plan`, mirroring the grouped
torch strategy:

* the first convolution runs K·out filters on the image ``[B, C, H, W]`` (group = 1), every later one is a
  grouped convolution (group = K) over ``[B, K·C, H, W]`` — draw d owns channels ``d·C … (d+1)·C − 1``;
* LeakyRelu / Relu, MaxPool 2×2;
* global pooling: ReduceMean and ReduceMax over H, W, reshaped to ``[B, K, C]``, concatenated (mean first,
  as :class:`models.nn.layers.GlobalMeanMaxPool`) and transposed to ``[K, B, 2C]``;
* each linear layer is one batched MatMul ``[K, B, F] @ [K, F, O] + [K, 1, O]``; output logits ``[K, B, O]``;
* with M head draws per network draw (:class:`models.nn.draws.DrawnNetwork`) the last MatMul has M·O outputs
  and a Reshape–Transpose–Reshape tail turns ``[K, B, M·O]`` into ``[K·M, B, O]`` (draw-major, as torch).

``strategy="loop"`` instead unrolls K independent branches of ordinary convolutions (one per draw, each
with its own weights) and stacks their logits; on CPU, where grouped convolutions are slow at full width,
this can be the faster graph (``benchmarks/bench_core.py`` measures both).

**The drawn weights are not in the graph.** Every weight is declared as an initializer whose data is
*external* (a placeholder location, ``drawn-weights``, that never exists on disk), and the session
supplies the values from memory with ``SessionOptions.add_external_initializers``. The weights are
therefore constants to ONNX Runtime (it may pre-pack conv filters and fold shapes, which graph *inputs*
would forbid) while a saved graph stays a few KB instead of ≈460 MB at full size. The alternative —
declaring weights as graph inputs bound once through IOBinding — also works but hides the weights from the
optimiser; ``SessionOptions.add_initializer`` alone is not enough (ORT rejects a node input that the graph
does not declare).

Example::

    net = materialise_draws(model, mc_samples=16, seed=artifact.config.serving.draw_seed)
    session = OnnxDrawnSession(net, device="cpu", intra_op_threads=2)
    logits = session.run(images)        # np.float32 [B, C, H, W] -> [K, B, O]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper

from models.nn.draws import DrawnNetwork
from models.platform.cuda import ORT_CUDA_OPTIONS

OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17; ORT 1.31 reads up to 13
EXTERNAL_LOCATION = "drawn-weights"  # placeholder: the values are injected at session creation
INPUT_NAME = "images"
OUTPUT_NAME = "logits"
STRATEGIES = ("grouped", "loop")


def _external_initializer(name: str, shape: tuple[int, ...]) -> TensorProto:
    """A float32 initializer declared with external data: shape and name only, no bytes."""
    tensor = TensorProto()
    tensor.name = name
    tensor.data_type = TensorProto.FLOAT
    tensor.dims.extend(shape)
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", EXTERNAL_LOCATION
    return tensor


def weight_shapes(net: DrawnNetwork, strategy: str = "grouped") -> dict[str, tuple[int, ...]]:
    """Names and shapes of the injected weights, in graph order (see :func:`drawn_weights`)."""
    return {name: tuple(a.shape) for name, a in _weight_layouts(net, strategy, materialise=False).items()}


def drawn_weights(net: DrawnNetwork, strategy: str = "grouped") -> dict[str, np.ndarray]:
    """The drawn weights in the layouts the graph expects (fp32, C-contiguous, CPU).

    ``grouped``: ``conv{i}.weight`` [K·out, in, kh, kw], ``conv{i}.bias`` [K·out], ``linear{i}.weight_t``
    [K, in, out], ``linear{i}.bias`` [K, 1, out].  ``loop``: one set per draw d, ``conv{i}.d{d}.weight``
    [out, in, kh, kw], ``conv{i}.d{d}.bias`` [out], ``linear{i}.d{d}.weight_t`` [in, out],
    ``linear{i}.d{d}.bias`` [out].
    """
    return {name: np.ascontiguousarray(a) for name, a in _weight_layouts(net, strategy, materialise=True).items()}


def _weight_layouts(net: DrawnNetwork, strategy: str, *, materialise: bool) -> dict[str, Any]:
    """name -> the drawn array (``materialise``) or an untouched stand-in of the same shape."""
    if strategy not in STRATEGIES:
        raise ValueError(f"Unknown ONNX graph strategy {strategy!r}; expected one of: {', '.join(STRATEGIES)}")

    def host(t: torch.Tensor) -> Any:
        # np.empty reserves but never touches memory: reshapes/transposes below stay views, shapes only.
        return t.detach().float().cpu().numpy() if materialise else np.empty(tuple(t.shape), np.float32)

    out: dict[str, Any] = {}
    for i, conv in enumerate(net.convs):
        w, b = host(conv.weight), host(conv.bias)  # [K, out, in, kh, kw], [K, out]
        if strategy == "grouped":
            out[f"conv{i}.weight"], out[f"conv{i}.bias"] = w.reshape(-1, *w.shape[2:]), b.reshape(-1)
        else:
            for d in range(net.mc_samples):
                out[f"conv{i}.d{d}.weight"], out[f"conv{i}.d{d}.bias"] = w[d], b[d]
    for i, lin in enumerate(net.linears):
        w, b = host(lin.weight), host(lin.bias)  # [K, out, in], [K, out]
        if strategy == "grouped":
            out[f"linear{i}.weight_t"], out[f"linear{i}.bias"] = w.transpose(0, 2, 1), b[:, None, :]
        else:
            for d in range(net.mc_samples):
                out[f"linear{i}.d{d}.weight_t"], out[f"linear{i}.d{d}.bias"] = w[d].T, b[d]
    return out


def _plan_nodes(net: DrawnNetwork, strategy: str, draw: int | None) -> tuple[list[onnx.NodeProto], str]:
    """Nodes of one pass over the plan: all K draws (grouped, ``draw=None``) or draw ``draw`` alone.

    Grouped layout: [B, C, H, W] -> [B, K*C', H', W'] -> [K, B, F]; per-draw layout: [B, C', H', W'] ->
    [B, F]. Returns the nodes and the name of the last output.
    """
    k, grouped = net.mc_samples, draw is None
    tag = "" if grouped else f".d{draw}"
    nodes: list[onnx.NodeProto] = []
    h, replicated, pooled = INPUT_NAME, False, False
    for step, op in enumerate(net.plan):
        out = f"t{step}_{op[0]}{tag}"
        if op[0] == "conv":
            i = int(op[1])  # type: ignore[misc]
            conv = net.convs[i]
            kh, kw = conv.weight.shape[-2:]
            nodes.append(helper.make_node(
                "Conv", [h, f"conv{i}{tag}.weight", f"conv{i}{tag}.bias"], [out], name=f"conv{i}{tag}",
                group=k if grouped and replicated else 1, kernel_shape=[kh, kw], strides=[conv.stride] * 2,
                pads=[conv.padding] * 4,
            ))
            replicated = True
        elif op[0] == "act":
            if net.activation == "leaky_relu":
                nodes.append(helper.make_node("LeakyRelu", [h], [out], alpha=float(net.negative_slope)))
            else:
                nodes.append(helper.make_node("Relu", [h], [out]))
        elif op[0] == "pool":
            nodes.append(helper.make_node("MaxPool", [h], [out], kernel_shape=[2, 2], strides=[2, 2]))
        elif op[0] == "gpool":
            if not replicated:
                raise ValueError("build_onnx_graph: global pooling before any convolution is not supported")
            nodes += [
                helper.make_node("ReduceMean", [h], [f"{out}_mean"], axes=[2, 3], keepdims=0),  # [B, K*C]
                helper.make_node("ReduceMax", [h], [f"{out}_max"], axes=[2, 3], keepdims=0),
            ]
            if grouped:
                nodes += [
                    helper.make_node("Reshape", [f"{out}_mean", "gpool.shape"], [f"{out}_mean3"]),  # [B, K, C]
                    helper.make_node("Reshape", [f"{out}_max", "gpool.shape"], [f"{out}_max3"]),
                    helper.make_node("Concat", [f"{out}_mean3", f"{out}_max3"], [f"{out}_cat"], axis=2),
                    helper.make_node("Transpose", [f"{out}_cat"], [out], perm=[1, 0, 2]),  # [K, B, 2C]
                ]
            else:
                nodes.append(helper.make_node("Concat", [f"{out}_mean", f"{out}_max"], [out], axis=1))  # [B, 2C]
            pooled = True
        elif op[0] == "linear":
            if not pooled:
                raise ValueError("build_onnx_graph: a linear layer must follow global pooling")
            i = int(op[1])  # type: ignore[misc]
            nodes += [
                helper.make_node("MatMul", [h, f"linear{i}{tag}.weight_t"], [f"{out}_mm"], name=f"linear{i}{tag}"),
                helper.make_node("Add", [f"{out}_mm", f"linear{i}{tag}.bias"], [out]),  # [K, B, O] / [B, O]
            ]
        else:
            raise ValueError(f"build_onnx_graph: unknown plan op {op!r}")
        h = out
    if not pooled:
        raise ValueError("build_onnx_graph: the plan ends before global pooling; expected logits [K, B, O]")
    return nodes, h


def build_onnx_graph(net: DrawnNetwork, strategy: str = "grouped") -> onnx.ModelProto:
    """The weight-free ONNX graph (opset 17, dynamic batch and image size) of ``net``'s plan.

    ``grouped``: one network of grouped convolutions for all K draws; ``loop``: K independent branches of
    ordinary convolutions (ORT may run them in parallel with inter-op threads), stacked at the end.
    """
    k = net.mc_samples
    in_channels = net.convs[0].weight.shape[2]
    num_outputs = net.num_outputs
    inits = [_external_initializer(name, shape) for name, shape in weight_shapes(net, strategy).items()]
    m = net.head_draws
    stacked = OUTPUT_NAME if m == 1 else "logits_stacked"  # [K, B, M·O]
    if strategy == "grouped":
        inits.append(helper.make_tensor("gpool.shape", TensorProto.INT64, [3], [0, k, -1]))
        nodes, last = _plan_nodes(net, strategy, None)
        nodes.append(helper.make_node("Identity", [last], [stacked]))
    else:
        inits.append(helper.make_tensor("stack.axes", TensorProto.INT64, [1], [0]))
        nodes, lasts = [], []
        for d in range(k):
            branch, last = _plan_nodes(net, strategy, d)
            nodes += branch
            nodes.append(helper.make_node("Unsqueeze", [last, "stack.axes"], [f"{last}_1"]))  # [1, B, M·O]
            lasts.append(f"{last}_1")
        nodes.append(helper.make_node("Concat", lasts, [stacked], axis=0))  # [K, B, M·O]
    if m > 1:  # [K, B, M·O] -> [K, B, M, O] -> [K, M, B, O] -> [K·M, B, O]
        inits += [helper.make_tensor("heads.split", TensorProto.INT64, [4], [k, -1, m, num_outputs]),
                  helper.make_tensor("heads.merge", TensorProto.INT64, [3], [k * m, -1, num_outputs])]
        nodes += [helper.make_node("Reshape", [stacked, "heads.split"], ["logits_split"]),
                  helper.make_node("Transpose", ["logits_split"], ["logits_major"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", ["logits_major", "heads.merge"], [OUTPUT_NAME])]

    graph = helper.make_graph(
        nodes,
        f"radscreen_drawn_network_{strategy}",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", in_channels, "h", "w"])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [k * m, "batch", num_outputs])],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
        producer_name="radial-screen",
        doc_string=f"{k} fixed posterior draws x {m} head draws ({strategy}); weights injected at load",
    )
    _check_graph(model)
    return model


def _check_graph(model: onnx.ModelProto) -> None:
    """Run the ONNX checker; it insists external data exists on disk, so check a copy in which the
    injected weights are declared as graph inputs instead."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    external = [t for t in probe.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    for t in external:
        probe.graph.initializer.remove(t)
        probe.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    onnx.checker.check_model(probe, full_check=True)


def export_graph(net: DrawnNetwork, path: str | Path, strategy: str = "grouped") -> Path:
    """Write the weight-free graph (a few KB) for inspection or deployment; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(build_onnx_graph(net, strategy).SerializeToString())
    return path


def _load_graph(graph: onnx.ModelProto | str | Path, net: DrawnNetwork, strategy: str) -> onnx.ModelProto:
    """Read a weight-free graph and check that the weights it declares are exactly ``net``'s."""
    model = graph if isinstance(graph, onnx.ModelProto) else onnx.load(str(graph), load_external_data=False)
    declared = {
        t.name: tuple(t.dims) for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL
    }
    expected = weight_shapes(net, strategy)
    if declared != expected:
        wrong = sorted(set(declared.items()) ^ set(expected.items()))
        raise ValueError(
            f"ONNX graph does not fit this DrawnNetwork (K={net.mc_samples}, M={net.head_draws}): mismatched weights "
            f"{wrong[:4]}; export the graph from the same artifact, K and strategy"
        )
    return model


def default_providers(device: str) -> list[str]:
    """CUDA then CPU on a cuda device, else CPU only."""
    if device.startswith("cuda"):
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


class ProviderFallbackError(RuntimeError):
    """ONNX Runtime did not activate a provider that was asked for (e.g. CUDA fell back to the CPU)."""


def _provider_options(providers: list[str]) -> list[dict[str, str]]:
    """Per-provider options: the CUDA provider keeps fp32 in IEEE fp32 (its default allows TF32)."""
    return [dict(ORT_CUDA_OPTIONS) if p == "CUDAExecutionProvider" else {} for p in providers]


def check_active_providers(requested: list[str], active: list[str]) -> None:
    """Raise :class:`ProviderFallbackError` when a requested accelerator provider is not among the active ones.

    ``get_available_providers()`` lists what the build was compiled with (onnxruntime-gpu always lists
    CUDA); whether the CUDA libraries load and a device answers is only known once a session exists, and
    ORT then falls back to the CPU with a log line. A request for CUDA that gets the CPU is an error here.
    """
    missing = [p for p in requested if p != "CPUExecutionProvider" and p not in active]
    if missing:
        raise ProviderFallbackError(
            f"ONNX Runtime could not activate {', '.join(missing)} (the session runs on {', '.join(active)}): "
            "the CUDA/cuDNN libraries this onnxruntime-gpu build needs did not load or no GPU answered. "
            "Check that the CUDA major of the installed onnxruntime-gpu (onnxruntime.capi.build_and_package_info"
            ".cuda_version) matches the machine's libraries (docs/deploy.md), or use device cpu."
        )


class OnnxDrawnSession:
    """An ONNX Runtime session running all K draws of ``net`` in one call.

    The weights are copied out of ``net`` once (fp32) and injected as external initializers; this object
    keeps them alive for the session's lifetime, as ORT requires. Construction raises
    :class:`ProviderFallbackError` when a requested accelerator (CUDA) did not become active: ORT would
    otherwise run on the CPU while the caller believes it runs on the GPU. ``graph`` (a ModelProto or a file from
    :func:`export_graph`) replaces the graph built from ``net``; its declared weights must match ``net``.
    """

    def __init__(
        self,
        net: DrawnNetwork,
        *,
        providers: list[str] | None = None,
        device: str = "cpu",
        intra_op_threads: int | None = None,
        graph: onnx.ModelProto | str | Path | None = None,
        strategy: str = "grouped",
    ) -> None:
        self.mc_samples = net.mc_samples
        self.in_channels = int(net.convs[0].weight.shape[2])
        self.providers = providers or default_providers(device)
        available = set(ort.get_available_providers())
        missing = [p for p in self.providers if p not in available]
        if missing:
            raise ValueError(
                f"ONNX Runtime providers not available: {', '.join(missing)}; "
                f"this build offers: {', '.join(sorted(available))}"
            )
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if intra_op_threads is not None:
            options.intra_op_num_threads = intra_op_threads
        self.strategy = strategy
        self._arrays = drawn_weights(net, strategy)  # the OrtValues below borrow these buffers
        self._values = {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in self._arrays.items()}
        options.add_external_initializers(list(self._values), list(self._values.values()))
        model = build_onnx_graph(net, strategy) if graph is None else _load_graph(graph, net, strategy)
        self.session = ort.InferenceSession(model.SerializeToString(), options, providers=self.providers,
                                            provider_options=_provider_options(self.providers))
        check_active_providers(self.providers, self.active_providers)

    @property
    def active_providers(self) -> list[str]:
        """The providers ORT actually assigned (construction fails when a requested accelerator is missing)."""
        return list(self.session.get_providers())

    def run(self, images: np.ndarray) -> np.ndarray:
        """Logits ``[K·M, B, O]`` for float32 images ``[B, C, H, W]`` (already normalised)."""
        if images.dtype != np.float32:
            raise TypeError(f"OnnxDrawnSession.run expects float32 images, got {images.dtype}")
        if images.ndim != 4 or images.shape[1] != self.in_channels:
            raise ValueError(
                f"OnnxDrawnSession.run expects images [B, {self.in_channels}, H, W], got {images.shape}"
            )
        (logits,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: np.ascontiguousarray(images)})
        return np.asarray(logits)
