"""ONNX Runtime int8 static quantisation of the per-draw graph: speed and decision drift on TRAINED weights.

Builds the per-draw ONNX graph of the artifact's first ``--draws`` fixed draws with the weights inlined,
quantises its convolutions statically (QDQ, per-channel int8 weights, uint8 activations, calibrated on
``--calibration`` IDRiD photographs through the served preprocessing), then times fp32 vs int8 round-robin
on one thread and compares probability, MI and decisions (label at the decision threshold, MI referral) on
the held-out photographs. A probe, not a served path: int8 ships only at 0 flips (docs/benchmarks.md).

    .venv/bin/python benchmarks/int8_drift.py --draws 16 --calibration 8 --held-out 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.artifact import load_artifact
from models.draws import DrawnConv, DrawnLinear, DrawnNetwork, materialise_draws
from models.onnx_backend import INPUT_NAME, build_onnx_graph, drawn_weights
from models.uncertainty import binary_uncertainty_from_logits
from service.inference.scoring import ImagePipeline, prepare_image
from support.shared_data import IDRID

DATA = IDRID  # $RADSCREEN_SHARED_DATA/idrid-lesion-54


def first_draws(net: DrawnNetwork, k: int) -> DrawnNetwork:
    convs = [DrawnConv(c.weight[:k].clone(), c.bias[:k].clone(), c.stride, c.padding) for c in net.convs]
    lins = [DrawnLinear(lin.weight[:k].clone(), lin.bias[:k].clone()) for lin in net.linears]
    return DrawnNetwork(net.plan, convs, lins, activation=net.activation, negative_slope=net.negative_slope,
                        head_draws=net.head_draws)


def inlined_graph(net: DrawnNetwork) -> onnx.ModelProto:
    """The per-draw graph with the drawn weights stored inside (quantize_static needs them)."""
    model = build_onnx_graph(net, "loop")
    weights = drawn_weights(net, "loop")
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            t.CopyFrom(numpy_helper.from_array(weights[t.name], t.name))
    return model


class Images(CalibrationDataReader):
    def __init__(self, images: list[np.ndarray]) -> None:
        self.it = iter(images)

    def get_next(self) -> dict[str, np.ndarray] | None:
        x = next(self.it, None)
        return None if x is None else {INPUT_NAME: x}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", type=Path, default=None)
    p.add_argument("--draws", type=int, default=16)
    p.add_argument("--calibration", type=int, default=8)
    p.add_argument("--held-out", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    art = load_artifact(args.model_dir)
    net = first_draws(materialise_draws(art.build_model(), k=art.config.mc_samples, seed=art.config.draw_seed),
                      args.draws)
    cfg, cal = art.config, art.calibration
    pipe = ImagePipeline(size=cfg.input_size, mean=cfg.mean, std=cfg.std)
    files = sorted(DATA.glob("*.jpg"))[: args.calibration + args.held_out]
    images = [prepare_image(f.read_bytes(), pipe).pixels[None] for f in files]  # each [1, 3, S, S]
    with tempfile.TemporaryDirectory() as tmp:
        fp32_path, int8_path = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        onnx.save(inlined_graph(net), str(fp32_path))
        start = time.perf_counter()
        quantize_static(str(fp32_path), str(int8_path), Images(images[: args.calibration]),
                        quant_format=QuantFormat.QDQ, per_channel=True, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QUInt8, op_types_to_quantize=["Conv"])
        print(f"quantised in {time.perf_counter() - start:.0f} s")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sessions = {name: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                    for name, path in (("fp32", fp32_path), ("int8", int8_path))}
    held = images[args.calibration:]
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for s in sessions.values():
        s.run(None, {INPUT_NAME: held[0]})
    for _ in range(args.repeats):
        for name, s in sessions.items():
            start = time.perf_counter()
            s.run(None, {INPUT_NAME: held[0]})
            times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.draws} draws, 1 thread: fp32 {med['fp32']:.3f} s, int8 {med['int8']:.3f} s "
          f"({med['fp32'] / med['int8']:.2f}x)")
    x = np.concatenate(held)  # [B, 3, S, S]
    u32, u8 = (binary_uncertainty_from_logits(torch.from_numpy(sessions[n].run(None, {INPUT_NAME: x})[0]))
               for n in ("fp32", "int8"))  # each over logits [K, B, 1]
    dp = (u32.probability - u8.probability).abs().max().item()
    dmi = (u32.mutual_information - u8.mutual_information).abs().max().item()
    thr, dec = cal.referral_threshold_mi, cal.decision_threshold
    flips = int(((u32.mutual_information > thr) != (u8.mutual_information > thr)).sum()
                + ((u32.probability >= dec) != (u8.probability >= dec)).sum())
    print(f"{len(held)} held-out images: max|dp| {dp:.2e}, max|dMI| {dmi:.2e} nat, decision flips {flips} "
          f"(MI referral threshold {thr:.2e})")


if __name__ == "__main__":
    main()
