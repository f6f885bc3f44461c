"""The batch job's model flags reach the scorer: strategy, K, backend, pixel limit, RADSCREEN_MODEL_DIR."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from service.batch.cli import main
from service.batch.inputs import discover_folder
from service.batch.output import read_output
from service.batch.rows import scored_row
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from service.screening.payload import score_payload


def test_flags_and_variables_shape_the_scorer_of_the_job(
    make_folder: Callable[..., Path], batch_artifact: Path, batch_scorer: Scorer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = make_folder(4, corrupt=False)
    big = np.zeros((120, 120, 3), dtype=np.uint8)
    big[30:90, 30:90, 0] = 180  # 120 x 120 = 14400 pixels: over the --max-pixels below
    Image.fromarray(big).save(folder / "big.png")
    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.setenv("RADSCREEN_MODEL_DIR", str(batch_artifact))  # no --model-dir: the variable is used
    monkeypatch.setenv("RADSCREEN_BACKEND", "onnxruntime")  # overridden by --backend
    monkeypatch.setenv("RADSCREEN_MC_SAMPLES", "4")  # K = 4 instead of the artifact's
    out, summary = tmp_path / "r.jsonl", tmp_path / "s.json"
    code = main(["score", "--input", str(folder), "--output", str(out), "--summary", str(summary), "--no-progress",
                 "--device", "cpu", "--backend", "torch", "--strategy", "grouped", "--max-pixels", "10000"])
    assert code == 0
    runtime = json.loads(summary.read_text())["runtime"]
    assert (runtime["backend"], runtime["strategy"], runtime["strategy_requested"]) == ("torch", "grouped", "grouped")

    rows = {r["id"]: r for r in read_output(out)}
    assert rows["big.png"]["error"].startswith("image-too-large: ") and rows["big.png"]["outcome"] is None
    assert rows["big.png"]["model_sha256"] == batch_scorer.model_identity.sha256

    # every scored row equals the scorer the same spec describes (one batched forward, as the job ran it)
    reference = load_scorer(ScorerSpec(model_dir=batch_artifact, device="cpu", backend="torch", strategy="grouped",
                                       mc_samples=4, max_pixels=10_000))
    items = [it for it in discover_folder(folder).items if it.error is None and it.id != "big.png"]
    prepared = [prepare_image(it.file.read_bytes(), reference.pipeline) for it in items]  # type: ignore[union-attr]
    for it, score in zip(items, reference.score_batch(prepared), strict=True):
        assert rows[it.id] == scored_row(it, score_payload(score, reference))
    # and K = 4 is not the artifact's K: the default scorer answers differently
    default = batch_scorer.score_batch(prepared)
    assert any(abs(rows[it.id]["mutual_information"] - d.mutual_information) > 1e-9
               for it, d in zip(items, default, strict=True))
    assert rows[items[0].id]["model_sha256"] == batch_scorer.model_identity.sha256


def test_decode_timeout_bounds_each_image_of_the_job(batch_artifact: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The service's decode deadline holds in the batch job too (``--decode-timeout-s``, RADSCREEN_DECODE_TIMEOUT_S):
    an image past it is its own ``image-too-complex`` row and the job goes on; out of range is refused (exit 2)."""
    monkeypatch.chdir(tmp_path)  # no stray .env
    folder = tmp_path / "in"
    folder.mkdir()
    noise = np.random.default_rng(0).integers(0, 256, (1600, 1600, 3), dtype=np.uint8)  # ~7.7 MB: 470 reads
    Image.fromarray(noise).save(folder / "slow.png", compress_level=0)
    args = ["score", "--input", str(folder), "--model-dir", str(batch_artifact), "--no-progress", "--device", "cpu"]

    assert main([*args, "--output", str(tmp_path / "fast.csv"), "--decode-timeout-s", "0.001"]) == 0
    [row] = read_output(tmp_path / "fast.csv")
    assert row["error"].startswith("image-too-complex: Decoding took longer than 0.001 s"), row
    assert "--decode-timeout-s" in row["error"] and row["outcome"] is None

    assert main([*args, "--output", str(tmp_path / "default.csv")]) == 0  # 10 s: the same file decodes
    [row] = read_output(tmp_path / "default.csv")
    assert not (row["error"] or "").startswith("image-too-complex"), row

    assert main([*args, "--output", str(tmp_path / "zero.csv"), "--decode-timeout-s", "0"]) == 2
    assert "--decode-timeout-s (or RADSCREEN_DECODE_TIMEOUT_S)" in capsys.readouterr().err
