"""What this CPU runs natively: the flags that decide reduced-precision speed, and a conv micro-probe.

Why here, below ``service`` and ``training``: bf16 autocast is 1.4-3.8x faster than fp32 on a CPU with
native bf16 (AVX-512-BF16 / AMX) but ~70x *slower* where oneDNN emulates it (AVX2-only AMD EPYC;
docs/results-benchmarks.md). The service (``service.inference.platform``) and the trainer (``radscreen-train fit
--precision``) both decide from this detection, so neither can land on the emulated path by accident.

Detection is injectable for tests (``detect_cpu(cpuinfo=..., isa=...)``) and overridable by operators
(``override="yes"|"no"``) where /proc/cpuinfo does not tell the truth.

Example::

    cpu = detect_cpu()      # CpuCapability(model_name='AMD EPYC', isa='AVX2', native_bf16=False, ...)
    cpu.summary()           # 'AMD EPYC (torch ISA AVX2; native bf16: no; native int8: yes; flags avx2; detected)'
"""

from __future__ import annotations

import platform as _platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

NativeBf16Setting = Literal["detect", "yes", "no"]  # override of the native-bf16 detection

# cpuinfo flags that decide reduced-precision speed (x86 'flags', aarch64 'Features')
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
FP16_FLAGS = ("avx512_fp16", "amx_fp16", "fphp")
# ONNX Runtime's u8s8 convolution kernels: VNNI/AMX dot products, or AVX2's vpmaddubsw (int8 measured 2.2x
# faster than fp32 on an AVX2-only EPYC and 3x on AVX-512 VNNI, docs/results-benchmarks.md); NEON dot product on ARM
INT8_FLAGS = ("avx2", "avx_vnni", "avx512_vnni", "amx_int8", "asimddp")
REPORTED_FLAGS = ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8",
                  "avx512_fp16", "amx_fp16", "asimd", "asimddp", "bf16", "fphp")
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class CpuCapability:
    """The CPU as the precision choice sees it."""

    model_name: str
    isa: str  # torch's kernel dispatch level, torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, ...
    flags: tuple[str, ...]  # the precision-relevant cpuinfo flags present (REPORTED_FLAGS order)
    native_bf16: bool
    native_fp16: bool
    source: str  # "detected" or "override: native bf16 yes|no"
    native_int8: bool = False  # fast int8 dot products for ONNX Runtime's quantised convolutions

    def summary(self) -> str:
        """One log/report line, e.g. 'AMD EPYC (torch ISA AVX2; native bf16: no; native int8: yes; flags avx2)'."""
        yes = {True: "yes", False: "no"}
        return (f"{self.model_name} (torch ISA {self.isa}; native bf16: {yes[self.native_bf16]}; "
                f"native int8: {yes[self.native_int8]}; "
                f"flags {' '.join(self.flags) or 'none'}; {self.source})")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["flags"] = list(self.flags)
        return out


def parse_cpuinfo(text: str) -> tuple[str, set[str]]:
    """Model name and the flag set of the first processor in /proc/cpuinfo text (x86 or aarch64)."""
    model, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return model, flags


def detect_cpu(*, cpuinfo: str | None = None, isa: str | None = None,
               override: NativeBf16Setting = "detect") -> CpuCapability:
    """Detect the CPU (``cpuinfo``/``isa`` injected by tests; default: this machine).

    Native bf16 = the CPU has avx512_bf16 or amx_bf16 (x86) or bf16 (aarch64); without /proc/cpuinfo
    torch's own probes decide. ``override`` 'yes'/'no' replaces the bf16 verdict (operators, tests).
    """
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    model, flags = parse_cpuinfo(cpuinfo)
    if not flags:  # no /proc/cpuinfo (macOS, Windows, sandbox): torch's CPU probes
        probes = {"avx2": "_is_avx2_supported", "avx512f": "_is_avx512_supported",
                  "avx512_bf16": "_is_avx512_bf16_supported", "amx_tile": "_is_amx_tile_supported",
                  "amx_fp16": "_is_amx_fp16_supported"}
        flags = {f for f, fn in probes.items() if getattr(torch.cpu, fn, lambda: False)()}
        if "amx_tile" in flags:
            flags.add("amx_bf16")  # AMX tiles come with bf16 on every shipping part
    native_bf16 = any(f in flags for f in BF16_FLAGS)
    source = "detected"
    if override != "detect":
        native_bf16, source = override == "yes", f"override: native bf16 {override}"
    return CpuCapability(
        model_name=model or _platform.processor() or _platform.machine() or "unknown CPU",
        isa=isa if isa is not None else str(torch.backends.cpu.get_cpu_capability()),
        flags=tuple(f for f in REPORTED_FLAGS if f in flags),
        native_bf16=native_bf16,
        native_fp16=any(f in flags for f in FP16_FLAGS),
        source=source,
        native_int8=any(f in flags for f in INT8_FLAGS),
    )


def conv_probe_ms(precision: str, *, repeats: int = 5, size: int = 128, channels: int = 46) -> float:
    """Median ms of one 3x3 convolution [1, C, S, S] on the CPU in ``precision`` (autocast for bf16/fp16):
    a seconds-long check of what the flags promise (``python -m service.inference.platform``)."""
    x = torch.randn(1, channels, size, size).contiguous(memory_format=torch.channels_last)  # [1, C, S, S]
    conv = torch.nn.Conv2d(channels, channels, 3, padding=1).eval()
    times = []
    with torch.inference_mode():
        for i in range(repeats + 1):
            start = time.perf_counter()
            if precision == "fp32":
                conv(x)
            else:
                with torch.autocast("cpu", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[precision]):
                    conv(x)
            if i:  # the first call pays oneDNN's kernel choice
                times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]
