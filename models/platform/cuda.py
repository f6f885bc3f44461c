"""The CUDA math settings the product relies on: true fp32, native-only bf16, deterministic cuDNN.

Why here, below ``service`` and ``training``: both run the network on a GPU and must agree on what the
names mean there.

* **fp32 means IEEE fp32.** PyTorch's default lets cuDNN run fp32 convolutions as TF32 (10-bit mantissa)
  on Ampere and later GPUs; responses, the artifact's precision gate and the benchmarks' "fp32 reference"
  would then describe a precision that did not run. :func:`use_ieee_fp32` switches TF32 off for
  convolutions and matmuls (process-wide flags in torch), and ONNX Runtime's CUDA provider gets
  ``use_tf32=0`` (:data:`ORT_CUDA_OPTIONS`).
* **bf16 only where the GPU runs it natively.** ``torch.cuda.is_bf16_supported()`` counts emulation by
  default, so a T4 or V100 (no native bf16) would answer yes; :func:`cuda_native_bf16` does not.
* **Deterministic cuDNN for training.** Exact resume (a run killed and resumed ends bitwise equal to an
  uninterrupted one) needs the same kernels on both sides: :func:`use_deterministic_cudnn` turns off
  cuDNN's autotuner and asks for deterministic algorithms. That makes a run repeatable on the same GPU,
  driver and library versions; it does not make a GPU run equal a CPU run.

These functions only set flags; they run (and are tested) on machines without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# ONNX Runtime CUDA provider options: fp32 stays fp32 (the provider's default allows TF32).
ORT_CUDA_OPTIONS: dict[str, str] = {"use_tf32": "0"}


def is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def _cudnn_conv() -> Any:
    """``torch.backends.cudnn.conv`` (created at import time by torch, invisible to type checkers)."""
    return torch.backends.cudnn.conv  # type: ignore[attr-defined]


@dataclass(frozen=True)
class MathFlags:
    """The process-wide torch flags this module sets, as a value (tests save and restore them)."""

    conv_fp32: str  # cuDNN convolutions: "ieee" or "tf32" ("none": torch decides)
    matmul_fp32: str  # CUDA matmuls, same values
    cudnn_benchmark: bool
    cudnn_deterministic: bool


def current_math_flags() -> MathFlags:
    return MathFlags(_cudnn_conv().fp32_precision, torch.backends.cuda.matmul.fp32_precision,
                     torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)


def apply_math_flags(flags: MathFlags) -> None:
    _cudnn_conv().fp32_precision = flags.conv_fp32
    torch.backends.cuda.matmul.fp32_precision = flags.matmul_fp32
    torch.backends.cudnn.benchmark = flags.cudnn_benchmark
    torch.backends.cudnn.deterministic = flags.cudnn_deterministic


def use_ieee_fp32(device: str | torch.device) -> None:
    """On a CUDA device, make fp32 convolutions and matmuls run in IEEE fp32 rather than TF32.

    The flags are process-wide; bf16/fp16 autocast is unaffected (it picks its own kernels).
    """
    if not is_cuda(device):
        return
    _cudnn_conv().fp32_precision = "ieee"
    torch.backends.cuda.matmul.fp32_precision = "ieee"


def ieee_fp32_in_force() -> bool:
    """Whether cuDNN convolutions and CUDA matmuls are set to IEEE fp32 (False: TF32 is allowed)."""
    flags = current_math_flags()
    return flags.conv_fp32 == "ieee" and flags.matmul_fp32 == "ieee"


def use_deterministic_cudnn(device: str | torch.device) -> None:
    """On a CUDA device, fixed deterministic cuDNN algorithms (no autotuning): repeatable training steps."""
    if not is_cuda(device):
        return
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def cuda_native_bf16(is_available: Callable[[], bool] | None = None,
                     is_bf16_supported: Callable[..., bool] | None = None) -> bool:
    """True when a CUDA device is visible and runs bf16 natively (compute capability 8.0+), emulation excluded.

    The two callables default to torch's; tests inject stand-ins for a GPU that only emulates bf16.
    """
    available = is_available or torch.cuda.is_available
    supported = is_bf16_supported or torch.cuda.is_bf16_supported
    return bool(available() and supported(including_emulation=False))
