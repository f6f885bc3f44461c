"""The one device and native-precision resolver (models/compute.py) that training and serving share."""

from __future__ import annotations

import pytest
import torch

from models.compute import PrecisionUnavailableError, is_native, require_native, resolve_device
from models.cpu import detect_cpu

AVX2 = detect_cpu(cpuinfo="model name\t: AMD EPYC\nflags\t\t: fpu avx avx2 fma\n", isa="AVX2")
AMX = detect_cpu(cpuinfo="model name\t: Intel Xeon\nflags\t\t: avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 "
                 "amx_tile amx_int8 avx512_fp16\n", isa="AVX512")
OLD = detect_cpu(cpuinfo="model name\t: Old\nflags\t\t: fpu sse sse2 avx\n", isa="DEFAULT")


@pytest.mark.parametrize(("cpu", "native"), [
    (AVX2, {"fp32", "int8"}),
    (AMX, {"fp32", "bf16", "fp16", "int8"}),
    (OLD, {"fp32"}),
])
def test_what_a_cpu_runs_natively(cpu: object, native: set[str]) -> None:
    got = {p for p in ("fp32", "bf16", "fp16", "int8") if is_native(p, device="cpu", cpu=cpu)}  # type: ignore[arg-type]
    assert got == native


def test_gpus_count_bf16_only_when_it_is_not_emulated() -> None:
    assert is_native("bf16", device="cuda", cpu=OLD, cuda_bf16=True)
    assert not is_native("bf16", device="cuda", cpu=AMX, cuda_bf16=False)  # a T4: the CPU's bf16 is moot
    assert is_native("fp16", device="cuda", cpu=OLD) and not is_native("int8", device="cuda", cpu=AMX)


def test_an_emulated_or_missing_path_is_refused_with_the_fix() -> None:
    require_native("bf16", device="cpu", cpu=AMX)  # native: no error
    with pytest.raises(PrecisionUnavailableError, match=r"no native bf16.*70x slower.*RADSCREEN_PRECISION=auto"):
        require_native("bf16", device="cpu", cpu=AVX2)
    with pytest.raises(PrecisionUnavailableError, match="no native int8"):
        require_native("int8", device="cpu", cpu=OLD)
    with pytest.raises(PrecisionUnavailableError, match="CPU only"):
        require_native("int8", device="cuda", cpu=AMX)
    with pytest.raises(PrecisionUnavailableError, match="this GPU has no native bf16"):
        require_native("bf16", device="cuda", cpu=AMX, cuda_bf16=False)


def test_device_auto_follows_the_visible_gpu() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device is available"):
            resolve_device("cuda:0")
