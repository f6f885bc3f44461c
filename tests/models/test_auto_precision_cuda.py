"""``precision=auto`` on a GPU follows the same rule as on a CPU, with a synthetic drift record and no GPU: the
first path of the GPU's speed order (bf16, then fp16) that it runs natively and the artifact's record permits,
else IEEE fp32; the reason names the path served and what was passed over, and the guard band travels."""

from __future__ import annotations

import pytest

from models.artifact.schema import Calibration, GuardBand, PrecisionPermit
from models.platform.compute import CUDA_SPEED_ORDER, Runtime, resolve
from models.platform.cpu import detect_cpu
from service.inference.platform import choose_backend

OLD_CPU = detect_cpu(cpuinfo="model name\t: Old\nflags\t\t: fpu sse sse2 avx\n", isa="DEFAULT")  # the CPU is moot
FP32 = {"fp32": PrecisionPermit("fp32", None, 0)}
GUARD = GuardBand(probability=0.002, mutual_information=3e-4, share_rescored=0.06)


def on_gpu(permits: dict[str, PrecisionPermit], *, cuda_bf16: bool, backend: str = "auto") -> Runtime:
    return resolve(device="cuda", precision="auto", backend=backend, cpu=OLD_CPU, permits=permits,
                   cuda_bf16=cuda_bf16, gpu_visible=True)


def drift(flips: int, *, guarded: bool = False) -> dict[str, object]:
    """A synthetic ``calibration.json`` precision_drift entry on 354 photographs."""
    record: dict[str, object] = {"images": 354, "label_flips": flips, "referral_flips": 0, "outcome_flips": flips,
                                 "max_abs_dp": 1e-3, "max_abs_dmi": 1e-4}
    if guarded:
        record["guard_band"] = {"factor": 2.0, "probability": 0.002, "mutual_information": 3e-4,
                                "share_rescored": 0.06, "cross_validated_flips": [0, 0], "outcome_flips": 0}
    return record


def permits_of(records: dict[str, dict[str, object]]) -> dict[str, PrecisionPermit]:
    cal = Calibration(referral_threshold_mi=0.01, target_referral_rate=0.1, decision_threshold=0.5, dataset="synthetic",
                      precision_drift=records)
    return cal.permits()


def test_the_gpu_order_is_bf16_then_fp16() -> None:
    assert CUDA_SPEED_ORDER == ("bf16", "fp16")


def test_auto_on_a_gpu_takes_bf16_where_its_record_permits_it_and_names_the_path() -> None:
    both = {**FP32, "bf16": PrecisionPermit("bf16", None, 354), "fp16": PrecisionPermit("fp16", None, 354)}
    got = on_gpu(both, cuda_bf16=True)
    assert (got.device, got.precision, got.strategy, got.guard) == ("cuda", "bf16", "grouped", None)
    assert got.reason.startswith("auto: bf16 on cuda (torch, grouped draws), the fastest path this GPU runs")
    assert "354 real photographs flipped no decision" in got.reason
    assert choose_backend("auto", device="cuda", precision="bf16")[0] == "torch"


def test_fp16_serves_where_bf16_is_not_permitted_or_is_emulated() -> None:
    """The same rule as on a CPU: a path passed over is named with the reason, the next one serves."""
    fp16_only = {**FP32, "fp16": PrecisionPermit("fp16", GUARD, 354)}
    got = on_gpu(fp16_only, cuda_bf16=True)
    assert (got.precision, got.guard) == ("fp16", GUARD)
    assert "auto: fp16 on cuda (torch, grouped draws)" in got.reason
    assert "skipped bf16: the artifact carries no measured bf16 drift" in got.reason
    assert "fp32 re-scoring inside the guard band (6% of them re-scored)" in got.reason
    both = {**FP32, "bf16": PrecisionPermit("bf16", None, 354), "fp16": PrecisionPermit("fp16", None, 354)}
    t4 = on_gpu(both, cuda_bf16=False)  # a T4/V100: bf16 emulated, fp16 tensor cores
    assert t4.precision == "fp16" and "bf16: this GPU has no native bf16" in t4.reason


def test_auto_on_a_gpu_stays_fp32_when_no_reduced_path_is_permitted_and_says_why() -> None:
    records = {"bf16": drift(3), "int8": drift(0)}  # bf16 flipped outcomes: not permitted; int8 has no GPU path
    permits = permits_of(records)
    assert set(permits) == {"fp32", "int8"}
    got = on_gpu(permits, cuda_bf16=True)
    assert (got.precision, got.guard) == ("fp32", None)
    assert got.reason.startswith("auto: fp32 on cuda (torch, grouped draws; IEEE fp32, TF32 off)")
    for passed_over in ("bf16: the artifact carries no measured bf16 drift", "fp16: the artifact carries no "
                        "measured fp16 drift", "int8: no int8 path on a GPU"):
        assert passed_over in got.reason


def test_a_guarded_record_serves_on_the_gpu_with_its_band() -> None:
    permits = permits_of({"bf16": drift(2, guarded=True)})
    got = on_gpu(permits, cuda_bf16=True)
    assert got.precision == "bf16" and got.guard is not None
    assert got.guard.share_rescored == pytest.approx(0.06)


def test_onnxruntime_asked_for_on_a_gpu_serves_fp32_naming_why() -> None:
    both = {**FP32, "bf16": PrecisionPermit("bf16", None, 354), "fp16": PrecisionPermit("fp16", None, 354)}
    got = on_gpu(both, cuda_bf16=True, backend="onnxruntime")
    assert got.precision == "fp32"
    assert "auto: fp32 on cuda (onnxruntime" in got.reason
    assert "bf16: runs on torch, not the requested onnxruntime" in got.reason
