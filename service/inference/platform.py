"""What the service runs on this machine beyond the device and precision: the backend, and a report.

The device, precision and draw strategy are decided once, in :func:`models.platform.compute.resolve` (training and
the Ray driver stand on it too): ``precision="auto"`` takes the fastest of int8 and bf16 that this CPU runs
natively AND that the artifact's measured drift permits (``Calibration.permits``), else fp32; an explicit
``bf16``/``fp16``/``int8`` the machine would only emulate **fails at start** with
``PrecisionUnavailableError``, whose message ends with :data:`SERVICE_FIX` (the service's settings; a
configuration the machine cannot honour at a usable speed is an error, not a silent 70x slowdown: bf16
emulated on an AVX2-only AMD EPYC ran the served network 70x slower, docs/results-benchmarks.md).

``backend="auto"`` then takes ONNX Runtime's per-draw graph for fp32 on CPU (the fastest fp32 CPU path
measured against the peer) and torch for bf16/fp16 and GPUs (:func:`choose_backend`).

The CPU detection lives in :mod:`models.platform.cpu`; it is injectable for tests (``detect_cpu(cpuinfo=...,
isa=...)``) and overridable by operators (``RADSCREEN_NATIVE_BF16=yes|no``) where /proc/cpuinfo is not
telling the truth. ``python -m service.inference.platform`` prints what this machine gets: on its CPU and,
where torch sees one, on its GPU (bf16 then fp16 there, each only where its record permits it: the path the
reason names is the one served).

Example::

    runtime = resolve(device="cpu", precision="auto", cpu=detect_cpu(), permits=calibration.permits())
    backend, why = choose_backend("auto", device=runtime.device, precision=runtime.precision)
"""

from __future__ import annotations

import torch

from models.artifact import load_artifact
from models.platform.compute import onnxruntime_available, resolve
from models.platform.cpu import conv_probe_ms, detect_cpu

# Appended to an explicit precision the machine would only emulate (models.platform.compute names no setting).
SERVICE_FIX = "Set RADSCREEN_PRECISION=auto (or fp32), or RADSCREEN_NATIVE_BF16=yes if the detection is wrong."


def choose_backend(requested: str, *, device: str, precision: str,
                   ort_available: bool | None = None) -> tuple[str, str]:
    """``(backend, reason)``: ``auto`` -> ONNX Runtime's per-draw graph for fp32 and int8 on CPU, else torch.

    Measured in one run against the peer (benchmarks/bench_peer.py, docs/results-benchmarks.md): on CPU in fp32
    ONNX Runtime's per-draw graph (ORT_ENABLE_ALL) is the fastest served path and agrees with torch
    to ~1e-7 in probability; torch keeps bf16/fp16 (ORT runs fp32 only) and the GPU.
    """
    if requested not in ("auto", "torch", "onnxruntime"):
        raise ValueError(f"Unknown backend {requested!r}; expected one of: auto, torch, onnxruntime.")
    if requested == "torch" and precision == "int8":
        raise ValueError("precision=int8 runs on the onnxruntime backend only (quantised convolutions); "
                         "set RADSCREEN_BACKEND=auto or onnxruntime, or another precision.")
    if requested == "onnxruntime" and precision in ("bf16", "fp16"):
        raise ValueError(f"precision={precision} runs on the torch backend only; set RADSCREEN_BACKEND=auto or "
                         "torch, or precision fp32 or int8.")
    if requested != "auto":
        return requested, f"{requested} was requested"
    if precision == "int8":
        return "onnxruntime", "auto: ONNX Runtime for int8 (its quantised convolutions)"
    if device != "cpu":
        return "torch", f"auto: torch on {device}"
    if precision != "fp32":
        return "torch", f"auto: torch for {precision} (the onnxruntime backend runs fp32 and int8 only)"
    if not (onnxruntime_available() if ort_available is None else ort_available):
        return "torch", "auto: onnxruntime is not installed, so torch"
    return "onnxruntime", ("auto: ONNX Runtime's per-draw graph is the fastest fp32 CPU path"
                           " (docs/results-benchmarks.md)")


def main() -> None:
    """Print this machine's CPU capability, what ``auto`` picks, and a conv micro-probe fp32 vs bf16."""
    cpu = detect_cpu()
    print(f"CPU: {cpu.summary()}")
    permits = load_artifact().calibration.permits()
    runtime = resolve(device="cpu", precision="auto", cpu=cpu, permits=permits)
    print(f"embedded model permits {sorted(permits)}: precision={runtime.precision} ({runtime.reason})")
    if torch.cuda.is_available():
        gpu = resolve(device="cuda", precision="auto", cpu=cpu, permits=permits)
        backend, why = choose_backend("auto", device=gpu.device, precision=gpu.precision)
        print(f"on {torch.cuda.get_device_name()}: precision={gpu.precision} ({gpu.reason}); backend={backend} ({why})")
    fp32, bf16 = conv_probe_ms("fp32"), conv_probe_ms("bf16")
    print(f"probe, one 3x3 conv 46->46 at 128 px, {torch.get_num_threads()} threads: fp32 {fp32:.2f} ms, "
          f"bf16 autocast {bf16:.2f} ms ({bf16 / fp32:.1f}x the fp32 time)")


if __name__ == "__main__":
    main()
