"""The GPU lease's CPU dry run: scripts/gpu_lease.sh on a tiny configuration, as on a node without the web
stack and without the embedded weights. It reports every step, what it would send against the 64 MiB a
command receives and what it returns against 8 files of 16 MiB; the artifact comes back in parts that
reassemble here; and packed shards train the same model as the image folder, bit for bit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from models.artifact import load_artifact
from support.artifacts import build_tiny_artifact
from support.lease import EMBEDDED_WEIGHTS, LEASE_BATCH, LeaseReport, lease_recipe, scaled_lr
from training.cli import main as train_main
from training.config import TrainConfig
from training.loop import Trainer
from training.parts import PartsError, reassemble, split_artifact

pytestmark = pytest.mark.training
ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20


@pytest.fixture(scope="module")
def shards(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("shards") / "synth"
    assert train_main(["pack", "--data", str(tiny_data), "--out", str(out), "--input-size", "32",
                       "--shard-mib", "0.1", "--workers", "1"]) == 0
    return out


def slim_tree(dest: Path) -> Path:
    """A copy of the tracked tree without the embedded weights: what a lease sends."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    for name in listed.stdout.decode().split("\0"):
        if name and name != EMBEDDED_WEIGHTS and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def test_the_dry_run_reports_every_step_within_the_lease_limits(shards: Path, tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("git is needed to list the tracked tree that a lease sends")
    tree, out = slim_tree(tmp_path / "tree"), tmp_path / "out"
    assert not (tree / EMBEDDED_WEIGHTS).exists()
    # as on a node: the node's python, this slim tree on PYTHONPATH (the script adds it), no web stack
    env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(ROOT / "tests/helpers/no_web_stack")}
    done = subprocess.run(["bash", "scripts/gpu_lease.sh", str(out), "400", "--tiny", "--shards", str(shards),
                           "--work", str(tmp_path / "work")], cwd=tree, env=env, text=True, capture_output=True,
                          timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = {r["step"]: r for r in map(json.loads, (out / "lease.jsonl").read_text().splitlines())}
    sizes = steps["sizes"]
    sent, tree_bytes = (int(sizes[k].split()[0]) for k in ("sent_bytes", "tree_bytes"))
    print(f"dry run: would send {sent / MIB:.1f} MiB (tree without the embedded weights {tree_bytes / MIB:.1f} MiB + "
          f"shards), returns {steps['returned files']['files']} files, largest "
          f"{steps['returned files']['largest_bytes'] / MIB:.2f} MiB")
    assert sizes["status"] == "ok" and sent <= 64 * MIB
    assert tree_bytes < 16 * MIB  # the tree travels without the embedded weights (58 MiB), and the lease needs none
    assert steps["training"]["status"] == "ok" and steps["training throughput"]["images_per_s"] > 0
    assert steps["gpu tests"]["status"] == "ok"
    assert "skipped" in steps["environment"]["onnxruntime_cuda"] or "CUDAExecutionProvider" in \
        steps["environment"]["onnxruntime_cuda"]  # a reported skip, or the provider active: never a crash
    if not torch.cuda.is_available():
        assert all(steps[s]["status"] == "skipped" for s in ("precision drift", "model alone, 512 px"))
    returned = steps["returned files"]
    assert returned["within_limits"] and returned["files"] <= 8 and returned["largest_bytes"] <= 16 * MIB
    assert all(p.stat().st_size <= 16 * MIB for p in out.iterdir())
    sha = reassemble(out, tmp_path / "artifact")
    assert sha == steps["artifact parts"]["artifact_sha256"] == load_artifact(tmp_path / "artifact").sha256
    assert "## returned files: ok" in (out / "lease.md").read_text()


def test_the_report_is_on_disk_after_each_step(tmp_path: Path) -> None:
    report = LeaseReport(tmp_path, budget_s=60)
    report.add("first", "ok", figure=1)
    assert json.loads((tmp_path / "lease.jsonl").read_text())["figure"] == 1  # before any later step
    code, _ = report.run("slow", [sys.executable, "-c", "import time; time.sleep(30)"], share=0.1, cwd=tmp_path)
    assert code is None
    last = json.loads((tmp_path / "lease.jsonl").read_text().splitlines()[-1])
    assert (last["step"], last["status"]) == ("slow", "stopped")


def test_packed_shards_train_the_same_model_as_the_image_folder_bit_for_bit(tiny_data: Path, shards: Path,
                                                                          tmp_path: Path) -> None:
    base = dict(device="cpu", precision="fp32", width=2, input_size=32, epochs=2, nll_epochs=1, batch_size=8,
                eval_samples=2, mc_samples=4, n_bootstrap=5, rho_init=-3.0, grad_sd_samples=0, seed=3)
    folder = TrainConfig(data=str(tiny_data), out=str(tmp_path / "folder"), cache_images=False, **base)  # type: ignore[arg-type]
    packed = TrainConfig(data=str(shards), layout="shards", out=str(tmp_path / "shards"), **base)  # type: ignore[arg-type]
    for config in (folder, packed):
        Trainer(config, progress=False).fit()
    a, b = (torch.load(Path(c.out) / "checkpoint.pt", weights_only=True)["model"] for c in (folder, packed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ha, hb = (json.loads((Path(c.out) / "history.json").read_text()) for c in (folder, packed))
    assert [r["train_nll"] for r in ha] == [r["train_nll"] for r in hb]


def test_reassembly_checks_every_part_before_anything_can_be_loaded(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    artifact = build_tiny_artifact(tmp_path / "tiny")
    assert train_main(["split-artifact", "--artifact", str(artifact), "--out", str(tmp_path / "cli")]) == 0
    assert train_main(["reassemble", "--parts", str(tmp_path / "cli"), "--out", str(tmp_path / "cli-ok")]) == 0
    assert load_artifact(artifact).sha256 in capsys.readouterr().out
    manifest = split_artifact(artifact, tmp_path / "parts", part_bytes=64 * 1024)
    parts = json.loads(manifest.read_text())["parts"]
    assert len(parts) > 1 and all(p["bytes"] <= 64 * 1024 for p in parts)
    assert reassemble(tmp_path / "parts", tmp_path / "ok") == load_artifact(artifact).sha256
    first = tmp_path / "parts" / parts[1]["file"]
    data = bytearray(first.read_bytes())
    data[10] ^= 1
    first.write_bytes(bytes(data))
    with pytest.raises(PartsError, match="truncated or altered"):
        reassemble(tmp_path / "parts", tmp_path / "bad")
    assert not (tmp_path / "bad").exists() and not list(tmp_path.glob(".bad.*"))
    assert train_main(["reassemble", "--parts", str(manifest), "--out", str(tmp_path / "bad")]) == 2
    assert "truncated or altered" in capsys.readouterr().err  # a clear message, no traceback
    first.unlink()
    with pytest.raises(PartsError, match="missing"):
        reassemble(manifest, tmp_path / "bad")
    with pytest.raises(PartsError, match="exists"):
        reassemble(manifest, tmp_path / "ok")


def test_the_lease_trains_at_batch_256_with_the_lr_by_the_square_root_rule() -> None:
    """Batch 256 keeps the host's work per step small against the GPU's (benchmarks/train_step_host.py); Adam's lr
    grows with the square root of the batch from the recipe's 1e-3 at 16, and ρ's group follows it."""
    assert LEASE_BATCH == 256
    assert scaled_lr(16) == pytest.approx(1e-3) and scaled_lr(256) == pytest.approx(4e-3)
    recipe = lease_recipe(size=512, epochs=100, batch=LEASE_BATCH, val_every=5)
    args = dict(zip(recipe[::2], recipe[1::2], strict=True))
    assert (args["--batch-size"], args["--lr"], args["--input-size"]) == ("256", "0.004", "512")
    assert "--rho-lr" not in args
    config = TrainConfig(data="", out="", batch_size=int(args["--batch-size"]), lr=float(args["--lr"]))
    assert config.effective_rho_lr == config.lr
    with pytest.raises(ValueError, match="batch must be >= 1"):
        scaled_lr(0)
