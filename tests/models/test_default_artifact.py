"""The embedded default model: verifies, is the full VGG-16*, and says plainly what it is trained on (real ODIR-5K
and EyePACS photographs, research use), how wide its posterior is per layer, and what it is not (clinically
validated)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from models.artifact import DEFAULT_ARTIFACT_DIR, load_artifact
from models.image.preprocessing import FOV_LOCAL_MEAN
from models.nn.vgg import build_vgg16_star, count_parameters


def test_default_artifact_verifies_and_states_its_provenance() -> None:
    artifact = load_artifact()  # the embedded default, hash-verified
    cfg = artifact.config
    assert cfg.training_data.startswith("real: ")
    for source in ("ODIR-5K", "EyePACS"):  # the model (2.0.0's weights) learnt from both programmes, and says so
        assert source in cfg.training_data
    assert "patients split within each source" in cfg.training_data
    assert "research use" in cfg.training_data and "not for clinical use" in cfg.intended_use.lower()
    assert cfg.version == "2.1.0"
    card = artifact.model_card
    for needed in ("ODIR-5K", "EyePACS", "research use", "NOT for clinical use", "NOT validated clinically",
                   "Command:", "Machine:", "seed", "Screening operating point", "Per source", "Pass split:",
                   "Held-out test split", "Reduced precision"):
        assert needed in card, f"model card lacks {needed!r}"
    assert "/work/" not in card and "/home/" not in card  # names the data set, not a path of the training machine
    op = artifact.calibration.validation["operating_point"]
    assert op["decision_threshold"] == artifact.calibration.decision_threshold
    assert op["referral_threshold_mi"] == artifact.calibration.referral_threshold_mi
    assert op["missed_share"] <= op["max_missed_share"]
    assert cfg.architecture.width == 46 and cfg.architecture.layer == "radial"
    assert cfg.input.size in (256, 512)
    assert count_parameters(build_vgg16_star(cfg.architecture)) == 15_207_142
    draws = artifact.serving_draws()
    assert (draws.mc_samples, draws.views, draws.passes, cfg.pass_budget) == (8, 2, 16, 16)  # the design's budget
    assert "16 forward passes per image (8 draws × 2 views; pass budget 16)" in card
    # 1,024 posterior samples per image (docs/results-serving-estimator.md, "Head draws")
    assert cfg.serving.head_draws == 64
    assert "bf16" in artifact.calibration.permits()  # the precision record was measured at this split
    assert 0.0 < artifact.calibration.referral_threshold_mi <= np.log(2)  # ln 2: the operating point defers none
    assert cfg.input.preprocessing == FOV_LOCAL_MEAN  # trained the way the service prepares real photographs
    size = sum(p.stat().st_size for p in Path(DEFAULT_ARTIFACT_DIR).iterdir())
    assert size < 64 * 2**20  # fp32 μ and ρ fit the 64 MB cap


def test_default_card_reports_the_sigma_ratio_of_every_layer_below_the_step_budget_bound() -> None:
    """Each layer's Δρ/(lr·steps) is in the card and below 0.9: σ was not held back by the optimiser's steps."""
    card = load_artifact().model_card
    rows = [line.split("|") for line in card.splitlines()
            if line.startswith(("| features.", "| head |", "| all weights |"))]
    layers = {cells[1].strip(): float(cells[-2]) for cells in rows}
    assert len(layers) == 13 + 2  # 13 convolutions, the head, all weights
    assert all(0.0 < ratio < 0.9 for ratio in layers.values()), layers


def test_default_artifact_serves_the_posterior_that_was_trained() -> None:
    """μ and ρ are stored in fp32: no storage rounding between the trained and the served posterior."""
    with safe_open(str(DEFAULT_ARTIFACT_DIR / "weights.safetensors"), framework="pt") as f:
        dtypes = {f.get_slice(name).get_dtype() for name in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    assert dtypes == {"F32"}
    card = load_artifact().model_card
    assert "Storage: μ and ρ in fp32" in card


def test_default_config_and_calibration_reserialise_byte_for_byte() -> None:
    """The typed schema loses nothing: parsing and writing back gives the stored bytes (and so the same sha)."""
    artifact = load_artifact()
    for name, typed in (("config.json", artifact.config), ("calibration.json", artifact.calibration)):
        written = json.dumps(typed.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"
        assert written.encode() == (DEFAULT_ARTIFACT_DIR / name).read_bytes(), name


@pytest.mark.slow
def test_default_model_scores_a_fundus_image_at_full_size() -> None:
    import io

    from PIL import Image

    from service.inference.loading import load_scorer
    from service.inference.prepare import prepare_image
    from service.inference.spec import ScorerSpec
    from training.synthetic.render import render_fundus

    scorer = load_scorer(ScorerSpec())
    rng = np.random.default_rng(0)
    pixels, _ = render_fundus(rng, 3, size=512)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=92)
    [score] = scorer.score_batch([prepare_image(buf.getvalue(), scorer.pipeline)])
    assert 0.0 <= score.probability <= 1.0
    assert 0.0 <= score.mutual_information <= score.predictive_entropy <= np.log(2) + 1e-9
    assert score.quality.gradable
