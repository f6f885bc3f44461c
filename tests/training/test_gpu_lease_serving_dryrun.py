"""The GPU lease's serving step, dry run on the CPU: scripts/gpu_lease.sh --serving PACK --serving-only --tiny on a
tiny artifact packed as the embedded model travels (lossless weight planes) and a few photographs. Every row of
the report appears, each benchmark's rows before the step that ran it ends (appended as measured), and a step
stopped at its time limit keeps the rows it measured before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.artifacts import build_tiny_artifact
from support.images import synthetic_jpegs
from support.lease import LeaseReport
from support.lease_serving import web_stack
from support.weight_planes import PLANES, PlanesError, pack, unpack

pytestmark = pytest.mark.training
ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "lease.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def serving_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What a session carries, made by scripts/serving_pack.py: the tiny artifact and three photographs."""
    tmp = tmp_path_factory.mktemp("serving")
    artifact = build_tiny_artifact(tmp / "tiny")
    (tmp / "photos").mkdir()
    for i, data in enumerate(synthetic_jpegs(3, 256, seed=7)):
        (tmp / "photos" / f"{i}.jpg").write_bytes(data)
    done = subprocess.run([sys.executable, "scripts/serving_pack.py", "--out", str(tmp / "pack"), "--model-dir",
                           str(artifact), "--photos-from", str(tmp / "photos")], cwd=ROOT, text=True,
                          capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 of 3 photographs" in done.stdout and "of 64 MiB" in done.stdout
    assert not (tmp / "pack" / "model" / "weights.safetensors").exists() and (tmp / "pack" / "model" / PLANES).is_file()
    return tmp / "pack"


def test_the_serving_dry_run_writes_every_row_as_it_is_measured(serving_pack: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PY": sys.executable}
    done = subprocess.run(["bash", "scripts/gpu_lease.sh", str(out), "200", "--serving", str(serving_pack),
                           "--serving-only", "--tiny", "--device", "cpu", "--work", str(tmp_path / "work")],
                          cwd=ROOT, env=env, text=True, capture_output=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = rows(out)
    steps = [r["step"] for r in got]
    assert steps[:3] == ["environment", "sizes", "serving: model"] and steps[-1] == "returned files"
    assert "training" not in steps  # --serving-only: no training step
    by = {r["step"]: r for r in got}
    manifest = json.loads((serving_pack / "model" / "manifest.json").read_text())
    assert by["serving: model"]["weights_sha256"] == manifest["files"]["weights.safetensors"]
    for step in ("serving: web stack", "serving: gpu tests", "serving: model alone", "serving: service",
                 "serving: precision drift"):
        assert by[step]["status"] == "ok", by[step]
    alone = [r for r in got if r["step"] == "model alone" and r["status"] == "ok"]
    assert {(r["path"], r["batch"]) for r in alone} == {(p, b) for p in ("drawn-loop", "onnx") for b in (1, 2)}
    assert all(r["images_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0 and r["device"] == "cpu" for r in alone)
    loop = [r for r in got if r["step"] == "service closed loop"]
    assert [r["clients"] for r in loop] == [1, 2]
    assert all(r["images_per_s"] > 0 and r["errors"] == 0 and r["p99_ms"] >= r["p50_ms"] for r in loop)
    share = by["service share of model alone"]
    assert 0 < share["share"] == pytest.approx(share["best_images_per_s"] / share["model_alone_images_per_s"],
                                                    abs=1e-3)  # the share is written to 3 decimals
    drift = [r for r in got if r["step"] == "precision drift" and r["status"] == "ok"]
    assert drift and all(r["images"].startswith("3 photographs of") for r in drift)
    assert all(r["max_abs_dp"] < 1e-4 and r["outcome_flips"] == 0 for r in drift if "fp32" in r["mode"])
    # incrementally: each benchmark's rows are on disk before the row of the step that ran it (written when its
    # process ended), on the report's one clock
    for bench, step in (("model alone", "serving: model alone"), ("service closed loop", "serving: service"),
                        ("precision drift", "serving: precision drift")):
        assert max(i for i, s in enumerate(steps) if s == bench) < steps.index(step)
    at = [float(r["at_s"]) for r in got]
    assert at == sorted(at)
    md = (out / "lease.md").read_text()
    assert "## model alone: ok" in md and "## service closed loop: ok" in md and "- p99_ms:" in md


def test_a_step_stopped_at_its_limit_keeps_the_rows_it_measured(tmp_path: Path) -> None:
    """bench_core measures batch 1 quickly, then a batch it cannot finish within the step's limit: the batch-1
    rows it appended stay, followed by the step's row saying it was stopped."""
    report = LeaseReport(tmp_path, budget_s=100)
    report.add("environment", "ok")
    code, _ = report.run("serving: model alone", [
        sys.executable, "benchmarks/bench_core.py", "--device", "cpu", "--width", "2", "--size", "32", "--k", "2",
        "--batch", "1,4096", "--repeats", "200", "--modes", "onnx", "--threads", "1", "--report", str(tmp_path)],
        share=0.2, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert code is None
    got = rows(tmp_path)
    assert [r["step"] for r in got] == ["environment", "model alone", "serving: model alone"]
    assert (got[1]["batch"], got[1]["status"]) == (1, "ok") and got[1]["images_per_s"] > 0
    assert got[2]["status"] == "stopped" and float(got[1]["at_s"]) <= float(got[2]["at_s"])


def test_the_weights_travel_bit_for_bit_and_an_altered_pack_is_refused(tmp_path: Path) -> None:
    artifact = build_tiny_artifact(tmp_path / "tiny")
    pack(artifact, tmp_path / "pack")
    sha = unpack(tmp_path / "pack", tmp_path / "back")
    assert (tmp_path / "back" / "weights.safetensors").read_bytes() == (artifact / "weights.safetensors").read_bytes()
    assert sha == json.loads((artifact / "manifest.json").read_text())["files"]["weights.safetensors"]
    data = bytearray((tmp_path / "pack" / PLANES).read_bytes())
    data[-3] ^= 1
    (tmp_path / "pack" / PLANES).write_bytes(bytes(data))
    with pytest.raises(PlanesError):
        unpack(tmp_path / "pack", tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_the_embedded_model_packs_small_enough_to_travel(tmp_path: Path) -> None:
    """58 MiB of fp32 weights as planes leave room beside the tree for the web stack and photographs."""
    from models.artifact import DEFAULT_ARTIFACT_DIR

    if not (Path(DEFAULT_ARTIFACT_DIR) / "weights.safetensors").is_file():
        pytest.skip("the embedded weights are not in this tree")
    sizes = pack(Path(DEFAULT_ARTIFACT_DIR), tmp_path / "pack")
    assert sizes["weights_bytes"] > 55 * MIB and sizes["packed_bytes"] < 48 * MIB
    assert unpack(tmp_path / "pack", tmp_path / "back") == json.loads(
        (Path(DEFAULT_ARTIFACT_DIR) / "manifest.json").read_text())["files"]["weights.safetensors"]


def test_a_node_without_the_web_stack_is_named_not_crashed() -> None:
    blocked = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests/helpers/no_web_stack"), str(ROOT)])}
    reason = web_stack(blocked)
    assert reason is not None and "No module named" in reason
    assert web_stack({**os.environ, "PYTHONPATH": str(ROOT)}) is None


def test_a_cpu_onnxruntime_on_a_gpu_node_is_a_skip_not_a_failure() -> None:
    """A lease's node has a CPU build of onnxruntime: asking it for a provider it was built without raises
    ValueError, not ProviderFallbackError, which the gpu tests let through as a failure (and the drift table as a
    crash before its last rows); ``ort_cuda_or_skip`` makes it a skip naming why, and lets other errors fail."""
    from models.nn.draws import materialise_draws
    from models.nn.vgg import VGGConfig, build_vgg16_star
    from models.serving.onnx_backend import OnnxDrawnSession, ProviderFallbackError
    from tests.helpers.gpu import ort_cuda_or_skip

    net = materialise_draws(build_vgg16_star(VGGConfig(width=2, input_size=32)), mc_samples=2, seed=0)
    absent = ["NoSuchExecutionProvider", "CPUExecutionProvider"]  # as CUDA is absent from a CPU build
    with pytest.raises(ValueError, match="providers not available") as raised:
        OnnxDrawnSession(net, providers=absent)
    assert not isinstance(raised.value, ProviderFallbackError)  # what `except ProviderFallbackError` missed
    with pytest.raises(pytest.skip.Exception, match="this onnxruntime has no CUDA provider"):
        ort_cuda_or_skip(lambda: OnnxDrawnSession(net, providers=absent))
    with pytest.raises(ValueError, match="Unknown ONNX graph strategy"):
        ort_cuda_or_skip(lambda: OnnxDrawnSession(net, strategy="sideways"))
    assert ort_cuda_or_skip(lambda: OnnxDrawnSession(net)).mc_samples == 2
