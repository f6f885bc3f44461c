"""The 256 px arms lease's CPU dry run: scripts/gpu_lease_arms.sh trains the full, copy, half and quarter arms at
once from crop shards of a two-copy manifest sent in two folders, as on a node without the web stack; the copy
arm trains for the full arm's steps, the learning-curve arms on nested shares of the patients, and only the
arm that validation chose comes back with its weights (a tiny model at 32 px)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from models.artifact import load_artifact
from tests.helpers.lease import lease_folders

pytestmark = pytest.mark.training
ROOT = Path(__file__).resolve().parents[2]


def _two_copy_manifest(tiny_data: Path, target: Path) -> None:
    """tiny_data's eyes as one source's two copies: every third patient's eyes in a "stretched-256" copy."""
    with (tiny_data / "trainLabels.csv").open() as f:
        labels = list(csv.DictReader(f))
    with target.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["path", "grade", "patient_id", "eye", "source", "copy", "category"])
        for row in labels:
            patient, eye = row["image"].rsplit("_", 1)
            path = tiny_data / "train" / f"{row['image']}.jpeg"
            copy = "stretched-256" if int(patient) % 3 == 0 else "natural-1024"
            out.writerow([path, row["level"], patient, eye, "eyepacs", copy, ""])


def test_the_arms_lease_trains_four_arms_at_once_and_returns_the_chosen_weights(tiny_data: Path,
                                                                               tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.csv"
    _two_copy_manifest(tiny_data, manifest)
    lease = tmp_path / "lease"
    files = lease_folders(manifest, "manifest", lease, "s256", tmp_path)
    (lease / "idrid").mkdir()  # the ship rule's lesion photographs, carried with the last folder
    for photo in sorted((tiny_data / "train").glob("*.jpeg"))[:4]:
        shutil.copy(photo, lease / "idrid" / photo.name)

    out = tmp_path / "out"
    env = {**os.environ, "PY": sys.executable, "LEASE": str(lease), "WORK": str(tmp_path / "work"), "EPOCHS": "3",
           "FIT_EXTRA": "--width 4 --input-size 32 --batch-size 8 --eval-samples 2 --head-draws 2 --val-every 1",
           "PYTHONPATH": str(ROOT / "tests/helpers/no_web_stack")}
    done = subprocess.run(["bash", "scripts/gpu_lease_arms.sh", str(out), "5"], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=1200, check=False)
    log = (out / "lease.log").read_text()
    assert done.returncode == 0, log[-3000:]
    assert f"shards here: {len(files)} of {len(files)}" in log

    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in sorted(out.glob("results.tar.gz.*")))),
                      mode="r:gz") as tar:
        tar.extractall(tmp_path / "back", filter="data")
    back = tmp_path / "back"
    assert len(list(out.iterdir())) <= 8  # what a lease returns
    assert "trained 3 epochs" in (back / "logs" / "full.log").read_text()
    n_train = {arm: json.loads((back / f"run-{arm}" / "data.json").read_text())["n_train"]
               for arm in ("full", "copy", "half", "quarter")}
    assert n_train["quarter"] < n_train["half"] < n_train["full"] < n_train["copy"]
    # the copy arm trains on more images an epoch for fewer epochs: the same number of steps as full
    epochs = {arm: json.loads((back / f"run-{arm}" / "config.json").read_text())["epochs"] for arm in n_train}
    assert epochs["full"] == epochs["half"] == epochs["quarter"] == 3
    assert epochs["copy"] == max(1, round(3 * n_train["full"] / n_train["copy"]))
    assert f"copy arm: {epochs['copy']} epochs" in log
    # validation never holds the stretched copy: both served arms are judged on the same eyes
    n_val = {arm: json.loads((back / f"run-{arm}" / "data.json").read_text())["n_val"] for arm in n_train}
    assert len(set(n_val.values())) == 1

    choice = json.loads((out / "choice.json").read_text())
    assert choice["chosen"] in ("full", "copy")
    other = {"full": "copy", "copy": "full"}[choice["chosen"]]
    # both served arms were put to the ship rule on the node; the chosen one is the better of those that pass it
    checks = {arm: choice["arms"][arm]["ship_check"] for arm in ("full", "copy")}
    assert all(c["photos"] == 4 and sum(c["outcomes"].values()) == 4 for c in checks.values())
    assert choice["ships"] is checks[choice["chosen"]]["ships"]
    if checks[choice["chosen"]]["ships"] == checks[other]["ships"]:
        assert choice["arms"][choice["chosen"]]["val_auc"] >= choice["arms"][other]["val_auc"]
    else:
        assert checks[choice["chosen"]]["ships"]
    assert (back / f"run-{choice['chosen']}" / "ship_check.json").is_file()
    chosen = load_artifact(back / f"artifact-{choice['chosen']}")
    assert chosen.config.input.size == 32 and chosen.config.version == "2.0.0"
    for arm in (other, "half", "quarter"):  # the others come back as their records, without weights
        assert (back / f"artifact-{arm}" / "MODEL_CARD.md").is_file()
        assert not (back / f"artifact-{arm}" / "weights.safetensors").exists()
    assert "50% of the training patients" in (back / "artifact-half" / "MODEL_CARD.md").read_text()
    assert not list(back.rglob("best.safetensors")) and not list(back.rglob("draws.npz"))
