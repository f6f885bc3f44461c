"""The 512 px lease's CPU dry run: scripts/gpu_lease_512.sh trains both sizes from crop shards that arrived in
two folders and a warm start made by scripts/artifact_fp16.py, as on a node without the web stack, and returns
the runs and artifacts as parts that join back to what it trained (a tiny model at 64 and 32 px)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from models.artifact import load_artifact
from tests.helpers.lease import lease_folders

pytestmark = pytest.mark.training
ROOT = Path(__file__).resolve().parents[2]


def test_the_512_lease_trains_both_sizes_from_shards_sent_in_parts(tiny_data: Path, tmp_path: Path) -> None:
    lease = tmp_path / "lease"
    files = lease_folders(tiny_data, "eyepacs", lease, "s512", tmp_path)
    index = json.loads((lease / "s512-index" / "index.json").read_text())
    parent = tmp_path / "parent"  # the tiny artifact the fp16 warm start was made from
    with safe_open(str(lease / "init-fp16" / "weights.safetensors"), framework="pt") as f:
        assert {f.get_slice(name).get_dtype() for name in f.keys()} == {"F16"}  # noqa: SIM118 (no __iter__)
    half, full = load_artifact(lease / "init-fp16").state_dict(), load_artifact(parent).state_dict()
    assert torch.equal(half["features.0.weight_mu"], full["features.0.weight_mu"].half().float())  # rounded, no more

    out = tmp_path / "out"
    env = {**os.environ, "PY": sys.executable, "LEASE": str(lease), "WORK": str(tmp_path / "work"),
           "SIZES": "64 32", "FIT_EXTRA": "--width 4 --batch-size 8 --eval-samples 2 --head-draws 2",
           "PYTHONPATH": str(ROOT / "tests/helpers/no_web_stack")}
    done = subprocess.run(["bash", "scripts/gpu_lease_512.sh", "train", str(out), "2", "2", "5"], cwd=ROOT,
                          env=env, text=True, capture_output=True, timeout=900, check=False)
    log = (out / "lease.log").read_text()
    assert done.returncode == 0, log[-3000:]
    assert f"shards here: {len(files)} of {len(files)}, {index['images']} of {index['images']} images" in log
    sums = {name: digest for digest, name in (line.split() for line in (out / "SHA256SUMS").read_text().splitlines())}
    parts = sorted(out.glob("results.tar.gz.*"))
    assert [p.name for p in parts] == sorted(sums) and all(
        hashlib.sha256(p.read_bytes()).hexdigest() == sums[p.name] for p in parts)
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts)), mode="r:gz") as tar:
        tar.extractall(tmp_path / "back", filter="data")
    for size, parent_size in ((64, 64), (32, 64)):
        artifact = load_artifact(tmp_path / "back" / f"artifact-{size}")
        assert artifact.config.input.size == size
        init = json.loads((tmp_path / "back" / f"run-{size}" / "init.json").read_text())
        assert init["input_size"] == parent_size  # the 32 px run started from the 64 px weights
        history = (tmp_path / "back" / f"run-{size}" / "history.csv").read_text().splitlines()
        assert len(history) == 1 + 3  # header, the starting point and two epochs
    assert not list((tmp_path / "back").rglob("best.safetensors"))  # the fp32 copies stay on the node
