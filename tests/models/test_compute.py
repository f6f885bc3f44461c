"""The one device, precision and strategy decision (models/platform/compute.py) that training and serving share."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from models.artifact.schema import GuardBand, PrecisionPermit
from models.platform.compute import (
    DEFAULT_FIX,
    PrecisionUnavailableError,
    is_native,
    require_native,
    resolve,
    resolve_device,
)
from models.platform.cpu import detect_cpu

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
    with pytest.raises(PrecisionUnavailableError, match=r"no native bf16.*70x slower.*Ask for fp32"):
        require_native("bf16", device="cpu", cpu=AVX2)
    with pytest.raises(PrecisionUnavailableError, match=r"70x slower.* Use --precision fp32\.$"):
        require_native("bf16", device="cpu", cpu=AVX2, fix="Use --precision fp32.")  # the caller's own words
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


def test_resolve_for_training_takes_bf16_wherever_it_is_native() -> None:
    """No artifact record (``permits=None``): auto is bf16 where native, an explicit bf16 must be native."""
    amx = resolve(device="cpu", precision="auto", cpu=AMX)
    assert (amx.device, amx.precision, amx.requested, amx.strategy) == ("cpu", "bf16", "auto", "loop")
    assert amx.guard is None and amx.cpu is AMX and "native" in amx.reason
    avx2 = resolve(device="cpu", precision="auto", cpu=AVX2)
    assert avx2.precision == "fp32" and "not native" in avx2.reason
    assert resolve(device="cpu", precision="fp32", cpu=AMX).precision == "fp32"  # fp32 asked is never upgraded
    with pytest.raises(PrecisionUnavailableError, match=r"no native bf16.*Use --precision fp32\.$"):
        resolve(device="cpu", precision="bf16", cpu=AVX2, fix="Use --precision fp32.")
    with pytest.raises(ValueError, match="expected one of: auto, fp32, bf16, fp16, int8"):
        resolve(device="cpu", precision="bf32", cpu=AMX)


def test_resolve_for_a_served_artifact_follows_its_permits() -> None:
    """With ``permits`` (``Calibration.permits``) auto takes only what the artifact's record allows, fastest
    first on the CPU (int8, then bf16), and the guard band travels with the choice."""
    guard = GuardBand(probability=0.01, mutual_information=1e-4, share_rescored=0.12)
    fp32 = {"fp32": PrecisionPermit("fp32", None, 0)}
    bf16 = {**fp32, "bf16": PrecisionPermit("bf16", guard, 400)}
    assert resolve(device="cpu", precision="auto", cpu=AMX, permits=fp32).precision == "fp32"
    served = resolve(device="cpu", precision="auto", cpu=AMX, permits=bf16)
    assert served.precision == "bf16" and served.guard == guard and "guard band (12%" in served.reason
    assert resolve(device="cpu", precision="auto", cpu=AVX2, permits=bf16).precision == "fp32"
    int8 = {**bf16, "int8": PrecisionPermit("int8", None, 400)}
    assert resolve(device="cpu", precision="auto", cpu=AMX, permits=int8).precision == "int8"
    assert resolve(device="cpu", precision="auto", cpu=AMX, permits=int8, backend="torch").precision == "bf16"


def test_resolve_picks_the_device_and_the_strategy_with_it() -> None:
    gpu = resolve(device="auto", precision="fp32", gpu_visible=True)
    assert (gpu.device, gpu.strategy, gpu.cpu) == ("cuda", "grouped", None)  # fp32 on a GPU needs no CPU probe
    cpu = resolve(device="auto", precision="fp32", cpu=AVX2, gpu_visible=False)
    assert (cpu.device, cpu.strategy) == ("cpu", "loop") and "per-draw loop" in cpu.strategy_reason
    assert resolve(device="cpu", precision="fp32", strategy="grouped", cpu=AVX2).strategy == "grouped"
    with pytest.raises(ValueError, match="expected one of: auto, grouped, loop"):
        resolve(device="cpu", strategy="fast", cpu=AVX2)
    with pytest.raises(RuntimeError, match="no CUDA device is available"):
        resolve(device="cuda", gpu_visible=False)
    on_t4 = resolve(device="cuda", precision="auto", cpu=AMX, cuda_bf16=False, gpu_visible=True)
    assert on_t4.precision == "fp32"  # training on a GPU that only emulates bf16


def test_the_runtime_autocasts_in_its_precision() -> None:
    x = torch.ones(2, 2)
    with resolve(device="cpu", precision="auto", cpu=AMX).autocast():
        assert (x @ x).dtype == torch.bfloat16
    with resolve(device="cpu", precision="fp32", cpu=AMX).autocast():
        assert (x @ x).dtype == torch.float32


def test_models_names_no_setting_of_the_service_or_the_cli() -> None:
    """The ``RADSCREEN_*`` variables and the CLI flags belong to service/ and training/: models/ takes values."""
    root = Path(__file__).resolve().parents[2] / "models"
    named = [str(p.relative_to(root)) for p in root.rglob("*.py") if "RADSCREEN_" in p.read_text(encoding="utf-8")]
    assert named == []
    assert "RADSCREEN" not in DEFAULT_FIX
