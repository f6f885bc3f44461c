"""Exams in the batch job (``--group-by``): the per-image rows of one patient visit -> one exam row.

Which photographs form one exam, and which eye each shows, comes from one of three sources:

- ``patient``: a CSV manifest's ``patient`` and ``eye`` columns (names: ``--patient-column``/``--eye-column``;
  eye values ``left``/``right``, also ``L``/``R``/``OS``/``OD``, any case);
- ``filename``: file names of the form ``{patient}_{left|right}`` (the EyePACS and ODIR convention,
  e.g. ``10_left.jpeg``), optionally followed by ``_<n>`` for several photographs of an eye;
- ``study``: DICOM files, grouped by StudyInstanceUID (the visit), the eye from ImageLaterality/Laterality.

Exam rows are derived at the end of the job from the assembled per-image rows (which the job commits
exactly once), so they are as exactly-once and resumable as those rows: a rerun derives the same exam rows
again. Each exam's outcome is :func:`models.decision.exam_decision` of its scored photographs. Nothing is a
silent gap: an exam with a photograph that failed (unreadable file, refused image) is an error row with no
outcome (the exam is not decided from part of its photographs; the error names the failed ones and any
scored photograph already ``refer_referable_dr``), and an image whose exam or eye cannot be told is an
``ungrouped`` error row of its own.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from models.atomic import atomic_write
from models.decision import EXAM_PRECEDENCE, Eye, ScreeningOutcome
from service.batch.inputs import InputError, InputItem, InputSource, RowError
from service.batch.rows import Row, error_kind
from service.exams import exam_fields

GroupBy = Literal["patient", "filename", "study"]
GROUP_BY_CHOICES: tuple[str, ...] = ("patient", "filename", "study")
FAILED = "failed"  # by-outcome key of exams not decided (a photograph failed, or ungrouped images)
UNGROUPED = "ungrouped"
PHOTOGRAPHS_FAILED = "photographs-failed"
EXAM_COLUMNS: tuple[str, ...] = (
    "exam_id", "outcome", "outcome_reason", "right_outcome", "left_outcome", "right_images", "left_images",
    "images", "failed_images", "image_ids", "model_sha256", "error",
)
_EYE_WORDS = {"left": Eye.LEFT, "l": Eye.LEFT, "os": Eye.LEFT, "right": Eye.RIGHT, "r": Eye.RIGHT, "od": Eye.RIGHT}
_FILENAME = re.compile(r"^(?P<patient>.+?)_(?P<eye>left|right)(?:_\d+)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Membership:
    """The exam and eye of one input row, or why they cannot be told."""

    exam: str | None
    eye: Eye | None
    problem: str = ""


def _eye_word(value: str) -> Eye | None:
    return _EYE_WORDS.get(value.strip().lower())


def from_manifest(manifest: Path, items: Sequence[InputItem], *, patient_column: str, eye_column: str
                  ) -> dict[int, Membership]:
    """``--group-by patient``: the manifest's patient and eye cells of each row (by row index)."""
    if manifest.suffix.lower() != ".csv":
        raise InputError("--group-by patient reads a CSV manifest's patient and eye columns; the input is a folder "
                         "(use --group-by filename or study)")
    with manifest.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        names = [f.strip() for f in (reader.fieldnames or [])]
        reader.fieldnames = names
        missing = [c for c in (patient_column, eye_column) if c not in names]
        if missing:
            raise InputError(f"manifest {manifest} has no {' or '.join(map(repr, missing))} column for --group-by "
                             f"patient (found: {', '.join(map(repr, names))}); name them with --patient-column / "
                             "--eye-column")
        records = list(reader)
    out: dict[int, Membership] = {}
    for item in items:
        record = records[item.index] if item.index < len(records) else {}
        patient = str(record.get(patient_column) or "").strip()
        eye = _eye_word(str(record.get(eye_column) or ""))
        if not patient or eye is None:
            out[item.index] = Membership(None, None, f"no patient or no left/right eye in the {patient_column!r} / "
                                         f"{eye_column!r} cells")
        else:
            out[item.index] = Membership(patient, eye)
    return out


def from_filenames(items: Sequence[InputItem]) -> dict[int, Membership]:
    """``--group-by filename``: ``{patient}_{left|right}[_n].ext``; the patient keeps its folder (``site/10``)."""
    out: dict[int, Membership] = {}
    for item in items:
        name = Path(item.path)
        match = _FILENAME.match(name.stem)
        if match is None:
            out[item.index] = Membership(None, None, "the file name is not {patient}_{left|right}")
            continue
        parent = Path(item.id).parent.as_posix()
        patient = match["patient"] if parent in ("", ".") else f"{parent}/{match['patient']}"
        out[item.index] = Membership(patient, Eye(match["eye"].lower()))
    return out


def from_dicom_studies(items: Sequence[InputItem], max_bytes: int) -> dict[int, Membership]:
    """``--group-by study``: StudyInstanceUID and laterality from each DICOM header, read through the job's one
    reader (``service.batch.reading``: regular files only, ``max_bytes`` by ``stat``, the header's bytes only)."""
    from service.batch.reading import read_input_file
    from service.inference.dicom import is_dicom, read_dicom_tags
    from service.inference.dicom_header import HEADER_READ_BYTES
    from service.inference.imaging import ImageRejected

    out: dict[int, Membership] = {}
    for item in items:
        data = read_input_file(str(item.file), max_bytes, head=HEADER_READ_BYTES) if item.file is not None else b""
        if isinstance(data, RowError):
            out[item.index] = Membership(None, None, data.text())
            continue
        if not is_dicom(data):
            out[item.index] = Membership(None, None, "not a DICOM file: no StudyInstanceUID to group by")
            continue
        try:
            tags = read_dicom_tags(data)
        except ImageRejected as exc:
            out[item.index] = Membership(None, None, exc.detail)
            continue
        if tags.study_uid is None or tags.laterality is None:
            out[item.index] = Membership(None, None, "the DICOM header lacks StudyInstanceUID or a R/L laterality")
        else:
            out[item.index] = Membership(tags.study_uid, tags.laterality)
    return out


def memberships(source: InputSource, input_path: Path, group_by: GroupBy, *, patient_column: str = "patient",
                eye_column: str = "eye", max_bytes: int) -> dict[int, Membership]:
    """Each input row's exam and eye, by row index (module docstring); ``max_bytes``: the job's upload limit."""
    if group_by == "patient":
        return from_manifest(input_path, source.items, patient_column=patient_column, eye_column=eye_column)
    if group_by == "filename":
        return from_filenames(source.items)
    if group_by == "study":
        return from_dicom_studies(source.items, max_bytes)
    raise ValueError(f"unknown --group-by {group_by!r}; expected one of: {', '.join(GROUP_BY_CHOICES)}")


@dataclass
class _Exam:
    exam_id: str
    photographs: list[tuple[Eye, Row]] = field(default_factory=list)


def _failed_exam(exam: _Exam, failed: list[Row], sha: str) -> Row:
    referable = sum(1 for _, r in exam.photographs if r.get("outcome") == ScreeningOutcome.REFER_REFERABLE_DR.value)
    note = f"; {referable} scored photograph(s) already refer_referable_dr" if referable else ""
    return {
        "exam_id": exam.exam_id, "outcome": None, "outcome_reason": None, "right_outcome": None, "left_outcome": None,
        "right_images": sum(1 for e, _ in exam.photographs if e is Eye.RIGHT),
        "left_images": sum(1 for e, _ in exam.photographs if e is Eye.LEFT),
        "images": len(exam.photographs), "failed_images": len(failed),
        "image_ids": [str(r["id"]) for _, r in exam.photographs], "model_sha256": sha,
        "error": (f"{PHOTOGRAPHS_FAILED}: {len(failed)} of {len(exam.photographs)} photographs not scored "
                  f"({', '.join(str(r['id']) for r in failed)}); the exam is not decided{note}"),
    }


def exam_rows(rows: Iterable[Row], items: Sequence[InputItem], groups: Mapping[int, Membership], sha: str
              ) -> list[Row]:
    """One row per exam (in order of first appearance), then one ``ungrouped`` error row per ungroupable image.

    ``rows`` are the assembled per-image rows, in the order of ``items``.
    """
    exams: dict[str, _Exam] = {}
    ungrouped: list[Row] = []
    for item, row in zip(items, rows, strict=True):
        member = groups[item.index]
        if member.exam is None or member.eye is None:
            ungrouped.append({**dict.fromkeys(EXAM_COLUMNS), "exam_id": "", "images": 1, "failed_images": 0,
                              "image_ids": [str(row["id"])], "model_sha256": sha,
                              "error": f"{UNGROUPED}: {row['id']}: {member.problem}"})
            continue
        exams.setdefault(member.exam, _Exam(member.exam)).photographs.append((member.eye, row))
    out: list[Row] = []
    for exam in exams.values():
        failed = [r for _, r in exam.photographs if error_kind(r) is not None]
        if failed:
            out.append(_failed_exam(exam, failed, sha))
            continue
        fields = exam_fields([(eye, ScreeningOutcome(str(r["outcome"]))) for eye, r in exam.photographs])
        right, left = fields["eyes"]["right"], fields["eyes"]["left"]
        out.append({
            "exam_id": exam.exam_id, "outcome": fields["outcome"], "outcome_reason": fields["outcome_reason"],
            "right_outcome": right["outcome"], "left_outcome": left["outcome"],
            "right_images": right["photographs"], "left_images": left["photographs"],
            "images": len(exam.photographs), "failed_images": 0,
            "image_ids": [str(r["id"]) for _, r in exam.photographs], "model_sha256": sha, "error": "",
        })
    return out + ungrouped


def exams_path_for(output: Path) -> Path:
    """The exam rows beside the results: ``results.parquet`` -> ``results.exams.csv``."""
    return output.with_name(f"{output.stem}.exams.csv")


def write_exams(path: Path, rows: Sequence[Row]) -> None:
    """Write the exam rows as CSV, atomically (image ids joined by ``;``, empty cells for None)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as tmp, tmp.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(EXAM_COLUMNS)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else ";".join(row[c]) if c == "image_ids" else str(row[c])
                             for c in EXAM_COLUMNS])


def exam_summary(rows: Sequence[Row]) -> dict[str, Any]:
    """Exams by outcome (``failed``: not decided), and photographs per exam."""
    by_outcome = Counter(str(r["outcome"]) if r.get("outcome") else FAILED for r in rows)
    images = [int(r["images"]) for r in rows if not str(r.get("error") or "").startswith(UNGROUPED)]
    keys = [o.value for o in EXAM_PRECEDENCE] + [FAILED]
    return {
        "count": len(rows),
        "by_outcome": {k: by_outcome.get(k, 0) for k in keys},
        "ungrouped_images": sum(1 for r in rows if str(r.get("error") or "").startswith(UNGROUPED)),
        "images_per_exam": {"mean": sum(images) / len(images), "max": max(images)} if images else None,
    }
