"""What this machine can run fast, and the precision and strategy chosen from it (no FastAPI, no model).

Why: bf16 autocast is 1.4-3.8x faster than fp32 on a CPU with native bf16 (AVX-512-BF16 / AMX), but on a
CPU without it (e.g. AVX2-only AMD EPYC) oneDNN emulates it and the served network ran **70x slower**
(docs/benchmarks.md). A benchmark on one machine must not decide the precision on another, so the
service detects the CPU at start and resolves ``precision="auto"`` here:

* ``auto`` -> bf16 only when the artifact's *measured* bf16 drift flipped no decision
  (``Calibration.allowed_precisions``) AND the device runs bf16 natively; otherwise fp32. fp16 is never
  chosen automatically.
* an explicit ``bf16``/``fp16`` on a CPU without native support **fails at start** with
  :class:`PrecisionUnavailableError` (a configuration the machine cannot honour at a usable speed is an
  error, not a silent 70x slowdown; fp32 or auto is the fix, and the message says so).

``backend="auto"`` then takes ONNX Runtime's per-draw graph for fp32 on CPU (the fastest fp32 CPU path
measured against the peer) and torch for bf16/fp16 and GPUs (:func:`choose_backend`).

The CPU detection itself lives in :mod:`models.cpu` (the trainer uses it too); it is injectable for tests
(``detect_cpu(cpuinfo=..., isa=...)``) and overridable by operators (``RADSCREEN_NATIVE_BF16=yes|no``)
where /proc/cpuinfo is not telling the truth.

Example::

    cpu = detect_cpu()                       # CpuCapability(model_name='AMD EPYC', isa='AVX2', ...)
    choice = choose_precision("auto", device="cpu", cpu=cpu, allowed=frozenset({"fp32"}))
    choice.precision, choice.reason          # ('fp32', 'auto: the artifact carries no measured bf16 ...')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from models.artifact import load_artifact
from models.artifact.schema import GuardBand, PrecisionPermit
from models.compute import is_native, require_native
from models.cpu import CpuCapability, conv_probe_ms, detect_cpu


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision the backend runs, what was asked for, and why; ``guard``: the band inside which the
    reduced precision's answers are re-scored in fp32 (None: served as it is)."""

    requested: str  # auto | fp32 | bf16 | fp16 | int8
    precision: str  # fp32 | bf16 | fp16 | int8
    reason: str
    guard: GuardBand | None = None


PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
# Fastest first on a CPU that runs each natively (benchmarks/bench_peer.py, docs/benchmarks.md): ONNX Runtime
# int8 ~3x and torch bf16 ~1.6x the fp32 per-draw graph on AVX-512 VNNI + BF16.
CPU_SPEED_ORDER = ("int8", "bf16")
_BACKEND_OF = {"int8": "onnxruntime", "bf16": "torch"}


def _permit_text(permit: PrecisionPermit) -> str:
    if permit.guard is None:
        return f"its drift measured on {permit.images} real photographs flipped no decision"
    return (f"its drift measured on {permit.images} real photographs flipped no decision with fp32 re-scoring "
            f"inside the guard band ({permit.guard.share_rescored:.0%} of them re-scored)")


def choose_precision(requested: str, *, device: str, cpu: CpuCapability, permits: Mapping[str, PrecisionPermit],
                     backend: str = "auto", cuda_bf16: bool | None = None) -> PrecisionChoice:
    """Resolve ``requested`` for this device (see the module docstring for the rules).

    ``permits``: what the artifact's measured drift lets serve (``Calibration.permits``; always has fp32).
    ``backend``: the requested backend (``auto`` lets int8 take ONNX Runtime and bf16 torch).
    ``cuda_bf16``: whether the GPU runs bf16 natively (default: :func:`models.cuda.cuda_native_bf16`).
    Raises PrecisionUnavailableError for an explicit precision the CPU (or GPU) would only emulate or
    cannot run.
    """
    if requested not in PRECISIONS:
        raise ValueError(f"Unknown precision {requested!r}; expected one of: {', '.join(PRECISIONS)}.")
    if requested == "fp32":
        return PrecisionChoice(requested, "fp32", "fp32 was requested")
    if requested != "auto":
        require_native(requested, device=device, cpu=cpu, cuda_bf16=cuda_bf16)
        permit = permits.get(requested)
        return PrecisionChoice(requested, requested, f"{requested} was requested" + (
            f"; {_permit_text(permit)}" if permit else
            "; the artifact's measured drift does NOT allow it (see the warning)"), permit.guard if permit else None)
    if device == "cpu":
        skipped = []
        for prec in CPU_SPEED_ORDER:
            permit = permits.get(prec)
            if permit is None:
                skipped.append(f"{prec}: no record free of decision flips")
            elif not is_native(prec, device=device, cpu=cpu):
                skipped.append(f"{prec}: not native on this CPU (emulated is far slower)")
            elif backend not in ("auto", _BACKEND_OF[prec]):
                skipped.append(f"{prec}: runs on {_BACKEND_OF[prec]}, not the requested {backend}")
            elif prec == "int8" and not onnxruntime_available():
                skipped.append("int8: onnxruntime is not installed")
            else:
                return PrecisionChoice("auto", prec, f"auto: {prec}, the fastest path this CPU runs natively "
                                       f"that the artifact permits: {_permit_text(permit)}"
                                       + (f" (skipped {'; '.join(skipped)})" if skipped else ""), permit.guard)
        return PrecisionChoice("auto", "fp32", f"auto: fp32 ({'; '.join(skipped)})")
    if backend not in ("auto", "torch"):
        return PrecisionChoice("auto", "fp32", f"auto: the {backend} backend runs fp32 on {device}")
    permit = permits.get("bf16")
    if permit is None:
        return PrecisionChoice("auto", "fp32", "auto: the artifact carries no measured bf16 drift free of "
                               "decision flips (calibration.json precision_drift), so fp32")
    if not is_native("bf16", device=device, cpu=cpu, cuda_bf16=cuda_bf16):
        return PrecisionChoice("auto", "fp32", "auto: this GPU has no native bf16 (it would be emulated), so fp32")
    return PrecisionChoice("auto", "bf16", f"auto: bf16 on {device}: {_permit_text(permit)}", permit.guard)


def choose_strategy(requested: str, *, device: str, backend: str) -> tuple[str, str]:
    """``(strategy, reason)`` for running the K draws: ``auto`` -> per-draw loop on CPU, grouped on GPU.

    Measured (docs/benchmarks.md): on CPU oneDNN's grouped convolutions are slower than K ordinary
    passes at full width, for torch and ONNX Runtime alike; on GPU one grouped network wins.
    """
    if requested not in ("auto", "grouped", "loop"):
        raise ValueError(f"Unknown strategy {requested!r}; expected one of: auto, grouped, loop.")
    if requested != "auto":
        return requested, f"{requested} was requested"
    if device == "cpu":
        return "loop", f"auto: per-draw loop on CPU ({backend}; grouped convolutions are slower there)"
    return "grouped", f"auto: grouped convolutions on {device} ({backend})"


def onnxruntime_available() -> bool:
    """True when onnxruntime imports (it is a core dependency, but a slim image may drop it)."""
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


def choose_backend(requested: str, *, device: str, precision: str,
                   ort_available: bool | None = None) -> tuple[str, str]:
    """``(backend, reason)``: ``auto`` -> ONNX Runtime's per-draw graph for fp32 and int8 on CPU, else torch.

    Measured in one run against the peer (benchmarks/bench_peer.py, docs/benchmarks.md): on CPU in fp32
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
    return "onnxruntime", "auto: ONNX Runtime's per-draw graph is the fastest fp32 CPU path (docs/benchmarks.md)"


def main() -> None:
    """Print this machine's CPU capability, what ``auto`` picks, and a conv micro-probe fp32 vs bf16."""
    cpu = detect_cpu()
    print(f"CPU: {cpu.summary()}")
    permits = load_artifact().calibration.permits()
    choice = choose_precision("auto", device="cpu", cpu=cpu, permits=permits)
    print(f"embedded model permits {sorted(permits)}: precision={choice.precision} ({choice.reason})")
    fp32, bf16 = conv_probe_ms("fp32"), conv_probe_ms("bf16")
    print(f"probe, one 3x3 conv 46->46 at 128 px, {torch.get_num_threads()} threads: fp32 {fp32:.2f} ms, "
          f"bf16 autocast {bf16:.2f} ms ({bf16 / fp32:.1f}x the fp32 time)")


if __name__ == "__main__":
    main()
