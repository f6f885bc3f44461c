"""A GPU lease's carried folders, made as a session would make them for a dry run on the CPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from models.image.preprocessing import FOV_LOCAL_MEAN
from support.artifacts import build_tiny_artifact
from training.cli import main as train_main

ROOT = Path(__file__).resolve().parents[2]


def lease_folders(data: Path, layout: str, lease: Path, prefix: str, tmp: Path) -> list[str]:
    """Crop shards of ``data`` (64 px, train and validation) split over ``lease/<prefix>-a`` and ``-b`` with their
    index in ``lease/<prefix>-index``, and a tiny fp16 warm start in ``lease/init-fp16``; the shard file names."""
    packed = tmp / f"packed-{prefix}"
    assert train_main(["pack", "--data", str(data), "--layout", layout, "--out", str(packed),
                       "--input-size", "64", "--codec", "webp-crop", "--sides", "train,val", "--shard-mib", "0.1",
                       "--cache-dir", str(tmp / "crops"), "--workers", "1"]) == 0
    files = [s["file"] for s in json.loads((packed / "index.json").read_text())["shards"]]
    assert len(files) >= 2
    for folder, part in ((f"{prefix}-a", files[: len(files) // 2]), (f"{prefix}-b", files[len(files) // 2:])):
        (lease / folder).mkdir(parents=True)
        for name in part:
            shutil.copy(packed / name, lease / folder / name)
    (lease / f"{prefix}-index").mkdir()
    shutil.copy(packed / "index.json", lease / f"{prefix}-index" / "index.json")
    parent = build_tiny_artifact(tmp / "parent", width=4, input_size=64, preprocessing=FOV_LOCAL_MEAN)
    subprocess.run([sys.executable, "scripts/artifact_fp16.py", str(parent), str(lease / "init-fp16")], cwd=ROOT,
                   check=True, timeout=120, capture_output=True)
    return files
