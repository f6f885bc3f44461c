"""Round three, CSV outputs: one rule for every CSV the product writes, and a manifest that cannot stop a job.

The rule (``models.io.csv_cells``): control characters escaped (no raw NUL, no CR/LF making a multi-line cell),
formula triggers guarded by an apostrophe, no cell over a spreadsheet's 32,767 characters. It used to apply to
the per-image CSV only; ``<output>.exams.csv`` passed a manifest's ``=HYPERLINK(...)`` patient cell through.
"""

from __future__ import annotations

import ast
import csv
import io
from pathlib import Path
from typing import Any

import pytest

from models.io.csv_cells import SPREADSHEET_CELL_LIMIT, cell, safe_text, unguard, write_csv
from models.outcome.decision import Eye
from service.batch.exams import Membership, exam_rows, write_exams
from service.batch.inputs import InputItem
from service.batch.job import BatchJobConfig, run_job
from service.batch.output import read_output
from service.inference.loading import load_scorer
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec
from support.images import encode, fundus_like
from support.processes import ROOT

HOSTILE = ['=HYPERLINK("http://evil.example","x")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)", "\t=1", "\r=1",
           "'already quoted"]


@pytest.fixture(scope="module")
def scorer(tiny_artifact: Path) -> Scorer:
    return load_scorer(ScorerSpec(model_dir=tiny_artifact, device="cpu"))


def test_the_rule_cell_by_cell() -> None:
    for text in HOSTILE:
        out = safe_text(text)
        assert not out.startswith(("=", "+", "-", "@", "\t", "\r")), out
    assert [safe_text(t) for t in HOSTILE[:4]] == ["'" + t for t in HOSTILE[:4]]
    assert [unguard(safe_text(t)) for t in HOSTILE[:4]] == HOSTILE[:4]
    assert unguard(safe_text("'already quoted")) == "'already quoted"
    assert safe_text("1.2.3\r\n4") == "1.2.3\\r\\n4" and safe_text("a\x00b\x1bc") == "a\\x00b\\x1bc"
    assert safe_text("x\u2028y\u202ez") == "x\\u2028y\\u202ez"
    assert safe_text("étude ü 眼底") == "étude ü 眼底"  # printable text stays as written
    long = safe_text("y" * 100_000)
    assert len(long) <= SPREADSHEET_CELL_LIMIT and long.endswith("more characters]") and "truncated" in long
    assert len(safe_text("\x00" * 20_000)) <= SPREADSHEET_CELL_LIMIT  # escapes grow 4x: cut after escaping
    assert [cell(v) for v in (None, True, False, -0.5, -3, 1e-300)] == ["", "true", "false", "-0.5", "-3", "1e-300"]


def test_every_csv_writer_goes_through_the_one_rule() -> None:
    """No module of the product builds a csv writer of its own: models/io/csv_cells.py is the only one."""
    writers = []
    for package in ("models", "service", "training"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr in ("writer", "DictWriter") and \
                        isinstance(node.value, ast.Name) and node.value.id == "csv":
                    writers.append(path.relative_to(ROOT).as_posix())
    assert writers == ["models/io/csv_cells.py"]


def _manifest(root: Path, rows: list[tuple[str, str, str]], extra: str = "") -> Path:
    lines = ["image,patient,eye"] + [",".join(csv_quote(v) for v in row) for row in rows]
    path = root / "manifest.csv"
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf-8", newline="")
    return path


def csv_quote(value: str) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerow([value])  # a test writing a hostile manifest, not a product CSV
    return buf.getvalue().rstrip("\r\n")


def _config(source: Path, output: Path, artifact: Path, **kw: Any) -> BatchJobConfig:
    return BatchJobConfig(input=source, output=output, spec=ScorerSpec(model_dir=artifact, device="cpu"),
                          batch_size=4, chunk_size=4, progress=False, **kw)


def test_exam_csv_neutralises_formulas_and_line_breaks_from_the_manifest(tmp_path: Path, tiny_artifact: Path,
                                                                        scorer: Scorer) -> None:
    root = tmp_path / "m"
    root.mkdir()
    patients = [*HOSTILE[:4], "P\r\nX,=1+1"]
    rows = []
    for k, patient in enumerate(patients):
        for j, eye in enumerate(("right", "left")):
            name = f"{k}_{eye}.png"
            (root / name).write_bytes(encode(fundus_like(10 * k + j, size=96)))
            rows.append((name, patient, eye))
    run_job(_config(_manifest(root, rows), tmp_path / "out.csv", tiny_artifact, group_by="patient"), scorer=scorer)
    raw = (tmp_path / "out.exams.csv").read_text(encoding="utf-8")
    assert raw.count("\n") == len(patients) + 1  # one line per exam: no cell spans lines
    with (tmp_path / "out.exams.csv").open(newline="", encoding="utf-8") as fh:
        exam_ids = [r["exam_id"] for r in csv.DictReader(fh)]
    assert exam_ids == ["'" + p for p in HOSTILE[:4]] + ["P\\r\\nX,=1+1"]
    assert all(not e.startswith(("=", "+", "-", "@")) for e in exam_ids)


def test_a_giant_manifest_cell_is_an_error_row_and_the_job_goes_on(tmp_path: Path, tiny_artifact: Path,
                                                                   scorer: Scorer) -> None:
    root = tmp_path / "m"
    root.mkdir()
    for name in ("a_right.png", "a_left.png", "c_right.png"):
        (root / name).write_bytes(encode(fundus_like(len(name), size=96)))
    giant = "x" * (csv.field_size_limit() + 10)  # used to raise _csv.Error: exit 1 and no output at all
    manifest = _manifest(root, [("a_right.png", "P1", "right"), (giant, "P2", "left"),
                                ("a_left.png", "P1", "left"), ("c_right.png", "P3", "right"),
                                ("nul\x00.png", "P4", "left")])
    result = run_job(_config(manifest, tmp_path / "out.csv", tiny_artifact, group_by="patient"), scorer=scorer)
    assert result.rows == 5
    rows = list(read_output(tmp_path / "out.csv"))
    assert rows[1]["error"].startswith("malformed-csv-row: line 3 cannot be read as CSV (field larger than field "
                                       "limit")
    assert all(not rows[i]["error"] for i in (0, 2, 3))  # the rows around it were scored
    text = (tmp_path / "out.csv").read_text(encoding="utf-8")
    assert "\x00" not in text and "nul\\x00.png" in text  # the NUL was written raw
    assert "\x00" not in (tmp_path / "out.exams.csv").read_text(encoding="utf-8")
    assert all(len(c) <= SPREADSHEET_CELL_LIMIT for line in csv.reader(io.StringIO(text)) for c in line)


def test_ten_thousand_photographs_of_one_patient_fit_a_spreadsheet_cell(tmp_path: Path) -> None:
    """The exam row of one patient with 10,000 photographs: its image_ids cell was 160 KB."""
    n = 10_000
    items = [InputItem(i, f"site-with-a-long-folder-name/patient-0001/photo-{i:05d}_right.png", f"/x/{i}.png", None)
             for i in range(n)]
    rows = [{"id": item.id, "outcome": "no_referable_dr", "error": ""} for item in items]
    groups = {i: Membership("patient-0001", Eye.RIGHT if i % 2 else Eye.LEFT) for i in range(n)}
    exams = exam_rows(rows, items, groups, "0" * 64)
    assert len(";".join(exams[0]["image_ids"])) > 5 * SPREADSHEET_CELL_LIMIT
    write_exams(tmp_path / "e.csv", exams)
    with (tmp_path / "e.csv").open(newline="", encoding="utf-8") as fh:
        [row] = list(csv.DictReader(fh))
    assert all(len(v) <= SPREADSHEET_CELL_LIMIT for v in row.values())
    ids = row["image_ids"].split(";")
    assert ids[0] == items[0].id and ids[-1].startswith("... and ") and ids[-1].endswith(
        "more (every id is in the per-image results)")
    shown = len(ids) - 1
    assert ids[-1] == f"... and {n - shown} more (every id is in the per-image results)"
    assert row["images"] == str(n) and row["outcome"] == "no_referable_dr"


def test_write_csv_is_what_every_writer_calls(tmp_path: Path) -> None:
    buf = io.StringIO()
    assert write_csv(buf, ["id", "p"], [["=1", 0.25], [None, True]]) == 2
    assert buf.getvalue() == "id,p\r\n'=1,0.25\r\n,true\r\n"
