"""A run's serving option: ``--views 2`` (test-time flip) calibrates and serves both orientations; ``auto``
chooses on the validation eyes (training.evaluation.serving_choice) and the artifact, its calibration, its saved
draws and its card all follow the choice. The option's former spelling (``--test-time-flip off|on|auto``, in
commands recorded before) still runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.artifact import load_artifact
from training.cli import main as train_main
from training.config import TrainConfig
from training.evaluation.ensemble import DRAWS_FILENAME, load_draws
from training.evaluation.serving_choice import ONE_VIEW, TEST_TIME_FLIP
from training.model_card import portable
from training.warm_start import _card_command


def _fit(data: Path, run: Path, mode: str, *extra: str) -> None:
    assert train_main(["fit", "--data", str(data), "--out", str(run), "--width", "2", "--input-size", "32",
                       "--epochs", "1", "--batch-size", "8", "--eval-samples", "2", "--head-draws", "2",
                       "--no-progress", "--rho-init", "-3",
                       "--device", "cpu", "--views", mode, *extra]) == 0


@pytest.mark.training
def test_on_serves_and_calibrates_both_orientations(tiny_data: Path, tmp_path: Path) -> None:
    _fit(tiny_data, tmp_path / "run", "2", "--mc-samples", "8")
    artifact = load_artifact(tmp_path / "run" / "artifact")
    assert artifact.config.serving.test_time_flip and artifact.serving_draws().samples == 8 * 2 * 2
    assert artifact.serving_draws().passes == 16
    for split in ("val", "test"):  # calibration and the test figures were scored the way the service scores
        assert load_draws(tmp_path / "run" / f"eval_{split}" / DRAWS_FILENAME).probs.shape[0] == 8 * 2 * 2
    assert "**test-time flip**" in artifact.model_card
    assert "**16 forward passes per image (8 draws × 2 views; pass budget 16)**" in artifact.model_card
    assert not (tmp_path / "run" / "eval_val" / "serving_choice.json").exists()  # nothing was chosen
    assert TrainConfig.load(tmp_path / "run" / "config.json").serving_draws() == artifact.serving_draws()


@pytest.mark.training
def test_auto_serves_what_the_validation_eyes_chose_and_says_why(tiny_data: Path, tmp_path: Path) -> None:
    _fit(tiny_data, tmp_path / "run", "auto")
    artifact = load_artifact(tmp_path / "run" / "artifact")
    choice = json.loads((tmp_path / "run" / "eval_val" / "serving_choice.json").read_text())
    assert choice["chosen"] in (ONE_VIEW, TEST_TIME_FLIP)
    flip = choice["chosen"] == TEST_TIME_FLIP
    assert artifact.config.serving.test_time_flip is flip
    assert artifact.calibration.validation["serving_option"] == choice  # the record travels with the artifact
    # the two options spend the same 16 passes: 16 draws x 1 view, or 8 draws x 2 views
    assert artifact.serving_draws().mc_samples == (8 if flip else 16) and artifact.serving_draws().passes == 16
    assert [r["cost"] for r in choice["rows"]] == [16.0, 16.0]
    for split in ("val", "test"):  # the saved draws are the served option's
        assert load_draws(tmp_path / "run" / f"eval_{split}" / DRAWS_FILENAME).probs.shape[0] == 16 * 2
    assert f"Served option: **{choice['chosen']}**, chosen on the {choice['n_images']} validation eyes" \
        in artifact.model_card
    assert ("**test-time flip**: every image" in artifact.model_card) is flip


@pytest.mark.training
def test_finalise_re_serves_a_finished_run_with_another_option(tiny_data: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    _fit(tiny_data, run, "1")
    before = load_artifact(run / "artifact")
    assert not before.config.serving.test_time_flip
    over = ["finalise", "--run", str(run), "--test-time-flip", "on", "--artifact", str(tmp_path / "b")]
    assert train_main(over) == 2  # 16 draws x 2 views is over the budget of 16 passes
    assert "32 forward passes per image, over the pass budget of 16" in capsys.readouterr().err
    assert train_main([*over, "--mc-samples", "8"]) == 0
    after = load_artifact(tmp_path / "b")
    assert after.config.serving.test_time_flip and "**test-time flip**" in after.model_card
    # the card keeps the command that trained the run (a warm start from it reads that line as its parent's
    # training) and names the finalise that re-served it beside it
    fit_line = (run / "command.txt").read_text().strip()
    assert fit_line.startswith("radscreen-train fit --data") and "--views 1" in fit_line
    assert f"- Command: `{portable(fit_line)}`" in after.model_card
    assert "- Re-served from the run's best weights" in after.model_card
    assert "`radscreen-train finalise --run" in after.model_card
    assert _card_command(after.model_card) == portable(fit_line)
    # the same weights, other thresholds (calibrated on both orientations' draws)
    assert after.sha256 != before.sha256
    weights = "weights.safetensors"
    assert (tmp_path / "b" / weights).read_bytes() == (run / "artifact" / weights).read_bytes()
    saved = TrainConfig.load(run / "config.json")  # the run records what its artifact now is
    assert saved.views == "2" and saved.artifact == str(tmp_path / "b")  # --test-time-flip on: its old spelling
    # a run directory without best weights is refused with one line, not a traceback, and its record is kept
    (run / "best.safetensors").unlink()
    assert train_main(["finalise", "--run", str(run), "--views", "1"]) == 2
    assert "best.safetensors" in capsys.readouterr().err
    assert TrainConfig.load(run / "config.json").views == "2"
    # a run made before fit kept its command: the card names the finalise alone, and it says so
    (run / "command.txt").unlink()
    (run / "best.safetensors").write_bytes((run / "artifact" / weights).read_bytes())
    capsys.readouterr()
    assert train_main(["finalise", "--run", str(run), "--artifact", str(tmp_path / "c")]) == 0
    assert "no command.txt" in capsys.readouterr().err
    assert "Command: `radscreen-train finalise --run" in load_artifact(tmp_path / "c").model_card


@pytest.mark.training
def test_finalise_refits_the_operating_point_to_another_bound(tiny_data: Path, tmp_path: Path) -> None:
    """``finalise --max-missed-share`` fits the screening operating point again on the same validation draws:
    a stricter bound answers no more referable eyes no_referable_dr, and the run records the bound it now has."""
    run = tmp_path / "run"
    _fit(tiny_data, run, "1")
    points = {}
    for bound in (0.0, 0.5):
        out = tmp_path / f"bound-{bound}"
        assert train_main(["finalise", "--run", str(run), "--max-missed-share", str(bound),
                           "--artifact", str(out)]) == 0
        calibration = load_artifact(out).calibration
        points[bound] = op = calibration.validation["operating_point"]
        assert op["max_missed_share"] == bound and op["missed_share"] <= bound
        assert op["decision_threshold"] == calibration.decision_threshold
        assert TrainConfig.load(run / "config.json").max_missed_share == bound
    assert points[0.0]["decision_threshold"] <= points[0.5]["decision_threshold"]
    assert points[0.0]["auto_negative_share"] <= points[0.5]["auto_negative_share"]
