"""The ship rule as the arms lease applies it on the node (training.ship_check): the lesion photographs are
answered with the artifact's own thresholds, and a model ships only when none is answered no_referable_dr and it
is above its warm start on validation from every source."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from support.artifacts import build_tiny_artifact
from training.ship_check import main, ship_check, validation_against_start


def _history(run: Path, kept: dict[str, float], start: dict[str, float]) -> Path:
    run.mkdir(parents=True, exist_ok=True)

    def row(epoch: int, nll: float, aucs: dict[str, float]) -> dict[str, object]:
        return {"epoch": epoch, "val_nll": nll, "val_auc": aucs["pooled"],
                **{f"val_auc/{s}": v for s, v in aucs.items() if s != "pooled"}}

    history = [row(0, 0.40, start), {"epoch": 1, "val_nll": None, "val_auc": None}, row(2, 0.30, kept),
               row(3, 0.35, {k: v + 0.05 for k, v in kept.items()})]  # epoch 3 has a higher AUC but is not kept
    (run / "history.json").write_text(json.dumps(history))
    return run


@pytest.fixture()
def photos(tiny_data: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "photos"
    folder.mkdir()
    for source in sorted((tiny_data / "train").glob("*.jpeg"))[:5]:
        shutil.copy(source, folder / source.name)
    (folder / "notes.txt").write_text("not a photograph")  # ignored: only image files are read
    return folder


START = {"pooled": 0.78, "odir": 0.80, "eyepacs": 0.61}
BETTER = {"pooled": 0.84, "odir": 0.85, "eyepacs": 0.72}


def test_the_kept_epoch_is_the_lowest_validation_nll_and_epoch_0_is_the_warm_start(tmp_path: Path) -> None:
    kept, start = validation_against_start(_history(tmp_path / "run", BETTER, START))
    assert kept == BETTER and start == START
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "history.json").write_text(json.dumps([{"epoch": 1, "val_nll": 0.3, "val_auc": 0.8}]))
    with pytest.raises(ValueError, match="no validated epoch 0"):
        validation_against_start(tmp_path / "bare")


def test_a_model_that_refers_every_lesion_photograph_and_beats_its_start_ships(photos: Path, tmp_path: Path) -> None:
    artifact = build_tiny_artifact(tmp_path / "refers", decision_threshold=1e-9, referral_threshold_mi=math.log(2))
    result = ship_check(artifact, _history(tmp_path / "run", BETTER, START), photos)
    assert result.photos == 5 and result.outcomes["refer_referable_dr"] == 5
    assert result.no_referable_dr == [] and result.beats_start and result.ships


def test_one_photograph_answered_no_referable_dr_stops_the_ship(photos: Path, tmp_path: Path) -> None:
    artifact = build_tiny_artifact(tmp_path / "misses", decision_threshold=1 - 1e-9, referral_threshold_mi=math.log(2))
    result = ship_check(artifact, _history(tmp_path / "run", BETTER, START), photos)
    assert result.outcomes["no_referable_dr"] == 5 and result.beats_start and not result.ships
    assert result.no_referable_dr == sorted(p.name for p in photos.glob("*.jpeg"))  # named, for the note


def test_falling_below_the_start_on_one_source_stops_the_ship(photos: Path, tmp_path: Path) -> None:
    artifact = build_tiny_artifact(tmp_path / "refers", decision_threshold=1e-9, referral_threshold_mi=math.log(2))
    worse_eyepacs = {**BETTER, "eyepacs": 0.60}  # pooled and ODIR up, EyePACS below its start
    result = ship_check(artifact, _history(tmp_path / "run", worse_eyepacs, START), photos)
    assert result.no_referable_dr == [] and not result.beats_start and not result.ships


def test_the_cli_writes_json_and_refuses_an_empty_folder(photos: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    artifact = build_tiny_artifact(tmp_path / "refers", decision_threshold=1e-9, referral_threshold_mi=math.log(2))
    run = _history(tmp_path / "run", BETTER, START)
    assert main(["--artifact", str(artifact), "--run", str(run), "--photos", str(photos),
                 "--out", str(tmp_path / "check.json")]) == 0
    assert json.loads((tmp_path / "check.json").read_text())["ships"] is True
    (tmp_path / "empty").mkdir()
    assert main(["--artifact", str(artifact), "--run", str(run), "--photos", str(tmp_path / "empty")]) == 2
    assert "no photographs" in capsys.readouterr().err
