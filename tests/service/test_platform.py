"""CPU detection and the precision/strategy choice (models.platform.compute.resolve, service/inference/platform.py), end
to end through the Scorer, the HTTP service and the batch job, with the CPU capability injected so that "no
native bf16" and "native bf16" are both exercised on whatever machine runs the tests."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import httpx
import pytest

from models.artifact import Calibration, load_artifact, replace_artifact_file, replace_calibration
from models.artifact.schema import PrecisionPermit
from models.platform.compute import PrecisionUnavailableError, resolve, resolve_strategy
from models.platform.cpu import CpuCapability, detect_cpu, parse_cpuinfo
from service.inference.loading import load_scorer
from service.inference.platform import SERVICE_FIX
from service.inference.spec import ScorerSpec
from service.settings import Settings
from support.artifacts import build_tiny_artifact
from support.images import encode, fundus_like
from support.live_server import live_server

AMD_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx fma avx2 bmi2 sha_ni vaes
"""
INTEL_AMX = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu avx avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8 avx512_fp16
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu avx avx2
"""
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes crc32 fphp asimdhp bf16 i8mm sve
CPU part\t: 0xd40
"""
NO_BF16 = detect_cpu(cpuinfo=AMD_AVX2, isa="AVX2")
WITH_BF16 = detect_cpu(cpuinfo=INTEL_AMX, isa="AVX512")
DRIFT_OK: dict[str, object] = {"images": 32, "label_flips": 0, "referral_flips": 0, "max_abs_dp": 1e-4,
                               "max_abs_dmi": 1e-8}
DRIFT_FLIPS = {**DRIFT_OK, "referral_flips": 10}
GUARD = {"probability": 2e-3, "mutual_information": 2e-4, "share_rescored": 0.12, "outcome_flips": 0,
         "cross_validated_flips": [0, 0]}
DRIFT_GUARDED = {**DRIFT_FLIPS, "outcome_flips": 3, "guard_band": GUARD}
BASE = dict(referral_threshold_mi=1e-3, target_referral_rate=0.2, decision_threshold=0.5, dataset="d")


def permits(**drift: Mapping[str, object]) -> dict[str, PrecisionPermit]:
    """What an artifact with these precision_drift records permits."""
    return Calibration(**BASE, precision_drift=drift).permits()  # type: ignore[arg-type]


def test_detection_reads_the_flags_that_decide_bf16_speed() -> None:
    assert parse_cpuinfo(AMD_AVX2)[0] == "AMD EPYC"
    assert (NO_BF16.native_bf16, NO_BF16.native_fp16, NO_BF16.flags) == (False, False, ("avx2",))
    assert WITH_BF16.native_bf16 and WITH_BF16.native_fp16 and WITH_BF16.model_name.startswith("Intel")
    assert "amx_bf16" in WITH_BF16.flags and "avx512_bf16" in WITH_BF16.flags  # first processor only
    arm = detect_cpu(cpuinfo=GRAVITON3, isa="SVE256")
    assert arm.native_bf16 and arm.native_fp16 and arm.isa == "SVE256"
    assert "native bf16: no" in NO_BF16.summary() and "AVX2" in NO_BF16.summary()


def test_override_replaces_the_bf16_verdict_and_says_so() -> None:
    forced = detect_cpu(cpuinfo=AMD_AVX2, override="yes")
    assert forced.native_bf16 and forced.source == "override: native bf16 yes"
    assert not detect_cpu(cpuinfo=INTEL_AMX, override="no").native_bf16


def test_this_machine_is_detected() -> None:
    cpu = detect_cpu()
    assert cpu.isa and cpu.model_name and cpu.source == "detected"
    assert cpu.native_bf16 == any(f in cpu.flags for f in ("avx512_bf16", "amx_bf16", "bf16"))


@pytest.mark.parametrize(
    ("requested", "cpu", "drift", "expected", "reason_part"),
    [
        ("auto", WITH_BF16, {"bf16": DRIFT_OK}, "bf16", "the fastest path this CPU runs natively"),
        ("auto", NO_BF16, {"bf16": DRIFT_OK}, "fp32", "bf16: not native on this CPU"),
        ("auto", WITH_BF16, {}, "fp32", "bf16: no record free of decision flips"),
        ("auto", WITH_BF16, {"bf16": DRIFT_FLIPS}, "fp32", "bf16: no record free of decision flips"),
        ("auto", WITH_BF16, {"bf16": DRIFT_OK, "int8": DRIFT_OK}, "int8", "int8, the fastest"),
        ("auto", NO_BF16, {"bf16": DRIFT_OK, "int8": DRIFT_OK}, "int8", "int8, the fastest"),  # AVX2 runs int8
        ("auto", WITH_BF16, {"int8": DRIFT_FLIPS, "bf16": DRIFT_GUARDED}, "bf16", "re-scoring inside the guard"),
        ("fp32", WITH_BF16, {"bf16": DRIFT_OK}, "fp32", "requested"),
        ("bf16", WITH_BF16, {"bf16": DRIFT_OK}, "bf16", "requested"),
        ("bf16", WITH_BF16, {}, "bf16", "does NOT allow"),
        ("int8", NO_BF16, {"int8": DRIFT_GUARDED}, "int8", "re-scoring inside the guard band (12%"),
    ],
)
def test_precision_choice_on_cpu(requested: str, cpu: CpuCapability, drift: dict[str, dict[str, object]],
                                 expected: str, reason_part: str) -> None:
    choice = resolve(precision=requested, device="cpu", cpu=cpu, permits=permits(**drift))
    assert (choice.requested, choice.precision) == (requested, expected)
    assert reason_part in choice.reason
    guarded = expected != "fp32" and drift.get(expected) is DRIFT_GUARDED
    assert (choice.guard is not None) == guarded  # the band travels with the choice


def test_int8_needs_fast_int8_dot_products_and_the_cpu() -> None:
    old = detect_cpu(cpuinfo="model name\t: Old Xeon\nflags\t\t: fpu sse sse2 avx\n", isa="DEFAULT")
    assert not old.native_int8 and NO_BF16.native_int8 and WITH_BF16.native_int8
    ok = permits(int8=DRIFT_OK)
    assert resolve(precision="auto", device="cpu", cpu=old, permits=ok).precision == "fp32"
    with pytest.raises(PrecisionUnavailableError, match="no native int8"):
        resolve(precision="int8", device="cpu", cpu=old, permits=ok)
    with pytest.raises(PrecisionUnavailableError, match="runs on the CPU only"):
        resolve(precision="int8", device="cuda", cpu=WITH_BF16, permits=ok, gpu_visible=True)
    torch_only = resolve(precision="auto", device="cpu", cpu=WITH_BF16, permits=ok, backend="torch")
    assert torch_only.precision == "fp32" and "int8: runs on onnxruntime, not the requested torch" in torch_only.reason


@pytest.mark.parametrize("requested", ["bf16", "fp16"])
def test_explicit_reduced_precision_without_native_support_fails_with_the_fix(requested: str) -> None:
    with pytest.raises(PrecisionUnavailableError) as err:
        resolve(precision=requested, device="cpu", cpu=NO_BF16, permits=permits(bf16=DRIFT_OK), fix=SERVICE_FIX)
    message = str(err.value)
    assert f"no native {requested}" in message and "70x slower" in message
    assert "RADSCREEN_PRECISION=auto" in message and "AMD EPYC" in message


def test_precision_choice_elsewhere() -> None:
    both = permits(bf16=DRIFT_OK)
    assert resolve(precision="auto", device="cpu", cpu=WITH_BF16, permits=both, backend="onnxruntime").precision \
        == "fp32"

    def on_gpu(precision: str, *, cuda_bf16: bool) -> str:  # the CPU's bf16 is moot there
        return resolve(precision=precision, device="cuda", cpu=NO_BF16, permits=both, cuda_bf16=cuda_bf16,
                       gpu_visible=True).precision

    assert on_gpu("auto", cuda_bf16=True) == "bf16" and on_gpu("auto", cuda_bf16=False) == "fp32"
    assert on_gpu("bf16", cuda_bf16=True) == "bf16"
    with pytest.raises(PrecisionUnavailableError, match="this GPU has no native bf16"):
        resolve(precision="bf16", device="cuda", cpu=WITH_BF16, permits=both, cuda_bf16=False, gpu_visible=True)
    with pytest.raises(ValueError, match="expected one of: auto, fp32, bf16, fp16, int8"):
        resolve(precision="int4", device="cpu", cpu=NO_BF16, permits=both)


def test_strategy_choice() -> None:
    assert resolve_strategy("auto", device="cpu", backend="torch")[0] == "loop"
    assert resolve_strategy("auto", device="cuda", backend="torch")[0] == "grouped"
    assert resolve_strategy("grouped", device="cpu", backend="onnxruntime") == ("grouped", "grouped was requested")
    with pytest.raises(ValueError, match="expected one of: auto, grouped, loop"):
        resolve_strategy("fast", device="cpu", backend="torch")


def test_calibration_permits_only_measured_flip_free_precisions() -> None:
    assert Calibration(**BASE).allowed_precisions() == {"fp32"}  # type: ignore[arg-type]
    assert "precision_drift" not in Calibration(**BASE).to_dict()  # type: ignore[arg-type]
    ok = Calibration(**BASE, precision_drift={"bf16": DRIFT_OK, "int8": DRIFT_GUARDED})  # type: ignore[arg-type]
    assert ok.allowed_precisions() == {"fp32", "bf16", "int8"}
    assert ok.permits()["bf16"].guard is None and ok.permits()["bf16"].images == 32
    guard = ok.permits()["int8"].guard
    assert guard is not None and (guard.probability, guard.mutual_information, guard.share_rescored) == \
        (2e-3, 2e-4, 0.12)
    assert Calibration.from_dict(json.loads(json.dumps(ok.to_dict()))) == ok
    assert permits(bf16=DRIFT_FLIPS).keys() == {"fp32"}
    assert permits(bf16={**DRIFT_OK, "outcome_flips": 1}).keys() == {"fp32"}  # an outcome flip alone refuses
    left = {**DRIFT_GUARDED, "guard_band": {**GUARD, "outcome_flips": 1}}
    assert permits(int8=left).keys() == {"fp32"}  # the band left a flip
    wide = {**DRIFT_GUARDED, "guard_band": {**GUARD, "share_rescored": 0.9}}
    assert permits(int8=wide).keys() == {"fp32"}  # a band that re-scores most images saves nothing
    fold = {**DRIFT_GUARDED, "guard_band": {**GUARD, "cross_validated_flips": [0, 2]}}
    assert permits(int8=fold).keys() == {"fp32"}  # the band set on one half missed flips on the other
    with pytest.raises(ValueError, match=r"precision_drift.bf16.referral_flips' must be a non-negative"):
        Calibration(**BASE, precision_drift={"bf16": {**DRIFT_OK, "referral_flips": -1}})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"precision_drift.int4' is not a reduced precision"):
        Calibration(**BASE, precision_drift={"int4": DRIFT_OK})  # type: ignore[arg-type]
    for wrong, match in (({"probability": -1}, "guard_band.probability' must be a finite non-negative"),
                         ({"cross_validated_flips": 0}, "guard_band.cross_validated_flips' must be a list")):
        with pytest.raises(ValueError, match=match):
            permits(int8={**DRIFT_GUARDED, "guard_band": {**GUARD, **wrong}})


@pytest.fixture(scope="module")
def bf16_allowed_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny artifact with a recorded flip-free bf16 drift measurement (as precision_drift.py --record)."""
    path = build_tiny_artifact(tmp_path_factory.mktemp("bf16ok") / "tiny")
    art = load_artifact(path)
    cal = dataclasses.replace(art.calibration, precision_drift={"bf16": DRIFT_OK})
    sha = replace_calibration(path, cal)
    again = load_artifact(path)  # verifies every file against the rewritten manifest
    assert again.sha256 == sha != art.sha256 and again.calibration == cal
    assert again.files["weights.safetensors"] == art.files["weights.safetensors"]  # weights untouched
    return path


def test_scorer_resolves_auto_from_the_cpu_and_the_artifact(tiny_artifact: Path, bf16_allowed_artifact: Path) -> None:
    native = load_scorer(ScorerSpec(model_dir=bf16_allowed_artifact, device="cpu"), cpu=WITH_BF16)
    assert native.precision == "bf16" and native.backend.precision == "bf16"
    assert native.runtime["precision_requested"] == "auto" and native.runtime["strategy"] == "loop"
    assert native.runtime["cpu"]["native_bf16"] is True
    emulated = load_scorer(ScorerSpec(model_dir=bf16_allowed_artifact, device="cpu"), cpu=NO_BF16)
    assert emulated.precision == "fp32" and "bf16: not native" in emulated.runtime["precision_reason"]
    unmeasured = load_scorer(ScorerSpec(model_dir=tiny_artifact, device="cpu"), cpu=WITH_BF16)
    assert unmeasured.precision == "fp32"
    assert "bf16: no record free of decision flips" in unmeasured.runtime["precision_reason"]
    with pytest.raises(PrecisionUnavailableError, match="no native bf16"):
        load_scorer(ScorerSpec(model_dir=tiny_artifact, device="cpu", precision="bf16"), cpu=NO_BF16)


def test_v1_model_reports_the_cpu_and_why_this_precision(tiny_artifact: Path) -> None:
    settings = Settings(model_dir=tiny_artifact, device="cpu", native_bf16="yes")
    with live_server(settings) as base:
        runtime = httpx.get(f"{base}/v1/model").json()["runtime"]
    assert runtime["precision"] == "fp32" and runtime["precision_requested"] == "auto"
    assert "bf16: no record free of decision flips" in runtime["precision_reason"]
    assert runtime["strategy"] == "loop" and runtime["cpu"]["native_bf16"] is True
    assert runtime["cpu"]["source"] == "override: native bf16 yes" and runtime["cpu"]["isa"]


def test_explicit_bf16_on_a_cpu_without_it_fails_readiness_with_the_reason(tiny_artifact: Path) -> None:
    settings = Settings(model_dir=tiny_artifact, device="cpu", precision="bf16", native_bf16="no")
    with live_server(settings, wait_ready=False) as base:
        for _ in range(600):
            body = httpx.get(f"{base}/readyz").json()
            if body["status"] != "loading":
                break
            httpx.get(f"{base}/healthz")  # a short pause that also proves liveness
        assert body["status"] == "failed"
        assert "PrecisionUnavailableError" in body["detail"] and "no native bf16" in body["detail"]
        refused = httpx.post(f"{base}/v1/predict", content=encode(fundus_like(1)),
                             headers={"Content-Type": "image/png"})
        assert refused.status_code == 503


def test_batch_job_logs_and_summarises_the_runtime(tiny_artifact: Path, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    from service.batch.cli import main

    images = tmp_path / "in"
    images.mkdir()
    (images / "a.png").write_bytes(encode(fundus_like(3)))
    summary = tmp_path / "s.json"
    with caplog.at_level("INFO", logger="service.batch"):
        status = main(["score", "--input", str(images), "--output", str(tmp_path / "r.csv"), "--model-dir",
                       str(tiny_artifact), "--device", "cpu", "--native-bf16", "no", "--summary", str(summary),
                       "--no-progress"])
    assert status == 0
    runtime = json.loads(summary.read_text())["runtime"]
    assert runtime["precision"] == "fp32" and runtime["precision_requested"] == "auto"
    assert runtime["cpu"]["native_bf16"] is False
    assert runtime["backend"] == "onnxruntime" and runtime["backend_requested"] == "auto"
    assert any("runtime:" in r.getMessage() and "native bf16 no" in r.getMessage() for r in caplog.records)


def test_batch_cli_refuses_explicit_bf16_without_native_support(tiny_artifact: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from service.batch.cli import main

    images = tmp_path / "in"
    images.mkdir()
    (images / "a.png").write_bytes(encode(fundus_like(3)))
    status = main(["score", "--input", str(images), "--output", str(tmp_path / "r.csv"), "--model-dir",
                   str(tiny_artifact), "--device", "cpu", "--precision", "bf16", "--native-bf16", "no",
                   "--no-progress"])
    assert status == 2
    err = capsys.readouterr().err
    assert "no native bf16" in err and "RADSCREEN_PRECISION=auto" in err
    assert not (tmp_path / "r.csv").exists()


def test_backend_choice() -> None:
    from service.inference.platform import choose_backend

    assert choose_backend("auto", device="cpu", precision="fp32", ort_available=True)[0] == "onnxruntime"
    assert choose_backend("auto", device="cpu", precision="fp32", ort_available=False)[0] == "torch"
    assert choose_backend("auto", device="cpu", precision="bf16", ort_available=True)[0] == "torch"
    assert choose_backend("auto", device="cuda", precision="fp32", ort_available=True)[0] == "torch"
    assert choose_backend("torch", device="cpu", precision="fp32") == ("torch", "torch was requested")
    with pytest.raises(ValueError, match="expected one of: auto, torch, onnxruntime"):
        choose_backend("tvm", device="cpu", precision="fp32")


def test_the_default_cpu_path_equals_the_reference_k_pass_loop(tiny_artifact: Path) -> None:
    """backend=auto on CPU (ONNX Runtime, per-draw graph, fp32) == the Bayesian model's own seeded K-pass
    forward, the definition of the served answer, to 1e-5 in probability and 1e-6 nat in MI."""
    import numpy as np
    import torch

    from models.nn.sampling import seeded
    from models.nn.uncertainty import binary_uncertainty_from_logits
    from models.nn.vgg import mc_logits
    from service.inference.prepare import prepare_image

    fast = load_scorer(ScorerSpec(model_dir=tiny_artifact, backend="auto", device="cpu"), cpu=NO_BF16)
    assert (fast.backend.name, fast.backend.strategy, fast.precision) == ("onnxruntime", "loop", "fp32")
    assert fast.runtime["backend_requested"] == "auto" and "fastest" in fast.runtime["backend_reason"]
    images = [prepare_image(encode(fundus_like(seed)), fast.pipeline) for seed in range(5)]
    art = load_artifact(tiny_artifact)
    model = art.build_model()
    x = torch.from_numpy(np.stack([im.pixels for im in images]))  # [B, C, H, W]
    with seeded(model, art.config.serving.draw_seed), torch.no_grad():
        ref = binary_uncertainty_from_logits(mc_logits(model, x, art.config.serving.mc_samples)[..., 0].double())
    got = fast.score_batch(images)
    np.testing.assert_allclose([s.probability for s in got], ref.probability.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose([s.mutual_information for s in got], ref.mutual_information.numpy(),
                               atol=1e-6, rtol=0)
    assert max(s.mutual_information for s in got) > 1e-4  # the draws differ: MI is really compared


def test_auto_on_a_gpu_that_only_emulates_bf16_stays_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    """A T4/V100 answers torch.cuda.is_bf16_supported() with True by counting emulation; auto must not."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    both = permits(bf16=DRIFT_OK)
    choice = resolve(precision="auto", device="cuda", cpu=WITH_BF16, permits=both, gpu_visible=True)
    assert choice.precision == "fp32" and "no native bf16" in choice.reason
    with pytest.raises(PrecisionUnavailableError, match="this GPU has no native bf16"):
        resolve(precision="bf16", device="cuda", cpu=WITH_BF16, permits=both, gpu_visible=True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # an A100
    assert resolve(precision="auto", device="cuda", cpu=NO_BF16, permits=both, gpu_visible=True).precision == "bf16"


@pytest.fixture(scope="module")
def int8_guarded_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny artifact with an int8 range table and an int8 record that needs the guard band (as
    benchmarks/drift_real.py --record writes them)."""
    import numpy as np

    from models.nn.draws import materialise_draws
    from models.serving.int8 import INT8_RANGES_FILE, calibrate_ranges

    tmp = tmp_path_factory.mktemp("int8")
    path = build_tiny_artifact(tmp / "tiny")
    art = load_artifact(path)
    served = art.config.serving
    net = materialise_draws(art.build_model(), mc_samples=served.mc_samples, seed=served.draw_seed)
    rng = np.random.default_rng(0)
    ranges = calibrate_ranges(net, [rng.normal(size=(2, 3, 64, 64)).astype(np.float32) for _ in range(3)],
                              tmp / INT8_RANGES_FILE)
    replace_artifact_file(path, INT8_RANGES_FILE, ranges.read_bytes())
    replace_calibration(path, dataclasses.replace(load_artifact(path).calibration,
                                                  precision_drift={"int8": DRIFT_GUARDED}))
    assert INT8_RANGES_FILE in load_artifact(path).files  # listed in the manifest, so verified at load
    return path


def test_auto_serves_int8_with_the_guard_band_and_reports_it(int8_guarded_artifact: Path, tmp_path: Path) -> None:
    from service.inference.backends import GuardedBackend
    from service.inference.prepare import prepare_image

    scorer = load_scorer(ScorerSpec(model_dir=int8_guarded_artifact, device="cpu"), cpu=NO_BF16)  # AVX2: int8 is native
    assert isinstance(scorer.backend, GuardedBackend) and scorer.precision == "int8"
    assert scorer.backend.exact.precision == "fp32" and scorer.backend.exact.name == "onnxruntime"
    assert scorer.runtime["guard_band"] == {"probability": 2e-3, "mutual_information": 2e-4, "share_rescored": 0.12}
    assert "int8, the fastest path" in scorer.runtime["precision_reason"]
    images = [prepare_image(encode(fundus_like(seed)), scorer.pipeline) for seed in range(3)]
    assert len(scorer.score_batch(images)) == 3 and scorer.backend.scored == 3
    plain = load_scorer(ScorerSpec(model_dir=int8_guarded_artifact, device="cpu", precision="fp32"), cpu=NO_BF16)
    assert plain.runtime["guard_band"] is None and plain.precision == "fp32"
    settings = Settings(model_dir=int8_guarded_artifact, device="cpu", native_bf16="no")
    with live_server(settings) as base:
        runtime = httpx.get(f"{base}/v1/model").json()["runtime"]
    assert runtime["precision"] == "int8" and runtime["backend"] == "onnxruntime"
    assert runtime["guard_band"]["share_rescored"] == 0.12 and "guard band" in runtime["precision_reason"]


def test_the_embedded_model_serves_what_its_real_eye_record_permits() -> None:
    """The shipped artifact's records were measured on >= 300 real photographs (benchmarks/drift_real.py):
    auto serves fp32 where the permitted reduced precision is not native, and never an unpermitted one."""
    cal = load_artifact().calibration
    assert cal.precision_drift, "the embedded model carries no reduced-precision record"
    for prec, record in cal.precision_drift.items():
        assert record["images"] >= 300 and "ODIR-5K validation" in record["photographs"], prec
    permits = cal.permits()
    for cpu in (NO_BF16, WITH_BF16, detect_cpu()):
        choice = resolve(precision="auto", device="cpu", cpu=cpu, permits=permits)
        assert choice.precision in permits
        assert choice.precision != "bf16" or cpu.native_bf16
        if choice.precision != "fp32":  # a reduced precision serves with the guard its record asks for
            assert (choice.guard is None) == (permits[choice.precision].guard is None)
