"""Training, calibration and serving see the same pixels: the scores that fit an artifact's thresholds
(``training.predict.mc_probabilities`` over a ``ManifestDataset`` with the artifact's transform, as
``finalise``, ``benchmarks/pass_split.py`` and ``training.reserve`` score the validation eyes) equal the
service's scores of the same files (``service.inference.prepare_image`` + the scorer), with and without the
preprocessing cache, one view and test-time flip, on both CPU backends."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.artifact import load_artifact
from models.image.preprocessing import FOV_LOCAL_MEAN
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import BackendSetting, ScorerSpec
from support.artifacts import build_tiny_artifact
from support.images import encode, synthetic_jpegs
from training.data.dataset import ManifestDataset
from training.data.manifest import ManifestRow
from training.evaluation.uncertainty import mc_uncertainty
from training.predict import mc_probabilities


def _files(folder: Path) -> list[Path]:
    """Camera-like JPEGs of several sizes (one not square, one PNG): each takes the decode, crop and resize."""
    folder.mkdir()
    photos = synthetic_jpegs(3, 192, seed=7) + synthetic_jpegs(2, 300, seed=8)
    paths = []
    for i, data in enumerate(photos):
        path = folder / f"eye{i}.jpg"
        path.write_bytes(data)
        paths.append(path)
    wide = np.zeros((200, 260, 3), np.uint8)  # a frame wider than tall, the disc off centre
    yy, xx = np.mgrid[:200, :260]
    wide[np.hypot(yy - 100, xx - 140) < 90] = (170, 80, 40)
    (folder / "wide.png").write_bytes(encode(wide, "PNG"))
    return [*paths, folder / "wide.png"]


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
@pytest.mark.parametrize("flip", [False, True], ids=["one-view", "flip"])
@pytest.mark.parametrize("cached", [False, True], ids=["decoded", "cached"])
def test_training_scores_are_the_services(tmp_path: Path, backend: BackendSetting, flip: bool, cached: bool) -> None:
    art_dir = build_tiny_artifact(tmp_path / "art", test_time_flip=flip, head_draws=2, preprocessing=FOV_LOCAL_MEAN)
    art = load_artifact(art_dir)
    files = _files(tmp_path / "eyes")
    rows = [ManifestRow(path=p, grade=2 * (i % 2), patient_id=f"p{i}", eye=None, row_no=i + 2)
            for i, p in enumerate(files)]
    dataset = ManifestDataset(rows, transform=art.image_transform())
    if cached:
        dataset.use_cache(tmp_path / "cache")
    probs, _ = mc_probabilities(art.build_model(), dataset, mean=art.config.input.mean, std=art.config.input.std,
                                draws=art.serving_draws())
    assert probs.shape == (art.serving_draws().samples, len(files))
    trained = mc_uncertainty(probs)

    scorer = load_scorer(ScorerSpec(model_dir=art_dir, backend=backend, device="cpu", precision="fp32"))
    served = scorer.score_batch([prepare_image(p.read_bytes(), scorer.pipeline) for p in files])

    assert np.ptp(trained.probability) > 1e-3  # the images differ, so a mix-up of images would show
    # the flip is one function on both sides (models.nn.draws.run_views): torch agrees to the bit here, ONNX
    # Runtime's kernels to ~1e-8
    np.testing.assert_allclose([s.probability for s in served], trained.probability, rtol=0, atol=1e-6)
    np.testing.assert_allclose([s.mutual_information for s in served], trained.mutual_information, rtol=0, atol=1e-7)
