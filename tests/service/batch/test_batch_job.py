"""The whole job with a tiny real model: same answers as the shared Scorer, bad rows, model mismatch."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from service.batch.cli import main
from service.batch.job import BatchJobConfig, parts_dir_for, run_job, scoring_code_digest
from service.batch.output import read_output
from service.batch.parts import PartStoreError
from service.batch.rows import scored_row
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from service.screening.payload import score_payload


def config(input_path: Path, output: Path, model_dir: Path, **kw: object) -> BatchJobConfig:
    return BatchJobConfig(input=input_path, output=output, spec=ScorerSpec(model_dir=model_dir, device="cpu"),
                          progress=False, **kw)  # type: ignore[arg-type]


def test_folder_rows_equal_the_scorer_and_predict_payload(
    make_folder: Callable[..., Path], batch_artifact: Path, batch_scorer: Scorer, tmp_path: Path
) -> None:
    folder = make_folder(10)
    out = tmp_path / "r.jsonl"
    result = run_job(config(folder, out, batch_artifact, batch_size=64), scorer=batch_scorer)
    rows = list(read_output(out))
    [skipped] = [r for r in rows if r["id"] == "notes.txt"]  # an error row in sorted place, never read
    rows.remove(skipped)
    assert skipped["id"] == "notes.txt" and skipped["error"].startswith("not-an-image: skipped: .txt suffix")
    assert skipped["outcome"] is None and skipped["referable_dr_probability"] is None
    assert [r["id"] for r in rows] == ["corrupt.jpg", *sorted(
        f"{'sub/' if i % 3 == 0 else ''}eye{i:03d}.png" for i in range(10))]
    assert result.rows == 12 and result.summary["counts"]["scored"] == 10
    assert result.summary["outcomes"]["failed"]["count"] == 2  # corrupt.jpg and notes.txt
    assert sum(v["count"] for v in result.summary["outcomes"].values()) == 12  # every input counted once

    # the reference: the same shared path, one batched forward over the same images
    from service.batch.inputs import discover_folder

    items = [it for it in discover_folder(folder).items if it.id != "corrupt.jpg" and it.error is None]
    prepared = [prepare_image(it.file.read_bytes(), batch_scorer.pipeline) for it in items]  # type: ignore[union-attr]
    expected = [scored_row(it, score_payload(s, batch_scorer))
                for it, s in zip(items, batch_scorer.score_batch(prepared), strict=True)]
    assert rows[1:] == expected  # identical, value for value

    # one image at a time (as a lone POST /predict would) agrees to float rounding
    for it, row in zip(items[:3], rows[1:4], strict=True):
        [single] = batch_scorer.score_batch([prepare_image(it.file.read_bytes(), batch_scorer.pipeline)])  # type: ignore[union-attr]
        assert (row["referable_dr_probability"] is None if not single.quality.gradable
                else single.probability == pytest.approx(row["referable_dr_probability"], abs=1e-6))
        assert single.mutual_information == pytest.approx(row["mutual_information"], abs=1e-6)

    bad = rows[0]
    assert bad["error"].startswith("undecodable-image: ") and bad["referable_dr_probability"] is None
    assert bad["model_sha256"] == batch_scorer.model_identity.sha256
    # the fixture's dark images are ungradable: retake, deferred to a human for image quality
    dark = [r for r in rows[1:] if r["gradable"] is False]
    assert dark and all(r["outcome"] == "retake_ungradable" and "image_quality" in r["referral_reasons"]
                        and r["label"] == "not_graded" for r in dark)
    assert result.summary["deferred_to_human"]["count"] == sum(r["refer_to_expert"] is True for r in rows)


def test_manifest_bad_rows_all_accounted_for(
    make_folder: Callable[..., Path], batch_artifact: Path, batch_scorer: Scorer, tmp_path: Path
) -> None:
    folder = make_folder(3)
    (tmp_path / "outside.png").write_bytes((folder / "eye001.png").read_bytes())
    (folder / "unreadable.png").mkdir()  # a directory where a file should be
    manifest = folder / "manifest.csv"
    manifest.write_text(
        "study,path\n"
        "s1,eye001.png\n"
        "s2,missing.png\n"
        "s3,corrupt.jpg\n"
        "s4,../outside.png\n"
        "s1,eye002.png\n"
        "s5,unreadable.png\n"
        "s6,sub/eye000.png\n"
    )
    out = tmp_path / "r.csv"
    result = run_job(config(manifest, out, batch_artifact, id_column="study", batch_size=2), scorer=batch_scorer)
    rows = list(read_output(out))
    assert [r["id"] for r in rows] == ["s1", "s2", "s3", "s4", "s1", "s5", "s6"]
    kinds = [r["error"].split(": ")[0] if r["error"] else None for r in rows]
    assert kinds == [None, "file-not-found", "undecodable-image", "path-outside-input-root", "duplicate-id",
                     "not-a-regular-file", None]
    assert result.summary["counts"]["errors_by_type"] == {
        "duplicate-id": 1, "file-not-found": 1, "path-outside-input-root": 1, "undecodable-image": 1,
        "not-a-regular-file": 1}
    assert rows[0]["path"] == str(folder / "eye001.png") and rows[0]["referable_dr_probability"] is not None
    assert rows[3]["path"] == "../outside.png"  # rejected before reading: the value as written


def test_a_different_model_is_refused_unless_restart(
    make_folder: Callable[..., Path], batch_artifact: Path, other_artifact: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = make_folder(2, corrupt=False)
    out = tmp_path / "r.csv"
    args = ["score", "--input", str(folder), "--output", str(out), "--device", "cpu", "--no-progress"]
    assert main([*args, "--model-dir", str(batch_artifact)]) == 0
    first = out.read_bytes()
    assert main([*args, "--model-dir", str(other_artifact)]) == 2
    err = capsys.readouterr().err
    assert "refusing to mix" in err and "--restart" in err and str(parts_dir_for(out)) in err
    assert out.read_bytes() == first  # untouched
    # the results file alone (parts folder deleted) is also protected
    import shutil

    shutil.rmtree(parts_dir_for(out))
    with pytest.raises(PartStoreError, match="not from the loaded model"):
        run_job(config(folder, out, other_artifact))
    assert main([*args, "--model-dir", str(other_artifact), "--restart"]) == 0
    other_sha = load_scorer(ScorerSpec(model_dir=other_artifact, device="cpu")).model_identity.sha256
    assert {r["model_sha256"] for r in read_output(out)} == {other_sha}


def test_a_resume_with_other_scoring_settings_or_code_is_refused(
    make_folder: Callable[..., Path], batch_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Killed, then rerun with another K, or after an upgrade changed the scoring code: the parts folder
    says what differs and nothing is mixed into the results file."""
    folder = make_folder(2, corrupt=False)
    out = tmp_path / "r.csv"
    args = ["score", "--input", str(folder), "--output", str(out), "--device", "cpu", "--no-progress",
            "--model-dir", str(batch_artifact)]
    assert main(args) == 0
    first = out.read_bytes()
    job = json.loads((parts_dir_for(out) / "_job.json").read_text())
    assert job["scoring"]["scoring_code"] == scoring_code_digest() and job["scoring"]["precision"] == "fp32"
    k = job["scoring"]["mc_samples"]
    capsys.readouterr()
    assert main([*args, "--mc-samples", str(k - 1)]) == 2  # fewer draws: more would exceed the pass budget
    assert f"mc_samples {k} -> {k - 1}" in capsys.readouterr().err and out.read_bytes() == first

    (parts_dir_for(out) / "_job.json").write_text(json.dumps(
        {**job, "scoring": {**job["scoring"], "scoring_code": "0" * 16}}))  # as if written by another version
    assert main(args) == 2
    assert f"scoring_code {'0' * 16} -> {scoring_code_digest()}" in capsys.readouterr().err
    assert out.read_bytes() == first
    assert main([*args, "--restart"]) == 0 and out.read_bytes() == first  # same settings, same file


def test_missing_manifest_column_is_a_clear_cli_error(tmp_path: Path, batch_artifact: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "m.csv"
    manifest.write_text("file\na.png\n")
    code = main(["score", "--input", str(manifest), "--output", str(tmp_path / "r.parquet"),
                 "--model-dir", str(batch_artifact), "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"manifest {manifest} has no path column: expected 'image' or 'path'" in err
    assert not (tmp_path / "r.parquet").exists()


def test_an_ungradable_jpeg_is_labelled_not_graded_in_the_csv(batch_artifact: Path, tmp_path: Path) -> None:
    """A blank dark-grey JPEG through the batch CLI: its CSV row says not_graded, never non_referable."""
    import csv

    import numpy as np

    from support.images import encode

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "grey.jpg").write_bytes(encode(np.full((256, 256, 3), 90, np.uint8), "JPEG", quality=90))
    out = tmp_path / "r.csv"
    summary = tmp_path / "summary.json"
    assert main(["score", "--input", str(folder), "--output", str(out), "--model-dir", str(batch_artifact),
                 "--device", "cpu", "--summary", str(summary), "--no-progress"]) == 0
    with out.open(newline="", encoding="utf-8") as f:
        [row] = list(csv.DictReader(f))
    assert row["id"] == "grey.jpg" and row["gradable"].lower() == "false"
    assert row["outcome"] == "retake_ungradable" and row["label"] == "not_graded"
    assert row["referable_dr_probability"] == ""  # no number that reads as a finding for an ungraded photograph
    assert row["mutual_information"] != ""  # the model's uncertainty is still reported
    issues, details = row["quality_issues"].split(";"), row["quality_details"].split(";")
    assert issues and {d.split(":")[0] for d in details} == set(issues)  # every refusal explained in the CSV
    assert all(", needs >= " in d or ", needs <= " in d for d in details), details
    counts = json.loads(summary.read_text())["counts"]
    assert counts["ungradable"] == 1 and counts["by_label_graded"] == {}  # no label counted for it


def test_rows_equal_the_http_predict_answer(make_folder: Callable[..., Path], batch_artifact: Path,
                                            tmp_path: Path) -> None:
    """POST /predict (micro-batches of 1) and the job at --batch-size 1 give the same numbers exactly."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    folder = make_folder(3, corrupt=False)
    out = tmp_path / "r.jsonl"
    run_job(config(folder, out, batch_artifact, batch_size=1))
    rows = list(read_output(out))
    app = create_app(Settings(model_dir=batch_artifact, device="cpu", max_batch_size=1))
    with TestClient(app) as client:
        for _ in range(600):  # the model loads in the background; /readyz turns 200 when it is warm
            if client.get("/readyz").status_code == 200:
                break
            time.sleep(0.05)
        for row in rows:
            if row["error"]:  # notes.txt: reported as not an image, never scored
                assert row["id"] == "notes.txt" and row["error"].startswith("not-an-image: ")
                continue
            data = (folder / row["id"]).read_bytes()
            resp = client.post("/predict", files={"image": (Path(row["id"]).name, data, "image/png")})
            assert resp.status_code == 200, resp.text
            body = resp.json()
            assert row == {**scored_row_from(body, row), "id": row["id"], "path": row["path"]}


def scored_row_from(body: dict[str, object], row: dict[str, object]) -> dict[str, object]:
    """The batch row the HTTP body maps to (the same mapping the job uses)."""
    from service.batch.inputs import InputItem

    return scored_row(InputItem(0, str(row["id"]), str(row["path"]), None), body)
