"""``--group-by``: the batch job writes one exam row per patient visit beside the per-image rows.

Exam outcomes are checked against the per-image outcomes the same run wrote (through the one rule, whose
every combination is spelled out by hand in tests/models/test_decision.py), and the structural cases by hand:
a patient with one eye is a retake, a failed photograph makes a visible error row, an unparseable name is an
``ungrouped`` row, a rerun (resume) rewrites byte-identical exam rows.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from models.outcome.decision import Eye, ScreeningOutcome, exam_decision
from service.batch.cli import main
from service.batch.exams import exams_path_for
from service.batch.inputs import InputError
from service.batch.job import BatchJobConfig, run_job
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from support.images import fundus_like
from tests.helpers.dicom_files import op_dicom


def _write(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(fundus_like(seed, size=80)).save(path)


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _check_rule(exams: list[dict[str, str]], images: list[dict[str, str]], eye_of: dict[str, Eye]) -> None:
    """Every decided exam row's outcome is the rule applied to its photographs' rows."""
    outcome_of = {r["id"]: r["outcome"] for r in images}
    for exam in exams:
        if exam["error"]:
            continue
        ids = exam["image_ids"].split(";")
        by_eye: dict[Eye, list[ScreeningOutcome]] = {Eye.RIGHT: [], Eye.LEFT: []}
        for i in ids:
            by_eye[eye_of[i]].append(ScreeningOutcome(outcome_of[i]))
        decision = exam_decision(by_eye)
        assert exam["outcome"] == decision.outcome.value
        assert exam["right_outcome"] == decision.eyes[Eye.RIGHT].value
        assert exam["left_outcome"] == decision.eyes[Eye.LEFT].value
        assert exam["outcome_reason"] == decision.reason  # names any retake still needed, as the page does


def _config(folder: Path, output: Path, artifact: Path, **kw: object) -> BatchJobConfig:
    return BatchJobConfig(input=folder, output=output, spec=ScorerSpec(model_dir=artifact, device="cpu"),
                          batch_size=4, chunk_size=2, progress=False, **kw)  # type: ignore[arg-type]


def test_filename_grouping_writes_exam_rows_that_follow_the_rule(
    tmp_path: Path, batch_artifact: Path, batch_scorer: Scorer
) -> None:
    folder = tmp_path / "odir"
    for patient in range(5):
        for k, eye in enumerate(("left", "right")):
            _write(folder / f"{patient}_{eye}.png", seed=10 * patient + k)
    _write(folder / "5_left.png", seed=99)  # patient 5: one eye only
    _write(folder / "6_right.png", seed=98)
    (folder / "6_left.jpg").write_bytes(b"\xff\xd8\xff\xe0 broken")  # patient 6: a failed photograph
    _write(folder / "7_right_2.png", seed=97)  # a second photograph of an eye (suffix _n)
    _write(folder / "7_right.png", seed=96)
    _write(folder / "7_left.png", seed=95)
    _write(folder / "scan.png", seed=94)  # no {patient}_{eye}: ungrouped
    output = tmp_path / "odir.csv"
    result = run_job(_config(folder, output, batch_artifact, group_by="filename"), scorer=batch_scorer)

    assert result.exams_output == exams_path_for(output) == tmp_path / "odir.exams.csv"
    exams = _read(tmp_path / "odir.exams.csv")
    images = _read(output)
    eye_of = {r["id"]: Eye.LEFT if "left" in r["id"] else Eye.RIGHT for r in images}
    by_id = {e["exam_id"]: e for e in exams}
    assert set(by_id) == {"0", "1", "2", "3", "4", "5", "6", "7", ""}
    _check_rule(exams, images, eye_of)
    assert by_id["5"]["outcome"] == "retake_ungradable" and by_id["5"]["right_images"] == "0"
    assert "no photograph of the right eye" in by_id["5"]["outcome_reason"]
    failed = by_id["6"]
    assert failed["outcome"] == "" and failed["failed_images"] == "1" and failed["images"] == "2"
    assert failed["error"].startswith("photographs-failed: 1 of 2 photographs not scored (6_left.jpg)")
    assert by_id["7"]["right_images"] == "2" and by_id["7"]["images"] == "3"
    assert by_id[""]["error"].startswith("ungrouped: scan.png:")
    summary = result.summary["exams"]
    assert summary["count"] == 9 and summary["by_outcome"]["failed"] == 2 and summary["ungrouped_images"] == 1
    assert sum(summary["by_outcome"].values()) == 9
    assert summary["images_per_exam"]["max"] == 3

    # a rerun resumes (nothing rescored) and derives byte-identical exam rows
    before = (tmp_path / "odir.exams.csv").read_bytes()
    again = run_job(_config(folder, output, batch_artifact, group_by="filename"), scorer=batch_scorer)
    assert again.scored_now == 0
    assert (tmp_path / "odir.exams.csv").read_bytes() == before


def test_manifest_patient_and_eye_columns(tmp_path: Path, batch_artifact: Path, batch_scorer: Scorer) -> None:
    root = tmp_path / "m"
    rows = [("a.png", "P1", "OD"), ("b.png", "P1", "OS"), ("c.png", "P2", "left"), ("d.png", "P2", "sideways")]
    for i, (name, _, _) in enumerate(rows):
        _write(root / name, seed=i)
    manifest = root / "manifest.csv"
    manifest.write_text("image,who,side\n" + "".join(f"{n},{p},{e}\n" for n, p, e in rows), encoding="utf-8")
    output = tmp_path / "m.jsonl"
    with pytest.raises(InputError, match="no 'patient' or 'eye' column"):
        run_job(_config(manifest, output, batch_artifact, group_by="patient"), scorer=batch_scorer)
    result = run_job(_config(manifest, output, batch_artifact, group_by="patient", patient_column="who",
                             eye_column="side"), scorer=batch_scorer)
    exams = {e["exam_id"]: e for e in _read(tmp_path / "m.exams.csv")}
    assert exams["P1"]["right_images"] == "1" and exams["P1"]["left_images"] == "1"
    assert exams["P2"]["outcome"] == "retake_ungradable"  # only its left eye has a usable eye cell
    assert exams[""]["error"].startswith("ungrouped: d.png:")
    assert result.summary["exams"]["count"] == 3


def test_dicom_study_grouping(tmp_path: Path, batch_artifact: Path, batch_scorer: Scorer) -> None:
    folder = tmp_path / "dicom"
    folder.mkdir()
    for study in ("1.2.3.1", "1.2.3.2"):
        for k, side in enumerate("RL"):
            data = op_dicom(fundus_like(k + len(study), size=80), laterality=side, study_uid=study)
            (folder / f"{study}-{side}.dcm").write_bytes(data)
    buf = io.BytesIO()
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(buf, "PNG")
    (folder / "other.png").write_bytes(buf.getvalue())  # not DICOM: ungrouped
    output = tmp_path / "d.csv"
    run_job(_config(folder, output, batch_artifact, group_by="study"), scorer=batch_scorer)
    images = _read(output)
    assert all(r["error"] == "" for r in images)  # the DICOM files were scored like any photograph
    exams = {e["exam_id"]: e for e in _read(tmp_path / "d.exams.csv")}
    assert set(exams) == {"1.2.3.1", "1.2.3.2", ""}
    eye_of = {r["id"]: Eye.RIGHT if r["id"].endswith("-R.dcm") else Eye.LEFT for r in images}
    _check_rule([exams["1.2.3.1"], exams["1.2.3.2"]], images, eye_of)
    assert exams[""]["error"].startswith("ungrouped: other.png: not a DICOM file")


def test_cli_group_by_prints_the_exam_counts(tmp_path: Path, batch_artifact: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "f"
    for k, eye in enumerate(("left", "right")):
        _write(folder / f"9_{eye}.png", seed=k)
    code = main(["score", "--input", str(folder), "--output", str(tmp_path / "o.csv"), "--model-dir",
                 str(batch_artifact), "--device", "cpu", "--group-by", "filename", "--no-progress",
                 "--exams-output", str(tmp_path / "exams" / "visits.csv")])
    assert code == 0
    out = capsys.readouterr().out
    assert "exams (patient visits): 1; by exam outcome:" in out
    assert "wrote 1 exam rows to" in out
    assert len(_read(tmp_path / "exams" / "visits.csv")) == 1
