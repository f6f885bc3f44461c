"""Where the network runs and in which arithmetic: the one device, precision and strategy decision.

Training (``training.loop``, ``training.predict``), serving (``service.inference.loading``, the platform
report ``python -m service.inference.platform``) and the Ray driver (``service.batch.ray_runner``) all take
their device, precision and draw strategy from :func:`resolve`, which returns a :class:`Runtime` saying what
runs and why, so none of them can land on an emulated path by accident: bf16 autocast is 1.4-3.8x faster
than fp32 on a CPU with native bf16 but ~70x slower where oneDNN emulates it (AVX2-only AMD EPYC;
docs/results-benchmarks.md). What a machine runs natively:

* CPU: bf16 with AVX-512-BF16, AMX or ARM bf16; fp16 with AVX-512-FP16, AMX-FP16 or ARM fphp; int8 (ONNX
  Runtime's quantised convolutions) with AVX2, VNNI, AMX or the ARM dot product (``models.platform.cpu``);
* CUDA: bf16 at compute capability >= 8.0 (``models.platform.cuda.cuda_native_bf16``: torch's own answer counts
  emulation on a T4/V100), fp16 always; no int8 path.

``precision="auto"`` for a served artifact (``permits`` given: ``Calibration.permits``, what its drift
measured on real photographs lets serve) takes the first path of the device's speed order that it runs
natively and the artifact permits, else fp32, and its reason names the path (precision, device, backend,
draws) and what was passed over: on a CPU int8 then bf16 (:data:`CPU_SPEED_ORDER`), on a GPU bf16 then fp16
(:data:`CUDA_SPEED_ORDER`; fp16 only where its own record permits it: a GPU whose bf16 is emulated, a T4 or
V100, still has fp16 tensor cores). For training (``permits=None``) bf16 wherever it is native; there fp16 is
never chosen automatically. An explicit precision the device would only emulate raises
:class:`PrecisionUnavailableError`, whose message ends with ``fix`` (the caller's own setting or flag
names: models/ knows none). ``strategy="auto"``: a per-draw loop on the CPU, one grouped network on a GPU.

Example::

    runtime = resolve(device="auto", precision="auto", cpu=detect_cpu())   # training: no artifact gate
    runtime.device, runtime.precision, runtime.strategy, runtime.reason
    # ('cpu', 'fp32', 'loop', 'auto: fp32 (bf16: not native on this CPU (emulated is far slower))')
    with runtime.autocast():
        ...
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from models.artifact.schema import GuardBand, PrecisionPermit
from models.nn.layers import Strategy, check_strategy
from models.platform.cpu import CpuCapability, detect_cpu
from models.platform.cuda import cuda_native_bf16

PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
# Fastest first on a CPU that runs each natively (benchmarks/bench_peer.py, docs/results-benchmarks.md): ONNX Runtime
# int8 ~3x and torch bf16 ~1.6x the fp32 per-draw graph on AVX-512 VNNI + BF16.
CPU_SPEED_ORDER = ("int8", "bf16")
# On a GPU (torch, grouped draws): bf16 and fp16 run on the tensor cores at the same peak rate from Ampere on,
# several times IEEE fp32's (which keeps TF32 off, models.platform.cuda); bf16 first, with fp32's exponent range.
# Not yet measured against each other on the served network
# (docs/results-benchmarks.md, "Serving on a GPU: not measured").
CUDA_SPEED_ORDER = ("bf16", "fp16")
_BACKEND_OF = {"int8": "onnxruntime", "bf16": "torch", "fp16": "torch"}
_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
DEFAULT_FIX = "Ask for fp32, or auto to take a reduced precision only where it is native."


class PrecisionUnavailableError(ValueError):
    """An explicit precision this machine cannot run natively (the message names the fix)."""


def resolve_device(device: str, *, gpu_visible: bool | None = None) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; a CUDA device without one is an error.
    ``gpu_visible`` replaces torch's answer (tests)."""
    visible = torch.cuda.is_available() if gpu_visible is None else gpu_visible
    if device == "auto":
        return "cuda" if visible else "cpu"
    if device.startswith("cuda") and not visible:
        raise RuntimeError(f"device={device!r} was requested but no CUDA device is available; use auto or cpu.")
    return device


def is_native(precision: str, *, device: str, cpu: CpuCapability, cuda_bf16: bool | None = None) -> bool:
    """Whether ``device`` runs ``precision`` natively (fp32 always). ``cuda_bf16`` replaces the GPU probe
    (tests); default: :func:`models.platform.cuda.cuda_native_bf16`."""
    if precision == "fp32":
        return True
    if device == "cpu":
        return {"bf16": cpu.native_bf16, "fp16": cpu.native_fp16, "int8": cpu.native_int8}[precision]
    if precision == "bf16":
        return cuda_native_bf16() if cuda_bf16 is None else cuda_bf16
    return precision == "fp16"


def require_native(precision: str, *, device: str, cpu: CpuCapability, cuda_bf16: bool | None = None,
                   fix: str = DEFAULT_FIX) -> None:
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
            f"70x slower than fp32 (docs/results-benchmarks.md). {fix}"
        )
    raise PrecisionUnavailableError(
        f"precision=bf16 was requested, but this GPU has no native bf16 ({_gpu_name(device)}: compute "
        f"capability below 8.0, e.g. T4 or V100): autocast would be emulated. {fix}"
    )


@dataclass(frozen=True)
class Runtime:
    """What :func:`resolve` decided: where the network runs, in which arithmetic, how the K draws run, and why.

    ``guard``: the band inside which a reduced precision's answers are re-scored in fp32 (the artifact's
    permit; None: served as it is). ``cpu``: the capability the decision was taken on (None where none was
    needed: fp32 asked for on a GPU)."""

    device: str  # cpu | cuda | cuda:N
    precision: str  # fp32 | bf16 | fp16 | int8
    strategy: Strategy  # loop (K passes) | grouped (one grouped-convolution network)
    requested: str  # the precision asked for: auto | fp32 | bf16 | fp16 | int8
    reason: str  # why this precision
    strategy_reason: str
    guard: GuardBand | None = None
    cpu: CpuCapability | None = None

    @property
    def device_type(self) -> str:
        """``cpu`` or ``cuda`` (what ``torch.autocast`` takes)."""
        return torch.device(self.device).type

    def autocast(self) -> AbstractContextManager[Any]:
        """``torch.autocast`` in bf16/fp16 on this device, or nothing (fp32; int8 runs in ONNX Runtime)."""
        dtype = _AUTOCAST_DTYPES.get(self.precision)
        return nullcontext() if dtype is None else torch.autocast(self.device_type, dtype=dtype)


def resolve(*, device: str = "auto", precision: str = "auto", strategy: str = "auto", backend: str = "auto",
            cpu: CpuCapability | None = None, permits: Mapping[str, PrecisionPermit] | None = None,
            cuda_bf16: bool | None = None, gpu_visible: bool | None = None, fix: str = DEFAULT_FIX) -> Runtime:
    """Resolve every ``auto`` for this machine (see the module docstring for the rules).

    ``cpu``: the CPU capability (default: detected when the decision needs it). ``permits``: what the
    artifact's measured drift lets serve (``Calibration.permits``; always has fp32), or None for training,
    which takes bf16 wherever it is native. ``backend``: the requested serving backend (``auto`` lets int8
    take ONNX Runtime and bf16 torch). ``cuda_bf16`` / ``gpu_visible`` replace the GPU probes (tests).
    Raises PrecisionUnavailableError (its message ending with ``fix``) for an explicit precision the device
    would only emulate or cannot run, RuntimeError for a CUDA device where none is visible.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"Unknown precision {precision!r}; expected one of: {', '.join(PRECISIONS)}.")
    dev = resolve_device(device, gpu_visible=gpu_visible)
    chosen, why = resolve_strategy(strategy, device=dev, backend=backend)
    if precision == "fp32" and dev != "cpu":
        return Runtime(dev, "fp32", chosen, precision, "fp32 was requested", why)
    capability = cpu if cpu is not None else detect_cpu()

    def runtime(prec: str, reason: str, permit: PrecisionPermit | None = None) -> Runtime:
        return Runtime(dev, prec, chosen, precision, reason, why, permit.guard if permit else None, capability)

    if precision == "fp32":
        return runtime("fp32", "fp32 was requested")
    if precision != "auto":
        require_native(precision, device=dev, cpu=capability, cuda_bf16=cuda_bf16, fix=fix)
        if permits is None:
            return runtime(precision, f"{precision} was requested; {dev} runs it natively")
        permit = permits.get(precision)
        return runtime(precision, f"{precision} was requested" + (
            f"; {_permit_text(permit)}" if permit else
            "; the artifact's measured drift does NOT allow it (see the warning)"), permit)
    if permits is None:  # training: no artifact record to gate it, bf16 wherever it is native
        if is_native("bf16", device=dev, cpu=capability, cuda_bf16=cuda_bf16):
            return runtime("bf16", f"auto: bf16, native on {dev}")
        return runtime("fp32", f"auto: fp32 (bf16 is not native on {dev}: emulated is far slower)")
    if dev == "cpu":
        skipped = []
        for prec in CPU_SPEED_ORDER:
            permit = permits.get(prec)
            if permit is None:
                skipped.append(f"{prec}: no record free of decision flips")
            elif not is_native(prec, device=dev, cpu=capability):
                skipped.append(f"{prec}: not native on this CPU (emulated is far slower)")
            elif backend not in ("auto", _BACKEND_OF[prec]):
                skipped.append(f"{prec}: runs on {_BACKEND_OF[prec]}, not the requested {backend}")
            elif prec == "int8" and not onnxruntime_available():
                skipped.append("int8: onnxruntime is not installed")
            else:
                return runtime(prec, f"auto: {prec}, the fastest path this CPU runs natively that the artifact "
                               f"permits: {_permit_text(permit)}"
                               + (f" (skipped {'; '.join(skipped)})" if skipped else ""), permit)
        return runtime("fp32", f"auto: fp32 ({'; '.join(skipped)})")
    skipped = []
    for prec in CUDA_SPEED_ORDER:
        permit = permits.get(prec)
        if permit is None:
            skipped.append(f"{prec}: the artifact carries no measured {prec} drift free of decision flips "
                           "(calibration.json precision_drift)")
        elif not is_native(prec, device=dev, cpu=capability, cuda_bf16=cuda_bf16):
            skipped.append(f"{prec}: this GPU has no native {prec} (it would be emulated)")
        elif backend not in ("auto", _BACKEND_OF[prec]):
            skipped.append(f"{prec}: runs on {_BACKEND_OF[prec]}, not the requested {backend}")
        else:
            return runtime(prec, f"auto: {prec} on {dev} (torch, {chosen} draws), the fastest path this GPU runs "
                           f"natively that the artifact permits: {_permit_text(permit)}"
                           + (f" (skipped {'; '.join(skipped)})" if skipped else ""), permit)
    if "int8" in permits:
        skipped.append("int8: no int8 path on a GPU")
    path = "onnxruntime" if backend == "onnxruntime" else "torch"
    return runtime("fp32", f"auto: fp32 on {dev} ({path}, {chosen} draws; IEEE fp32, TF32 off) ({'; '.join(skipped)})")


def resolve_strategy(requested: str, *, device: str, backend: str = "auto") -> tuple[Strategy, str]:
    """``(strategy, reason)`` for running the K draws: ``auto`` -> per-draw loop on CPU, grouped on GPU.

    Measured (docs/results-benchmarks.md): on CPU oneDNN's grouped convolutions are slower than K ordinary
    passes at full width, for torch and ONNX Runtime alike; on GPU one grouped network wins.
    """
    if requested != "auto":
        if requested not in ("grouped", "loop"):
            raise ValueError(f"Unknown strategy {requested!r}; expected one of: auto, grouped, loop.")
        return check_strategy(requested), f"{requested} was requested"
    if device == "cpu":
        return "loop", f"auto: per-draw loop on CPU ({backend}; grouped convolutions are slower there)"
    return "grouped", f"auto: grouped convolutions on {device} ({backend})"


def onnxruntime_available() -> bool:
    """True when onnxruntime imports (it is a core dependency, but a slim image may drop it)."""
    return importlib.util.find_spec("onnxruntime") is not None


def _permit_text(permit: PrecisionPermit) -> str:
    if permit.guard is None:
        return f"its drift measured on {permit.images} real photographs flipped no decision"
    return (f"its drift measured on {permit.images} real photographs flipped no decision with fp32 re-scoring "
            f"inside the guard band ({permit.guard.share_rescored:.0%} of them re-scored)")


def _gpu_name(device: str) -> str:
    try:
        return str(torch.cuda.get_device_name(device))
    except (RuntimeError, AssertionError, ValueError):  # no driver, a CPU build, or a bad index
        return "unknown GPU"
