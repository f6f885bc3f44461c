"""Part files, the resume index, the final writers and the summary — no model needed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from service.batch.inputs import InputItem, RowError
from service.batch.output import OutputError, output_format, read_output, write_output
from service.batch.parts import ChunkWriter, PartStore, PartStoreError
from service.batch.rows import COLUMNS, Row, error_row
from service.batch.summary import SummaryBuilder, format_summary, plot_summary

SHA = "a" * 64


def scored(i: int, *, p: float, mi: float, reasons: list[str], gradable: bool = True) -> Row:
    outcome = ("retake_ungradable" if not gradable else "grader_review_uncertain" if "uncertain" in reasons
               else "refer_referable_dr" if p >= 0.5 else "no_referable_dr")
    return {
        "id": f"img{i}", "path": f"/data/img{i}.png", "outcome": outcome, "referable_dr_probability": p,
        "label": "referable" if p >= 0.5 else "non_referable", "mutual_information": mi,
        "predictive_entropy": 0.5 + mi, "expected_entropy": 0.5, "gradable": gradable,
        "quality_score": 0.9 if gradable else 0.1, "quality_issues": [] if gradable else ["too_dark"],
        "quality_details": [] if gradable else ["too_dark: mean_luma 0.0412, needs >= 0.1"],
        "refer_to_expert": bool(reasons), "referral_reasons": reasons, "model_sha256": SHA, "error": "",
    }


def sample_rows() -> list[Row]:
    item = InputItem(3, "broken, \"quoted\".jpg", "broken, \"quoted\".jpg", None)
    return [
        scored(0, p=0.1 / 3, mi=1e-17, reasons=[]),
        scored(1, p=0.9, mi=0.2, reasons=["uncertain", "image_quality"], gradable=False),
        scored(2, p=2 / 3, mi=0.05, reasons=["uncertain"]),
        error_row(item, RowError("undecodable-image", "The image, it is corrupt."), SHA),
    ]


def open_store(directory: Path, sha: str = SHA, source: str = "folder:/x", restart: bool = False) -> PartStore:
    return PartStore.open(directory, model_sha256=sha, input_description=source, restart=restart)


def test_parts_are_the_journal_and_survive_reopen(tmp_path: Path) -> None:
    parts = tmp_path / "out.csv.parts"
    rows = sample_rows()
    with open_store(parts) as store:
        writer = ChunkWriter(store, chunk_size=2, flush_seconds=1e9)
        writer.add(rows[:1])  # one row: below chunk size, stays pending
        assert store.done_ids == frozenset()
        writer.add(rows[1:3])  # window boundary with 3 rows >= 2: one part with all three
        assert writer.parts_written == 1 and len(store.done_ids) == 3
        writer.add(rows[3:])
        writer.flush()
    (parts / ".part-000009.jsonl.0123456789ab.tmp").write_text("half a row")  # a killed writer's leftover
    with open_store(parts) as store:
        assert store.done_ids == {r["id"] for r in rows}
        assert store.get("img2") == rows[2]  # exact float round trip through JSON
        assert not list(parts.glob(".*.tmp"))
        store.write_part([rows[0], scored(7, p=0.5, mi=0.0, reasons=[])])  # done id skipped, new one kept
        assert sorted(p.name for p in parts.glob("part-*.jsonl")) == [
            "part-000000.jsonl", "part-000001.jsonl", "part-000002.jsonl"]
        assert [json.loads(x)["id"] for x in (parts / "part-000002.jsonl").read_text().splitlines()] == ["img7"]


def test_other_model_other_input_and_concurrent_jobs_are_refused(tmp_path: Path) -> None:
    parts = tmp_path / "p"
    with open_store(parts) as store:
        store.write_part(sample_rows()[:1])
        with pytest.raises(PartStoreError, match="another batch job is writing"):
            open_store(parts)
        with pytest.raises(PartStoreError, match="cannot join parts"):
            store.write_part([{**sample_rows()[1], "model_sha256": "b" * 64}])
    with pytest.raises(PartStoreError, match=r"model sha256 a{64}, not from the loaded model b{64}.*--restart"):
        open_store(parts, sha="b" * 64)
    with pytest.raises(PartStoreError, match="another input"):
        open_store(parts, source="folder:/y")
    with open_store(parts, sha="b" * 64, restart=True) as store:
        assert store.done_ids == frozenset()


def test_other_scoring_settings_are_refused_by_name(tmp_path: Path) -> None:
    """K, precision or the scoring code changed between a kill and a rerun: refused, never mixed."""
    parts = tmp_path / "p"
    first = {"mc_samples": 16, "precision": "fp32", "scoring_code": "abc"}
    with PartStore.open(parts, model_sha256=SHA, input_description="folder:/x", scoring=first) as store:
        store.write_part(sample_rows()[:1])
    with PartStore.open(parts, model_sha256=SHA, input_description="folder:/x", scoring=dict(first)) as store:
        assert len(store.done_ids) == 1  # the same settings resume
    with pytest.raises(PartStoreError, match=r"other settings \(mc_samples 16 -> 32; precision fp32 -> bf16\); "
                                             r"refusing to mix.*--restart"):
        PartStore.open(parts, model_sha256=SHA, input_description="folder:/x",
                       scoring={**first, "mc_samples": 32, "precision": "bf16"})
    with pytest.raises(PartStoreError, match=r"scoring_code abc -> \(not set\)"):
        PartStore.open(parts, model_sha256=SHA, input_description="folder:/x", scoring={"mc_samples": 16,
                                                                                        "precision": "fp32"})


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_writers_round_trip_every_column_exactly(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"results{suffix}"
    rows = sample_rows()
    assert write_output(path, iter(rows)) == len(rows)
    back = list(read_output(path))
    assert back == [{c: r.get(c) for c in COLUMNS} for r in rows]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_csv_layout_is_one_header_and_plain_cells(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    write_output(path, iter(sample_rows()))
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS)
    details = '"too_dark: mean_luma 0.0412, needs >= 0.1"'  # quoted: the message holds a comma
    assert f",0.7,0.5,false,0.1,too_dark,{details},true,uncertain;image_quality," in lines[2]


def test_unsupported_output_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match=r"use a \.csv, \.jsonl or \.parquet"):
        output_format(tmp_path / "r.xlsx")


def test_summary_counts_outcomes_reasons_and_quantiles(tmp_path: Path) -> None:
    model = {"name": "tiny", "version": "0.0.1", "sha256": SHA}
    builder = SummaryBuilder(decision_threshold=0.5, referral_threshold_mi=0.04, model=model)
    rows = [*sample_rows(), scored(4, p=0.8, mi=0.01, reasons=[])]  # plus one confident referable image
    summary = builder.add_all(rows).build()
    assert summary["title"] == f"Screening outcomes - model tiny 0.0.1 (sha256 {SHA[:12]})"
    # every input once: the four outcomes plus failed files
    assert {k: v["count"] for k, v in summary["outcomes"].items()} == {
        "refer_referable_dr": 1, "grader_review_uncertain": 1, "retake_ungradable": 1, "no_referable_dr": 1,
        "failed": 1}
    assert summary["outcomes"]["refer_referable_dr"]["share_of_inputs"] == pytest.approx(0.2)
    assert summary["counts"] == {"inputs": 5, "scored": 4, "errors": 1,
                                 "errors_by_type": {"undecodable-image": 1}, "ungradable": 1,
                                 "by_label_graded": {"non_referable": 1, "referable": 2}}
    referral = summary["deferred_to_human"]
    assert referral["count"] == 2 and math.isclose(referral["rate"], 2 / 4)
    assert referral["by_reason"] == {"image_quality": {"count": 1, "rate": 1 / 4},
                                     "uncertain": {"count": 2, "rate": 2 / 4}}
    # probability over the graded images only: the ungradable image's 0.9 is not a finding
    prob = summary["distributions"]["referable_dr_probability"]
    assert prob["q00"] == pytest.approx(0.1 / 3) and prob["q100"] == pytest.approx(0.8)
    assert prob["mean"] == pytest.approx(np.mean([0.1 / 3, 2 / 3, 0.8]))
    assert summary["distributions"]["mutual_information"]["q100"] == pytest.approx(0.2)  # every scored image
    text = format_summary(summary)
    assert text.splitlines()[0] == summary["title"]
    assert "  refer_referable_dr: 1 (20.0%)  Refer to an eye-care professional: referable" in text
    assert "  failed: 1 (20.0%)  not scored: see errors\n    undecodable-image: 1" in text
    assert "deferred to a human (refer_to_expert): 2 (50.0% of scored); by reason:" in text
    assert "referable_dr_probability (graded images): median" in text
    json.dumps(summary)  # JSON-ready
    png = tmp_path / "s.png"
    plot_summary(png, builder)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_of_only_errors_has_no_rates() -> None:
    summary = SummaryBuilder().add_all(sample_rows()[3:]).build()
    assert summary["deferred_to_human"]["rate"] is None and summary["distributions"]["mutual_information"] is None
    assert summary["outcomes"]["failed"] == {"count": 1, "share_of_inputs": 1.0, "meaning": "not scored: see errors"}
    assert sum(v["count"] for v in summary["outcomes"].values()) == 1
