"""int8 serving form: the per-draw ONNX graph with statically quantised convolutions (ONNX Runtime, CPU).

The K fixed draws' per-draw graph (:func:`models.serving.onnx_backend.build_onnx_graph`, ``loop``) gets its drawn
weights stored inside, and ONNX Runtime's static quantiser turns every convolution into QDQ form: int8
weights per output channel, uint8 activations with one scale per tensor. The activation scales come from a
**range table** (``int8_ranges.json`` in the artifact): the smallest and largest value each convolution
input took over real *training* photographs, measured once by :func:`calibrate_ranges` and shipped with the
model. The service has no photographs, so it never calibrates; it only quantises with the shipped table
(:class:`Int8DrawnSession`), which is deterministic. The linear head stays fp32.

int8 is ~3x faster than the fp32 per-draw graph on a CPU with AVX-512 VNNI (docs/results-benchmarks.md) and
shifts p̄ and MI a little: whether it may serve is decided from its measured drift on real eyes
(``benchmarks/drift_real.py``), never assumed.

Example::

    net = materialise_draws(model, mc_samples=16, seed=artifact.config.serving.draw_seed)
    session = Int8DrawnSession(net, artifact.directory / INT8_RANGES_FILE, intra_op_threads=2)
    logits = session.run(images)        # np.float32 [B, C, H, W] -> [K·M, B, O]
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from models.nn.draws import DrawnNetwork
from models.serving.onnx_backend import INPUT_NAME, OUTPUT_NAME, build_onnx_graph, drawn_weights

INT8_RANGES_FILE = "int8_ranges.json"
STRATEGY = "loop"  # one branch of ordinary convolutions per draw: what the int8 kernels are fast at
_QUANTISE = dict(quant_format=QuantFormat.QDQ, per_channel=True, weight_type=QuantType.QInt8,
                 activation_type=QuantType.QUInt8, op_types_to_quantize=["Conv"])


class Int8RangesError(ValueError):
    """The range table is missing, unreadable, or does not fit this network's graph."""


def inlined_graph(net: DrawnNetwork) -> onnx.ModelProto:
    """The per-draw graph with the drawn fp32 weights stored inside (the quantiser reads them there)."""
    model = build_onnx_graph(net, STRATEGY)
    weights = drawn_weights(net, STRATEGY)
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            t.CopyFrom(numpy_helper.from_array(weights[t.name], t.name))
    return model


class _Batches(CalibrationDataReader):
    def __init__(self, batches: Iterable[np.ndarray]) -> None:
        self._it: Iterator[np.ndarray] = iter(batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        x = next(self._it, None)
        return None if x is None else {INPUT_NAME: np.ascontiguousarray(x, dtype=np.float32)}


def _quantise(model: onnx.ModelProto, out: Path, ranges: Path, batches: Iterable[np.ndarray] | None) -> None:
    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # ORT logs a "consider pre-processing" advice on the root logger each call
    try:
        quantize_static(model, out, None if batches is None else _Batches(batches),
                        calibration_cache_path=ranges, **_QUANTISE)
    finally:
        quiet.setLevel(level)


def calibrate_ranges(net: DrawnNetwork, batches: Iterable[np.ndarray], out: Path | str) -> Path:
    """Measure the activation range table of ``net`` over ``batches`` (float32 ``[B, C, H, W]``, already
    normalised, from real training photographs) and write it to ``out`` (``int8_ranges.json``)."""
    out = Path(out)
    if out.exists():
        out.unlink()  # the quantiser would read a stale table instead of measuring
    with tempfile.TemporaryDirectory(prefix="radscreen-int8-") as tmp:
        _quantise(inlined_graph(net), Path(tmp) / "int8.onnx", out, batches)
    return out


def check_ranges(net: DrawnNetwork, ranges: Path | str) -> None:
    """Raise :class:`Int8RangesError` unless ``ranges`` holds a finite range for every convolution input of
    ``net``'s per-draw graph (a table from another network or draw count does not fit)."""
    path = Path(ranges)
    try:
        data = json.loads(path.read_text())["data"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise Int8RangesError(f"{path}: not an int8 range table ({exc})") from exc
    needed = {n.input[0] for n in build_onnx_graph(net, STRATEGY).graph.node if n.op_type == "Conv"}
    missing = sorted(needed - set(data))
    if missing:
        raise Int8RangesError(f"{path}: no range for {len(missing)} convolution input(s) of this network "
                              f"(e.g. {missing[0]}); the table was measured on another network or draw count")


class Int8DrawnSession:
    """An ONNX Runtime CPU session running all K draws with int8 convolutions; same ``run`` as
    :class:`models.serving.onnx_backend.OnnxDrawnSession`. Quantising at construction takes seconds to a minute at
    full size (the service does it once, at start-up)."""

    providers: ClassVar[list[str]] = ["CPUExecutionProvider"]

    def __init__(self, net: DrawnNetwork, ranges: Path | str, *, intra_op_threads: int | None = None) -> None:
        check_ranges(net, ranges)
        self.mc_samples = net.mc_samples
        self.in_channels = int(net.convs[0].weight.shape[2])
        self.strategy = STRATEGY
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if intra_op_threads is not None:
            options.intra_op_num_threads = intra_op_threads
        with tempfile.TemporaryDirectory(prefix="radscreen-int8-") as tmp:
            path = Path(tmp) / "int8.onnx"
            _quantise(inlined_graph(net), path, Path(ranges), None)
            self.session = ort.InferenceSession(str(path), options, providers=self.providers)

    @property
    def active_providers(self) -> list[str]:
        return list(self.session.get_providers())

    def run(self, images: np.ndarray) -> np.ndarray:
        """Logits ``[K·M, B, O]`` for float32 images ``[B, C, H, W]`` (already normalised)."""
        if images.dtype != np.float32 or images.ndim != 4 or images.shape[1] != self.in_channels:
            raise ValueError(f"Int8DrawnSession.run expects float32 images [B, {self.in_channels}, H, W], "
                             f"got {images.dtype} {images.shape}")
        (logits,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: np.ascontiguousarray(images)})
        return np.asarray(logits)
