"""Re-serving an artifact at another pass split (training.reserve): same weights, thresholds refitted on the
new draws, a card that says what is served, and a service that serves it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.artifact import ArtifactError, ServingDraws, load_artifact, replace_artifact_file
from service.inference.loading import load_scorer
from service.inference.spec import ScorerSpec
from support.artifacts import build_tiny_artifact
from training.data.manifest import ManifestRow
from training.evaluation.operating_point import screening_operating_point
from training.evaluation.pass_split import PassOption, choose_pass_split
from training.evaluation.uncertainty import mc_uncertainty
from training.reserve import Scored, reserve_artifact

VALIDATION = {"auc": 0.5, "operating_point": {"max_missed_share": 0.05}}
CARD = ("# Model card: tiny-radial-test 0.0.1\n\n## Intended use\nTests only.\n\n## Model\n- Architecture: tiny.\n"
        "- Serving: **16 forward passes per image (8 draws × 2 views; pass budget 16)**: old.\n\n"
        "## Training data\n- Images: train 10, validation 200, test 0 (patient-level split).\n\n"
        "## Training\n- Command: `fit`\n\n## Reduced precision (measured on real photographs)\n- bf16: old.\n\n"
        "## Validation (serving draws)\n- AUC 0.500 old\n\n## Limitations\n- Tiny.\n")


def _split(n: int, draws: int, seed: int, source: str = "odir") -> Scored:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int64)
    logit = 1.5 * (2 * y - 1) + rng.normal(0, 1, n) + rng.normal(0, 0.3, (draws, n))
    rows = [ManifestRow(path=Path(f"{source}/{i}.jpg"), grade=2 * int(y[i]), patient_id=f"{source}{i // 2}",
                        eye="left" if i % 2 else "right", row_no=i + 2, source=source) for i in range(n)]
    return Scored(1 / (1 + np.exp(-logit)), y, rows)


@pytest.fixture
def flip_artifact(tmp_path: Path) -> Path:
    return build_tiny_artifact(tmp_path / "flip", test_time_flip=True, validation=VALIDATION, model_card=CARD)


def test_the_reserved_artifact_serves_the_new_split_with_thresholds_from_its_draws(flip_artifact, tmp_path):
    old = load_artifact(flip_artifact)
    val, test = _split(200, 16, 0), _split(120, 16, 1)
    draws = ServingDraws(mc_samples=16, draw_seed=old.config.serving.draw_seed, head_draws=1, test_time_flip=False)
    sha = reserve_artifact(old, tmp_path / "new", draws=draws, val=val, test=test, choice=None, version="0.0.2",
                           command="benchmarks/pass_split.py --apply new")
    new = load_artifact(tmp_path / "new")
    assert new.sha256 == sha != old.sha256
    weights = "weights.safetensors"
    assert (tmp_path / "new" / weights).read_bytes() == (flip_artifact / weights).read_bytes()
    assert (new.serving_draws().mc_samples, new.serving_draws().views, new.config.version) == (16, 1, "0.0.2")
    u = mc_uncertainty(val.probs)
    op = screening_operating_point(u.probability, u.mutual_information, val.labels, max_missed_share=0.05)
    assert new.calibration.decision_threshold == op.decision_threshold
    assert new.calibration.referral_threshold_mi == op.referral_threshold_mi
    assert new.calibration.precision_drift == {}  # measured at the old draws: fp32 only until measured again
    assert new.calibration.validation["operating_point_test"]["missed"] >= 0
    assert "0.0.1 (8 draws × 2 views)" in new.calibration.validation["reserved_from"]
    card = new.model_card
    assert card.startswith("# Model card: tiny-radial-test 0.0.2\n")
    assert "(16 draws × 1 view; pass budget 16)" in card and "8 draws × 2 views; pass budget" not in card
    assert "Reduced precision" not in card and "AUC 0.500 old" not in card
    assert "## Held-out test split" in card and "## Screening operating point" in card
    assert "test 120 (" in card and "`benchmarks/pass_split.py --apply new`" in card
    assert card.index("## Screening operating point") < card.index("## Limitations")
    scorer = load_scorer(ScorerSpec(model_dir=tmp_path / "new", backend="torch", device="cpu", precision="fp32"))
    assert scorer.model_identity.passes == 16 and scorer.model_identity.to_dict()["test_time_flip"] is False


def test_the_card_names_the_pass_split_choice(flip_artifact, tmp_path):
    old = load_artifact(flip_artifact)
    val = _split(200, 16, 2)
    patients = [r.patient_id for r in val.rows]
    choice = choose_pass_split([PassOption(16, 1, 1, val.probs), PassOption(8, 2, 1, val.probs[::-1].copy(),
                                                                            served=True)],
                               val.labels, patients=patients, sources=["odir"] * 200, budget=16,
                               max_missed_share=0.05, repeats=5, n_bootstrap=50)
    draws = ServingDraws(mc_samples=16, draw_seed=old.config.serving.draw_seed)
    reserve_artifact(old, tmp_path / "new", draws=draws, val=val, test=None, choice=choice, version=None,
                     command="x")
    new = load_artifact(tmp_path / "new")
    assert "- Pass split: **16 draws × 1 view**" in new.model_card
    assert new.calibration.validation["pass_split"]["chosen"] == "16 draws × 1 view"
    assert new.config.pass_budget == 16
    assert new.config.version == "0.0.1"


def test_what_cannot_be_reserved_is_refused(flip_artifact, tmp_path):
    old = load_artifact(flip_artifact)
    val = _split(50, 32, 3)
    over = ServingDraws(mc_samples=16, draw_seed=1, test_time_flip=True)
    with pytest.raises(ArtifactError, match="32 passes, over the artifact's budget of 16"):
        reserve_artifact(old, tmp_path / "a", draws=over, val=val, test=None, choice=None, version=None, command="x")
    ok = ServingDraws(mc_samples=16, draw_seed=1)
    with pytest.raises(ArtifactError, match="new directory"):
        reserve_artifact(old, flip_artifact, draws=ok, val=val, test=None, choice=None, version=None, command="x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ArtifactError, match="not empty"):
        reserve_artifact(old, tmp_path / "full", draws=ok, val=val, test=None, choice=None, version=None, command="x")
    replace_artifact_file(flip_artifact, "int8_ranges.json", b"{}")
    with pytest.raises(ArtifactError, match=r"int8_ranges\.json: measured at the artifact's old draws"):
        reserve_artifact(load_artifact(flip_artifact), tmp_path / "b", draws=ok, val=val, test=None, choice=None,
                         version=None, command="x")
