"""Where the network runs and in which arithmetic: the one device and native-precision resolver.

Training (``training.loop``) and serving (``service.inference.loading``) both resolve ``device`` and check a
requested precision here, so neither can land on an emulated path by accident: bf16 autocast is 1.4-3.8x
faster than fp32 on a CPU with native bf16 but ~70x slower where oneDNN emulates it (AVX2-only AMD EPYC;
docs/benchmarks.md). What a machine runs natively:

* CPU: bf16 with AVX-512-BF16, AMX or ARM bf16; fp16 with AVX-512-FP16, AMX-FP16 or ARM fphp; int8 (ONNX
  Runtime's quantised convolutions) with AVX2, VNNI, AMX or the ARM dot product (``models.cpu``);
* CUDA: bf16 at compute capability >= 8.0 (``models.cuda.cuda_native_bf16``: torch's own answer counts
  emulation on a T4/V100), fp16 always; no int8 path.

The service decides *which* precision on top of this, from the artifact's measured drift
(``service.inference.platform.choose_precision``); training takes bf16 wherever it is native.

Example::

    device = resolve_device("auto")                       # "cuda" when a GPU is visible, else "cpu"
    require_native("bf16", device=device, cpu=detect_cpu())  # raises PrecisionUnavailableError if emulated
"""

from __future__ import annotations

import torch

from models.cpu import CpuCapability
from models.cuda import cuda_native_bf16


class PrecisionUnavailableError(ValueError):
    """An explicit precision this machine cannot run natively (the message names the fix)."""


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; a CUDA device without one is an error."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} was requested but no CUDA device is available; use auto or cpu.")
    return device


def is_native(precision: str, *, device: str, cpu: CpuCapability, cuda_bf16: bool | None = None) -> bool:
    """Whether ``device`` runs ``precision`` natively (fp32 always). ``cuda_bf16`` replaces the GPU probe
    (tests); default: :func:`models.cuda.cuda_native_bf16`."""
    if precision == "fp32":
        return True
    if device == "cpu":
        return {"bf16": cpu.native_bf16, "fp16": cpu.native_fp16, "int8": cpu.native_int8}[precision]
    if precision == "bf16":
        return cuda_native_bf16() if cuda_bf16 is None else cuda_bf16
    return precision == "fp16"


SERVICE_FIX = "Set RADSCREEN_PRECISION=auto (or fp32), or RADSCREEN_NATIVE_BF16=yes if the detection is wrong."


def require_native(precision: str, *, device: str, cpu: CpuCapability, cuda_bf16: bool | None = None,
                   fix: str = SERVICE_FIX) -> None:
    """Raise :class:`PrecisionUnavailableError`, naming ``fix``, when ``device`` would only emulate ``precision``
    (or has no such path)."""
    if precision == "int8" and device != "cpu":
        raise PrecisionUnavailableError("precision=int8 runs on the CPU only (ONNX Runtime's quantised "
                                        "convolutions); use fp32, bf16 or fp16 on a GPU.")
    if is_native(precision, device=device, cpu=cpu, cuda_bf16=cuda_bf16):
        return
    if device == "cpu":
        raise PrecisionUnavailableError(
            f"precision={precision} was requested, but this CPU has no native {precision} "
            f"({cpu.summary()}): it would be emulated, and emulated bf16 ran the served network "
            f"70x slower than fp32 (docs/benchmarks.md). {fix}"
        )
    raise PrecisionUnavailableError(
        f"precision=bf16 was requested, but this GPU has no native bf16 ({_gpu_name(device)}: compute "
        f"capability below 8.0, e.g. T4 or V100): autocast would be emulated. {fix}"
    )


def _gpu_name(device: str) -> str:
    try:
        return str(torch.cuda.get_device_name(device))
    except (RuntimeError, AssertionError, ValueError):  # no driver, a CPU build, or a bad index
        return "unknown GPU"
